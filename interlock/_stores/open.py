"""Open a store by where it lives: a SQLite file's path or a PostgreSQL URL."""

from __future__ import annotations

from pathlib import Path

from interlock._core.journal import Store
from interlock._stores.postgres import PostgresStore, is_postgres_url
from interlock._stores.sqlite import SQLiteStore


def open_store(location: str | Path, *, read_only: bool = False) -> Store:
    """The store at `location`: `postgresql://...` opens a `PostgresStore`, else a path
    opens a `SQLiteStore`. `read_only=True` opens an existing store for reading only.

    A PostgreSQL URL may name its schema with a `schema` query parameter
    (`postgresql://host/db?schema=interlock`); the rest goes to the driver as it is. To
    show a location in a log or a message, `PostgresStore.describe(location)` hides its
    password.
    """
    text = str(location)
    if not is_postgres_url(text):
        return SQLiteStore(text, read_only=read_only)
    dsn, schema = split_schema(text)
    return PostgresStore(dsn, schema=schema, read_only=read_only)


def split_schema(url: str) -> tuple[str, str | None]:
    """A PostgreSQL URL without its `schema` query parameter, and that schema (or None)."""
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schema = next((v for k, v in query if k == "schema"), None)
    rest = urlencode([(k, v) for k, v in query if k != "schema"])
    return urlunsplit(parts._replace(query=rest)), schema or None
