"""Whether a database names a PostgreSQL URL or an SQLite file (without loading either
store: commands that only read an SQLite file stay light)."""

from __future__ import annotations

__all__ = ["POSTGRES_SCHEMES", "is_postgres_url"]

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def is_postgres_url(value: object) -> bool:
    """Whether ``value`` names a PostgreSQL database (``postgresql://`` or
    ``postgres://``) rather than an SQLite file."""
    return isinstance(value, str) and value.lower().startswith(POSTGRES_SCHEMES)
