"""`python -m interlock verify [STORE]`: check a store's receipt chain.

STORE is a SQLite file's path or a `postgresql://` URL. Exit 0 when the chain holds, 1 on
any problem, 2 on bad usage (no such file or database, or one that is not an interlock
store). The store is opened read-only (PostgreSQL: `READ ONLY` transactions) and never
written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from interlock._errors import StoreError
from interlock._store_postgres import is_postgres_url
from interlock._stores import describe_store, open_store
from interlock._verify import verify

DEFAULT_STORE_NAME = "interlock.sqlite3"


def default_store_path() -> Path:
    """The store under `INTERLOCK_HOME` (default `.interlock/`), else the demo's under `demo/`."""
    home = Path(os.environ.get("INTERLOCK_HOME") or ".interlock")
    own, demo = home / DEFAULT_STORE_NAME, home / "demo" / DEFAULT_STORE_NAME
    return demo if demo.is_file() and not own.is_file() else own


def main(argv: list[str] | None = None) -> int:
    """Run the command; returns the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m interlock", description=__doc__.splitlines()[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    v = sub.add_parser("verify", help="check the receipt chain of a store")
    v.add_argument(
        "store",
        nargs="?",
        help="path of the SQLite store or a postgresql:// URL (default: under INTERLOCK_HOME)",
    )
    v.add_argument("--json", action="store_true", help="print the result as JSON")
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return 2 if e.code else 0
    location = args.store or str(default_store_path())
    if not is_postgres_url(location) and not Path(location).is_file():
        print(f"no interlock store at {location}: give the path of a store file", file=sys.stderr)
        return 2
    try:
        # Read-only: checking a store must never change it (no schema, no migration).
        store = open_store(location, read_only=True)
    except StoreError as e:
        print(str(e), file=sys.stderr)
        return 2
    try:
        result = verify(store)
    finally:
        store.close()
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        state = "holds" if result.ok else "is BROKEN"
        signed = "signed" if result.signed else "unsigned"
        where = describe_store(location)
        print(f"{where}: chain of {result.chain_length} receipts ({signed}) {state}")
        for problem in result.problems:
            print(f"  - {problem}")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
