"""Test helper: the HTTP endpoint alone in a process whose file limit is low.

    python tests/helpers/http_server.py NOFILE HEADER_TIMEOUT_S INTERLOCK_HOME

It lowers its own RLIMIT_NOFILE to NOFILE, serves a mock-mode engine on a free loopback
port with that header timeout, prints the port and the token that starts runs (one line,
a space between), and serves until stdin closes. A client
that could make it run out of file descriptors would show up on its stderr as
"Too many open files".
"""

from __future__ import annotations

import resource
import sys

from interlock_demo.engine import Engine, RunChoice
from interlock_demo.settings.config import resolve
from interlock_demo.views.http_api import RunApi


def main() -> int:
    """Serve until stdin closes."""
    nofile, header_timeout_s, home = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, hard))
    config = resolve(mode="mock", env={"INTERLOCK_HOME": home, "PATH": ""})
    engine = Engine(config)
    api = RunApi(
        engine, choice=lambda: RunChoice(config), port=0, header_timeout_s=header_timeout_s
    ).start()
    print(api.port, api.token, flush=True)
    try:
        sys.stdin.read()
    finally:
        api.stop()
        engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
