"""Shared fixtures: the read-only corpora in ../shared and tiny configurations; under
pytest-xdist, a test marked `serial` runs with no other test beside it."""

from __future__ import annotations

import fcntl
import gc
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
# other copies where the environment names them (docs/development.md), else ../shared's
SHAKESPEARE = Path(
    os.environ.get("COCKPIT_TINYSHAKESPEARE") or SHARED_DATA / "tinyshakespeare" / "input.txt"
)
TIKTOKEN_CACHE = Path(os.environ.get("TIKTOKEN_CACHE_DIR") or SHARED_DATA / "tiktoken-cache")

# A suite started in the background of a script (`... &`) inherits SIGINT ignored, and so would
# every process a test starts: the Ctrl-C tests would send a signal nobody hears. A handled
# signal is reset to the default in an exec'd child, so handling it here gives them Ctrl-C.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Tests make and drop many small objects (Textual's widgets, torch's modules): at Python's
# default, a young collection every 700 allocations, each now and then also walking the older
# generations that hold torch's objects, collecting took ~30% of an app test's CPU and ~25% of
# an engine test's. One every 10,000 allocations: the same garbage is collected, later.
gc.set_threshold(10_000, *gc.get_threshold()[1:])


# Under `--dist loadfile` a worker takes a whole file, and the run ends when its last file does:
# the files that start several processes (torchrun's ranks, a terminal, a browser, a bench) go
# first, so that the short files at the end even out the two workers' ends.
HEAVY_FIRST = ("distributed", "e2e", "bench")


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config.option, "loadscopereorder"):  # xdist's default sorts files by test count
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def weight(item: pytest.Item) -> int:
        area = item.path.parent.name  # tests/AREA/test_x.py (a scratch suite's too)
        return HEAVY_FIRST.index(area) if area in HEAVY_FIRST else len(HEAVY_FIRST)

    items.sort(key=weight)  # stable: a file's tests stay in their order


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[object]:
    """Under `pytest -n N`, a `serial` test (a wall-clock bound another test's load would break)
    waits for the other workers' tests to end and keeps them from starting until it is done."""
    if "PYTEST_XDIST_WORKER" not in os.environ:  # a plain run: every test is alone already
        return (yield)
    # the workers' base temporary directories lie in the run's own one
    shared = Path(item.config.option.basetemp).parent / "turns"
    with _turn(shared, alone=item.get_closest_marker("serial") is not None):
        return (yield)


@contextmanager
def _turn(lock_path: Path, alone: bool) -> Iterator[None]:
    """A shared turn (any number of tests at once) or one alone, across the workers' processes:
    a lock file taken shared or exclusive, behind a gate that a waiting `alone` turn holds, so
    that the workers' next tests cannot keep overtaking it."""
    with open(f"{lock_path}.gate", "a") as gate, open(f"{lock_path}.lock", "a") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            if not alone:
                fcntl.flock(gate, fcntl.LOCK_UN)
        yield  # closing the files lets go of both


@pytest.fixture(scope="session")
def isolated_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment every test runs in (set by `_isolated_dirs`): for module-scoped fixtures,
    which start before it, to pass to what they run."""
    env = {
        "COCKPIT_CACHE_DIR": str(tmp_path_factory.getbasetemp() / "cockpit-cache"),  # prepare once
        "XDG_CONFIG_HOME": str(tmp_path_factory.getbasetemp() / "xdg-config"),
    }
    if SHAKESPEARE.exists():
        env["COCKPIT_TINYSHAKESPEARE"] = str(SHAKESPEARE)
    if TIKTOKEN_CACHE.exists():
        env["TIKTOKEN_CACHE_DIR"] = str(TIKTOKEN_CACHE)
    return env


@pytest.fixture(autouse=True)
def _isolated_dirs(isolated_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep prepared data, user presets and runs out of the checkout and the home directory."""
    for name, value in isolated_env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("COCKPIT_PRESETS_DIR", raising=False)


@pytest.fixture
def shakespeare() -> Path:
    if not SHAKESPEARE.exists():
        pytest.skip(f"{SHAKESPEARE} is not here")
    return SHAKESPEARE



@pytest.fixture
def some_text(tmp_path: Path) -> Path:
    """A text file for tests that need some corpus, not Tiny Shakespeare: Python's own argparse
    source (~100 KB, on every machine that runs the tests), written beside the test."""
    import argparse

    corpus = tmp_path / "some-text" / "corpus.txt"
    corpus.parent.mkdir()
    corpus.write_text(Path(argparse.__file__).read_text(encoding="utf-8"), encoding="utf-8")
    return corpus


@pytest.fixture
def tiktoken_cache() -> Path:
    """GPT-2's BPE ranks, offline (TIKTOKEN_CACHE_DIR is set to them); skip where they are absent."""
    if not TIKTOKEN_CACHE.is_dir():
        pytest.skip(f"tiktoken cache not found at {TIKTOKEN_CACHE}")
    return TIKTOKEN_CACHE


@pytest.fixture
def live(tmp_path: Path):  # noqa: ANN201 - a LiveRun (tests/live_process.py)
    """A real headless `tiny` run in its own process, serving its socket; stopped after."""
    from live_process import LiveRun

    run = LiveRun(tmp_path / "run")
    try:
        yield run.start()
    finally:
        run.close()


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """mount(options) -> a fresh tmpfs (e.g. "size=2m", "ro,size=1m"): a real small or read-only
    filesystem, unmounted after; skips where mounting is not allowed (it needs root)."""
    mounted: list[Path] = []

    def mount(options: str) -> Path:
        if os.geteuid() != 0:
            pytest.skip("mounting a small tmpfs needs root")
        place = tmp_path / f"tmpfs-{len(mounted)}"
        place.mkdir()
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(place)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounted.append(place)
        return place

    try:
        yield mount
    finally:
        for place in mounted:
            subprocess.run(["umount", "-l", str(place)], check=False)
