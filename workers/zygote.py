"""A column's fork server: the standalone worker's imports done once, a worker forked per ask.

    python -m workers.zygote CONTROL_FD COLUMN [ROOM]

A cold worker spends most of its start importing (the library, the stripe SDK, the
store's driver, the column's code: docs/design.md §7). This process does those imports
once when its column starts, says `{"ready": SECONDS}` on its control socket, and then, for
each request on it (`workers.protocol.forkserver`), forks a child that becomes the worker
exactly as `python -m workers.standalone CASE_FILE` would run: a new session, the
request's stdin, stdout and stderr on 0, 1 and 2, its umask, folder, environment and
command line, then `workers.standalone.main`. It answers the child's pid on the request's
status socket, reaps the child when it dies (it is the child's parent, so only it can)
and answers its exit code there.

It starts no thread, ever: a fork copies only the forking thread, so a lock another
thread held would stay held in the child. Before each fork it checks the kernel's count
of its threads and refuses (the supervisor then cold-starts) if it is not one. It exits
when its control socket closes (the supervisor is gone or done with it), SIGKILLing and
reaping whatever children it still has.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import socket
import sys
import time

if __name__ == "__main__":
    # As `workers.standalone` does in its own process: the stripe SDK would import these to
    # pick a default HTTP client a worker never uses (`workers.stripe_sdk`).
    from workers.stripe_sdk import hold_back_for_good

    hold_back_for_good()

from workers.protocol import EXIT_ERROR, EXIT_USAGE
from workers.protocol.forkserver import (
    MAX_MESSAGE,
    MODULE,
    REQUEST_FDS,
    decode,
    encode,
    exit_code,
)


def preload(column: str) -> None:
    """Import everything a worker of `column` imports before its first Stripe call."""
    import workers.standalone  # noqa: F401 - the worker's entry and all it imports
    from workers import stripe_sdk
    from workers.run import story

    stripe_sdk.load()
    from interlock import StripePayments, make_stripe_client  # noqa: F401 - imported lazily

    # What the SDK does on a client's first construction and first request, done here
    # instead of in each worker (about 30 ms of a forked worker's 40 on a quiet machine):
    # two dozen more of its modules; the services a worker calls; and its user-agent's
    # `platform.uname()`, whose processor field runs `uname -p` in a subprocess (cached
    # once read). None of it opens a connection or starts a thread.
    # An SDK that has moved a service costs a worker some speed, never its start.
    client = make_stripe_client("sk_test_MadeUp", timeout_s=1.0, base_url="http://127.0.0.1:9")
    with contextlib.suppress(AttributeError):
        for service in ("payment_intents", "refunds", "transfers"):
            getattr(client.v1, service)
    import platform

    platform.uname().processor  # noqa: B018 - read for its cache

    story(column)  # the column's own module
    if (os.environ.get("INTERLOCK_STORE") or "").startswith(("postgres://", "postgresql://")):
        import psycopg  # noqa: F401 - the store's driver; a connection is the child's own


def retitle(title: str) -> bool:
    """Show `title` as this process's command line (`ps`, psutil), as setproctitle does:
    written over the command line's own memory, whose last byte then is not NUL, which the
    kernel reads as a rewritten title. False when it does not fit (the fork server's
    command line ends with `TITLE_ROOM` bytes of room) or /proc refuses."""
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end: fields 48, 49
        data = title.encode() + b"\0"
        if len(data) >= end - start:
            return False
        with open("/proc/self/mem", "r+b", buffering=0) as mem:
            mem.seek(start)
            mem.write(data.ljust(end - start, b" "))
    except (OSError, ValueError, IndexError):
        return False
    return True


def threads() -> int:
    """How many threads this process has, as the kernel counts them (C threads too)."""
    return len(os.listdir("/proc/self/task"))


def become_worker(
    request: dict[str, object],
    answer: socket.socket,
    fds: list[int],
    keep: list[int],
    parent: int,
) -> None:
    """In the forked child: close the fork server's descriptors (`keep`), take a session
    and the request's streams (`fds`: stdin, stdout, stderr), say its pid on `answer`,
    take the request's umask, folder, environment and command line, run the standalone
    worker (watching `parent`, the fork server, as its supervisor's stand-in), and exit
    with its code."""
    code = EXIT_ERROR
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in keep:
            os.close(fd)  # the fork server's own: control, wakeup pipe, other status sockets
        os.setsid()
        title = request.get("title")
        if isinstance(title, str):
            retitle(title)  # `ps` and psutil show the worker's command line, not ours
        stdin, stdout, stderr = fds
        for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        # Its pid once it is the worker's own process (its session, its streams), from
        # itself: the supervisor never sees a pid that is still half the fork server.
        answer.send(encode({"pid": os.getpid()}))
        answer.close()
        umask = request.get("umask")
        if isinstance(umask, int):
            os.umask(umask)
        cwd = request.get("cwd")
        if isinstance(cwd, str):
            os.chdir(cwd)
        env = request.get("env")
        argv = request.get("argv")
        assert isinstance(env, dict) and isinstance(argv, list)
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in env.items()})
        sys.argv = ["workers.standalone", *map(str, argv)]
        from workers import process
        from workers.standalone import main

        process.PARENT = parent
        code = main(sys.argv[1:])
    except SystemExit as e:
        code = 0 if e.code is None else e.code if isinstance(e.code, int) else EXIT_ERROR
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(code)


def serve(control: socket.socket) -> None:
    """Answer fork requests on `control` until it closes."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    # A handler, not SIG_DFL: the wakeup fd is written only for a handled signal.
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    children: dict[int, socket.socket] = {}

    def reap() -> None:
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            answer = children.pop(pid, None)
            if answer is not None:
                # An OSError: the supervisor stopped listening for this one.
                with contextlib.suppress(OSError):
                    answer.send(encode({"exit": exit_code(status)}))
                answer.close()

    with selectors.EpollSelector() as sel:
        sel.register(control, selectors.EVENT_READ)
        sel.register(wake_r, selectors.EVENT_READ)
        try:
            while True:
                for key, _ in sel.select():
                    if key.fileobj is control:
                        try:
                            data, fds, _, _ = socket.recv_fds(
                                control, MAX_MESSAGE, len(REQUEST_FDS)
                            )
                        except ConnectionError:
                            return
                        if not data:
                            for fd in fds:
                                os.close(fd)
                            return
                        own = [control.fileno(), wake_r, wake_w, sel.fileno()]
                        own += [s.fileno() for s in children.values()]
                        _fork(data, fds, children, own)
                    else:
                        try:
                            while os.read(wake_r, 512):
                                pass
                        except BlockingIOError:
                            pass
                        reap()
        finally:
            for pid in list(children):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            for pid in list(children):
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)
                children.pop(pid).close()


def _fork(
    data: bytes,
    fds: list[int],
    children: dict[int, socket.socket],
    own: list[int],
) -> None:
    """Fork one worker for the request `data` with its descriptors `fds`; `own` are the
    fork server's descriptors, which the child closes."""
    if len(fds) != len(REQUEST_FDS):
        for fd in fds:
            os.close(fd)
        return  # no status socket to answer on: the supervisor sees its own socket's EOF
    answer = socket.socket(fileno=fds[0])
    try:
        request = decode(data)
        count = threads()
        if count != 1:
            raise RuntimeError(
                f"the fork server has {count} threads, and a fork would copy only one of them"
            )
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:
            become_worker(request, answer, fds[1:], own, parent)
        children[pid] = answer
    except (OSError, ValueError, RuntimeError) as e:
        with contextlib.suppress(OSError):
            answer.send(encode({"error": f"{type(e).__name__}: {e}"}))
        answer.close()
    finally:
        for fd in fds[1:]:
            os.close(fd)


def main(argv: list[str] | None = None) -> int:
    """Import, say ready, serve; returns the exit code."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (2, 3) or not args[0].isdigit():
        print("usage: python -m workers.zygote CONTROL_FD COLUMN [ROOM]", file=sys.stderr)
        return EXIT_USAGE
    if argv is None:
        retitle(" ".join([sys.executable, "-m", MODULE, *args[:2]]))  # less the room
    control = socket.socket(fileno=int(args[0]))
    started = time.monotonic()
    try:
        preload(args[1])
    except (ImportError, ValueError) as e:
        control.send(encode({"error": f"the fork server cannot import its worker: {e}"}))
        return EXIT_ERROR
    control.send(encode({"ready": round(time.monotonic() - started, 4), "pid": os.getpid()}))
    serve(control)
    return 0


if __name__ == "__main__":
    sys.exit(main())
