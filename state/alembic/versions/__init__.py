"""The state store's Alembic revisions, oldest first by number; see state/migrations.py."""
