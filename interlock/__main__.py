"""`python -m interlock verify [STORE]`: check a store's receipt chain.

Exit 0 when the chain holds, 1 on any problem, 2 on bad usage (no such file, or a file
that is not an interlock store). The store is opened read-only and never written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from interlock._errors import StoreError
from interlock._store_sqlite import SQLiteStore
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
        "store", nargs="?", help="path of the SQLite store (default: under INTERLOCK_HOME)"
    )
    v.add_argument("--json", action="store_true", help="print the result as JSON")
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return 2 if e.code else 0
    path = Path(args.store) if args.store else default_store_path()
    if not path.is_file():
        print(f"no interlock store at {path}: give the path of a store file", file=sys.stderr)
        return 2
    try:
        # Read-only: checking a store must never change it (no schema, no migration).
        store = SQLiteStore.open_read_only(path)
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
        print(f"{path}: chain of {result.chain_length} receipts ({signed}) {state}")
        for problem in result.problems:
            print(f"  - {problem}")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
