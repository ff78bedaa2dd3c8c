"""The Alembic environment: migrations run on the connection that
`nodus_gitops.state.migrations` passes in `config.attributes["connection"]`, inside its
transaction (which holds the PostgreSQL advisory lock, or SQLite's write lock), and commit
or roll back with it. The target is the SQLModel metadata of state/models.py, so
autogenerate compares the database with the models.
"""

from __future__ import annotations

from alembic import context
from nodus_gitops.state import migrations

connection = context.config.attributes.get("connection")
if connection is None or context.is_offline_mode():
    raise RuntimeError("the state store migrates through nodus_gitops.state.migrations (and "
                       "python -m nodus_gitops.state.alembic), which pass a connection")
context.configure(connection=connection, **migrations.context_options(connection))
with context.begin_transaction():  # a no-op: the caller's transaction is already open
    context.run_migrations()
