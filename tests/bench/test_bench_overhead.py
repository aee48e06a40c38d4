"""The cockpit's overhead bench (bench/overhead.py): it runs as a script beside the packages it
measures, and its thread-CPU figures read each thread's own clock."""

from __future__ import annotations

import importlib.util
import sys
import threading
import time
from pathlib import Path

import warm_process

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
PACKAGES = ("cockpit", "engine", "presets")


def load_bench():
    spec = importlib.util.spec_from_file_location("overhead_bench", BENCH / "overhead.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_no_bench_script_shadows_a_package() -> None:
    # `python bench/X.py` puts bench/ first on sys.path: a bench/cockpit.py would be imported
    # in place of the cockpit package.
    shadowing = [p.name for p in BENCH.glob("*.py") if p.stem in PACKAGES]
    assert shadowing == []


def test_overhead_bench_runs_as_a_script() -> None:
    done = warm_process.run(  # a real process, forked with torch imported: the imports it adds run
        [sys.executable, str(BENCH / "overhead.py"), "--parts", "nonsense"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr  # argparse's usage error, after every import worked
    assert "unknown part nonsense" in done.stderr
    assert "Traceback" not in done.stderr


def test_thread_cpu_seconds_reads_another_threads_clock() -> None:
    bench = load_bench()
    go, done = threading.Event(), threading.Event()

    def spin() -> None:
        go.wait()
        end = time.thread_time() + 0.3
        while time.thread_time() < end:
            pass
        done.set()
        time.sleep(0.5)  # stay alive to be read

    worker = threading.Thread(target=spin, name="spinner")
    worker.start()
    before = bench.thread_cpu_seconds()
    go.set()
    done.wait(10)
    after = bench.thread_cpu_seconds()
    worker.join()
    spent = after["spinner"] - before["spinner"]
    assert 0.25 < spent < 0.6
    # this (idle) thread's clock barely moved; the process's holds the spinner's
    assert after["MainThread"] - before["MainThread"] < 0.2
    assert after["process"] - before["process"] >= spent
