"""Locks that keep parallel test processes from corrupting a cassette, safe on a shared host.

The lock files live in a per-user directory under the system's temporary directory, which
other local users can write to: the directory must be this user's own and private (0700,
not a symbolic link), and lock files are opened without following links, so another user
cannot point a lock at a file of yours and have it truncated or written.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

__all__ = ["CassetteLockError", "cassette_lock", "default_lock_dir"]


class CassetteLockError(OSError):
    """The lock directory or file is not safe to use; the message says why, in one line."""


def default_lock_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"ssetape-locks-{os.getuid()}"


def private_dir(path: Path) -> Path:
    """``path``, created 0700 if missing; CassetteLockError unless it is this user's own
    directory that nobody else may write to."""
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700, parents=True)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise CassetteLockError(f"refusing lock directory {path}: not a directory (a link?)")
    if st.st_uid != os.getuid():
        raise CassetteLockError(
            f"refusing lock directory {path}: owned by uid {st.st_uid}, not {os.getuid()}"
        )
    if st.st_mode & 0o077:
        raise CassetteLockError(
            f"refusing lock directory {path}: mode {stat.S_IMODE(st.st_mode):o} lets other "
            "users in (make it 700)"
        )
    return path


@contextlib.contextmanager
def cassette_lock(cassette: Path, lock_dir: Path) -> Iterator[IO[str]]:
    """An exclusive lock per cassette path, shared by every process on this machine.

    The lock file lives outside the test tree (nothing to gitignore) and holds the id of the
    test run that last wrote the cassette.
    """
    name = hashlib.sha256(str(cassette.resolve()).encode()).hexdigest()[:32]
    path = private_dir(lock_dir) / f"{name}.lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as e:
        raise CassetteLockError(f"cannot open lock file {path}: {e.strerror}") from None
    with os.fdopen(fd, "r+", encoding="utf-8") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise CassetteLockError(f"refusing lock file {path}: not a regular file")
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            f.seek(0)
            yield f
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
