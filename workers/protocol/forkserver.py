"""The fork server's wire: what the supervisor and `workers.zygote` say to each other.

Both ends are AF_UNIX SOCK_SEQPACKET sockets, so a message is one JSON object and never
split or merged. Once everything is imported the fork server says `{"ready": SECONDS}` (its
import time) on the control socket, before it reads a request. Each fork request on the
control socket carries a fresh socket of its own (the child's status socket) and the
child's three standard streams, as file descriptors (SCM_RIGHTS), in the order of
`REQUEST_FDS`. On the status socket the child itself says `{"pid": N}` once it is the
worker's own process (its session and streams set), then the fork server says
`{"exit": CODE}` once it has reaped it (CODE as `subprocess` spells it: a negative signal
number for a signal), or `{"error": "..."}` when it could not fork. End of file on a status
socket before the exit means the fork server is gone, and the child's exit status with it.
"""

from __future__ import annotations

import json
import os
from typing import Any

# The command that starts a fork server: `python -m workers.zygote FD COLUMN ROOM`, where FD
# is the control socket's descriptor it inherits and COLUMN the column whose worker it forks.
MODULE = "workers.zygote"
# The room at the end of a fork server's command line (its last argument, ROOM): a forked
# worker writes its own command line there, so `ps` and psutil show what it is.
TITLE_ROOM = "." * 1024
# The descriptors of one fork request, in this order.
REQUEST_FDS = ("status", "stdin", "stdout", "stderr")
# Largest message either side sends: an environment and a command line.
MAX_MESSAGE = 1 << 16


def encode(message: dict[str, Any]) -> bytes:
    """One message's bytes."""
    data = json.dumps(message).encode()
    if len(data) > MAX_MESSAGE:
        raise ValueError(f"a fork server message of {len(data)} bytes is over {MAX_MESSAGE}")
    return data


def decode(data: bytes) -> dict[str, Any]:
    """One message from its bytes; `ValueError` when it is not a JSON object."""
    message = json.loads(data)
    if not isinstance(message, dict):
        raise ValueError("a fork server message is a JSON object")
    return message


def exit_code(status: int) -> int:
    """A `waitpid` status as `subprocess` reports it: the code, or minus the signal."""
    return os.waitstatus_to_exitcode(status)
