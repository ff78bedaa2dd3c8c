"""The Alembic environment of the state store: env.py, script.py.mako and versions/.

`nodus_gitops.state.migrations` points Alembic's `script_location` at this package
(`nodus_gitops.state:alembic`), so it ships in the wheel and needs no alembic.ini;
`python -m nodus_gitops.state.alembic revision -m MESSAGE` writes the next revision.
"""
