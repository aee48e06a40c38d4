"""A corpus refused while it is prepared leaves no empty directory in the data cache, and a
preparation that waited for the refused one still prepares (in a directory made again)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from engine.data.errors import DataError
from engine.data.prepared import LOCK_FILE, exclusive


def test_a_refused_preparation_removes_the_directory_it_made(tmp_path: Path) -> None:
    out = tmp_path / "cache" / "corpus-char-0123456789ab"
    with pytest.raises(DataError), exclusive(out, lambda: None, None):
        raise DataError("the corpus is empty")
    assert not out.exists()


def test_a_directory_it_did_not_make_is_kept(tmp_path: Path) -> None:
    out = tmp_path / "corpus"
    out.mkdir()
    with pytest.raises(DataError), exclusive(out, lambda: None, None):
        raise DataError("the corpus is empty")
    assert out.is_dir()


def test_a_waiting_preparation_goes_on_in_a_directory_made_again(tmp_path: Path) -> None:
    out = tmp_path / "corpus"
    second_waits = threading.Event()
    seen: list[bool] = []

    def second() -> None:
        with exclusive(out, second_waits.set, None):
            seen.append((out / LOCK_FILE).is_file())
            (out / "tokens.bin").write_bytes(b"\0\0")

    with pytest.raises(DataError), exclusive(out, lambda: None, None):
        waiter = threading.Thread(target=second)
        waiter.start()
        assert second_waits.wait(10)  # the second is waiting on the lock
        raise DataError("the corpus is empty")
    waiter.join(10)
    assert seen == [True]  # it held a lock at the directory's path, not a removed one
    assert sorted(p.name for p in out.iterdir()) == [LOCK_FILE, "tokens.bin"]
