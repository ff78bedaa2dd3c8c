"""Shared fixtures. Real servers live in their own fixture modules, loaded here."""

pytest_plugins = ["tests.fixtures_git", "tests.fixtures_postgres"]
