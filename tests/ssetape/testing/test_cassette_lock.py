"""The cassette lock on a shared host: another local user cannot make it write their way."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from ssetape.testing.cassette_lock import CassetteLockError, cassette_lock


def lock_name(cassette: Path) -> str:
    return hashlib.sha256(str(cassette.resolve()).encode()).hexdigest()[:32] + ".lock"


def test_a_private_directory_is_made_and_the_lock_keeps_what_is_written(tmp_path: Path) -> None:
    locks = tmp_path / "locks"
    with cassette_lock(tmp_path / "c.jsonl", locks) as f:
        f.write("run-1")
    assert stat.S_IMODE(locks.stat().st_mode) == 0o700
    with cassette_lock(tmp_path / "c.jsonl", locks) as f:
        assert f.read() == "run-1"
    assert stat.S_IMODE((locks / lock_name(tmp_path / "c.jsonl")).stat().st_mode) == 0o600


def test_a_lock_file_linked_to_a_victim_is_refused(tmp_path: Path) -> None:
    locks = tmp_path / "locks"
    locks.mkdir(mode=0o700)
    victim = tmp_path / "precious.txt"
    victim.write_text("my thesis")
    (locks / lock_name(tmp_path / "c.jsonl")).symlink_to(victim)
    with (
        pytest.raises(CassetteLockError, match="cannot open lock file"),
        cassette_lock(tmp_path / "c.jsonl", locks),
    ):
        pass
    assert victim.read_text() == "my thesis"


def test_a_directory_others_may_write_or_a_link_is_refused(tmp_path: Path) -> None:
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    with (
        pytest.raises(CassetteLockError, match="mode 777 lets other users in"),
        cassette_lock(tmp_path / "c.jsonl", open_dir),
    ):
        pass
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(elsewhere)
    with (
        pytest.raises(CassetteLockError, match="not a directory"),
        cassette_lock(tmp_path / "c.jsonl", link),
    ):
        pass


def test_a_directory_someone_else_owns_is_refused(tmp_path: Path) -> None:
    if os.getuid() != 0:
        pytest.skip("making a directory owned by another user needs root")
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 65534, 65534)  # nobody
    with (
        pytest.raises(CassetteLockError, match="owned by uid 65534"),
        cassette_lock(tmp_path / "c.jsonl", theirs),
    ):
        pass
