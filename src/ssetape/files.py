"""Files ssetape writes for the user (exports, cassettes, images): owner-only, never torn."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import IO


@contextlib.contextmanager
def private_file(dest: Path) -> Iterator[IO[bytes]]:
    """A new file only its owner can read (0600), put in place atomically when the block
    succeeds.

    Recorded traffic stays sensitive even redacted (prompts, answers), so no umask may
    widen it. The temporary file sits next to ``dest`` so that os.replace never crosses
    filesystems, and readers (other test workers) see the old file or the new one, never
    half of one.
    """
    dest = Path(dest)
    tmp = dest.with_name(f".{dest.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_private(dest: Path, data: bytes) -> None:
    with private_file(dest) as f:
        f.write(data)
