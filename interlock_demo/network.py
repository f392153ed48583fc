"""Network failures in words: which stage of reaching a service failed, and what to do.

`doctor` names them stage by stage before the talk; the engine names the one a live run
met (`live_failure_line`), so a run that cannot reach Stripe or the model says so in one
line instead of a deep traceback.
"""

from __future__ import annotations

import errno
import re
import socket
import ssl
from collections.abc import Iterator
from dataclasses import dataclass

OFFLINE_FIX = "or rehearse with --offline (local emulator, no network needed)"


@dataclass(frozen=True)
class NetworkFailure:
    """Which stage of reaching a service failed, the detail, and what to do."""

    stage: str  # "DNS", "connect", "TLS", "timeout" or "auth"
    detail: str
    fix: str

    def line(self, service: str) -> str:
        """One line for the screen and the run's JSON."""
        return f"the network failed: {service}: {self.stage}: {self.detail}. Fix: {self.fix}"


FIXES = {
    "DNS": "check the venue's network and DNS (a Wi-Fi login page?), " + OFFLINE_FIX,
    "connect": "a firewall or proxy may block port 443: try another network, " + OFFLINE_FIX,
    "TLS": "something intercepts HTTPS (a captive portal or a proxy): log in to the Wi-Fi, "
    + OFFLINE_FIX,
    "timeout": "the network is too slow or drops packets: try another network, " + OFFLINE_FIX,
}
# Text patterns for failures that only arrive as text (a worker's error event).
_TEXT_STAGES = (
    ("DNS", re.compile(r"gaierror|Name or service not known|nodename nor servname|getaddrinfo")),
    ("TLS", re.compile(r"SSLError|SSLCertVerificationError|CERTIFICATE_VERIFY|certificate")),
    (
        "connect",
        re.compile(
            r"ConnectionRefusedError|Connection refused|Network is unreachable|"
            r"No route to host|ConnectionResetError|APIConnectionError|Connection error"
        ),
    ),
    ("timeout", re.compile(r"timed out|TimeoutError|APITimeoutError")),
)


# How a failure that reached the model reads (the agent wraps Anthropic's errors).
_MODEL = re.compile(r"model call failed|AgentError|anthropic", re.IGNORECASE)
_NETWORK_ERRNOS = {errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ENETDOWN, errno.ETIMEDOUT}


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def network_failure(problem: BaseException | str) -> NetworkFailure | None:
    """The network stage that failed, if `problem` (an exception or its text) is one; else None.

    An exception is judged by its causes (a `socket.gaierror` under the SDK's wrappers is
    DNS); text, as a worker reports it, by the names it carries.
    """
    if isinstance(problem, BaseException):
        for e in _chain(problem):
            if isinstance(e, socket.gaierror):
                return _failure("DNS", f"the name did not resolve ({e.strerror or e})")
            if isinstance(e, ssl.SSLError | ssl.CertificateError):
                return _failure("TLS", f"the handshake failed ({short_error(e)})")
            if isinstance(e, TimeoutError | socket.timeout):
                return _failure("timeout", "no answer in time")
            if isinstance(e, ConnectionError) or (
                isinstance(e, OSError) and e.errno in _NETWORK_ERRNOS
            ):
                return _failure("connect", f"no connection ({short_error(e)})")
        problem = f"{type(problem).__name__}: {problem}"
    for stage, pattern in _TEXT_STAGES:
        if pattern.search(problem):
            return _failure(stage, "the request did not get through")
    return None


def network_line(problem: BaseException | str, service: str) -> str | None:
    """`network_failure(problem)` as one line naming `service`, or None if it is not one."""
    failure = network_failure(problem)
    return None if failure is None else failure.line(service)


def live_failure_line(problem: BaseException | str) -> str | None:
    """For a live run: a network failure as one line naming Stripe or the model, else None."""
    if isinstance(problem, BaseException):
        text = " ".join(f"{type(e).__name__}: {e}" for e in _chain(problem))
    else:
        text = problem
    service = "the model (api.anthropic.com)" if _MODEL.search(text) else "Stripe (api.stripe.com)"
    return network_line(problem, service)


def _failure(stage: str, detail: str) -> NetworkFailure:
    return NetworkFailure(stage, detail, FIXES[stage])


def short_error(e: BaseException) -> str:
    """An error's first line, at most 120 characters."""
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    return text if len(text) <= 120 else text[:117] + "..."
