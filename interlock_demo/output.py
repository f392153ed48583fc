"""Files at paths the user names (`--out`): written beside, renamed into place, never
through a symbolic link.

A path on the command line may be in a folder other users can write to (/tmp, a shared
results folder). A symbolic link planted there under the chosen name, or under the name
of a temporary file beside it, would send the demo's write to whatever file the link
names, with the user's rights. So each file is written under a fresh random name, created
with `O_EXCL | O_NOFOLLOW` (a link planted under that name fails the open, it is never
followed), and renamed onto the chosen name: a rename replaces what is there and never
writes through it. A link already at the chosen name is refused in words rather than
replaced (`SymlinkRefusedError`), as the user chose that name. A stop mid-write leaves the
file that was there before whole, and no half-written one.

Only the last part of the path is held to this: the folders above it are the user's
choice. The files get the user's umask (they are results to share, not private state).
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from interlock_demo.errors import UsageError


class SymlinkRefusedError(UsageError):
    """The output path the user named is a symbolic link; nothing is written through it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        super().__init__(
            f"{path} is a symbolic link; remove it or choose another path (the demo never "
            "writes through a link at a path it is told to write, which anyone who can write "
            "to that folder could have planted)"
        )


def refuse_link(path: Path) -> None:
    """Raise `SymlinkRefusedError` when `path` is a symbolic link (a dangling one too).

    Commands call it before their work starts, so a run of minutes does not end refused.
    """
    if path.is_symlink():
        raise SymlinkRefusedError(path)


@contextlib.contextmanager
def replacing(path: Path, mode: str = "w", **kwargs: Any) -> Iterator[IO[Any]]:
    """A new file for `path`, renamed onto it when the block ends without an error.

    `mode` is "w" or "wb" (`kwargs` go to `open()`, e.g. encoding). Raises
    `SymlinkRefusedError` when `path` is a link, before and again after the writing;
    an error in the block leaves `path` as it was and removes the new file.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"replacing() writes a whole file: mode 'w' or 'wb', not {mode!r}")
    refuse_link(path)
    part = path.with_name(f".{path.name}.{secrets.token_hex(6)}.part")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    fd = os.open(part, flags, 0o666)  # the umask decides, as for any file the user saves
    try:
        with os.fdopen(fd, mode, **kwargs) as f:
            yield f
        refuse_link(path)
        # Were a link planted since the check, the rename replaces the link itself.
        os.replace(part, path)
    except BaseException:
        part.unlink(missing_ok=True)
        raise


def write_output(path: Path, data: str | bytes, *, encoding: str = "utf-8") -> Path:
    """Write `data` to `path` as `replacing` does; returns `path`."""
    if isinstance(data, bytes):
        with replacing(path, "wb") as f:
            f.write(data)
    else:
        with replacing(path, "w", encoding=encoding) as f:
            f.write(data)
    return path
