"""A PostgreSQL server for the commands that need one: the one named, else a local one.

`interlock-demo results` and `bench/stores.py` run the sweep and the benchmark on
PostgreSQL too. Without a server named (`--store`, `INTERLOCK_STORE`), they start one from
the `pgserver` package (PostgreSQL's binaries in a wheel, in the `test` extra), in a fresh
temporary folder that is deleted when they finish.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

from interlock import is_postgres_url

# The pip package that ships the server, for messages.
PGSERVER = "pgserver"


def pgserver_missing() -> str | None:
    """Why no local server can be started here, or None when one can."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pgserver  # noqa: F401
    except ImportError:
        return (
            f"no PostgreSQL server: set INTERLOCK_STORE=postgresql://... or install "
            f"{PGSERVER} (pip install -e '.[test]')"
        )
    return None


@contextmanager
def postgres_url(given: str | None = None, *, from_env: bool = True) -> Iterator[str]:
    """`given`, else INTERLOCK_STORE when it names PostgreSQL (and `from_env`), else a
    local server's URL."""
    env = os.environ.get("INTERLOCK_STORE", "") if from_env else ""
    url = given or (env if is_postgres_url(env) else None)
    if url:
        yield url
        return
    with warnings.catch_warnings():
        # platformdirs warns at import when XDG_RUNTIME_DIR is unset (as in CI): harmless.
        warnings.simplefilter("ignore")
        import pgserver

        server = pgserver.get_server(  # type: ignore[attr-defined]
            tempfile.mkdtemp(prefix="ilpg-"), cleanup_mode="delete"
        )
    try:
        yield server.get_uri()
    finally:
        server.cleanup()
