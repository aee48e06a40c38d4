"""`train.threads`: torch's CPU threads on the thread that trains, validated like every key, and
the static default a run starts from (engine/train/threads.py, bench/threads.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import warm_process

from engine.config.presets import load_preset
from engine.config.run_config import ConfigError
from engine.train.threads import auto_threads, chosen_threads

REPO = Path(__file__).resolve().parents[2]

# A real run on its own thread (as the app runs it), in its own process: torch's thread pool is
# the process's, so setting it here would change every later test's. The sink runs on the
# training thread and reads what that thread's arithmetic uses.
RUN = """
import json, sys, tempfile, threading, torch
from engine.config.presets import load_preset
from engine.train.trainer import Trainer
seen = []
def sink(event):
    if event.kind == "step":
        seen.append(torch.get_num_threads())
cfg = load_preset("tiny", ["train.max_steps=3", "eval.interval=0", "sample.interval=0",
                           "checkpoint.interval=0", *sys.argv[1:]])
trainer = Trainer(cfg, run_dir=tempfile.mkdtemp(), sinks=[sink], telemetry=False)
thread = threading.Thread(target=trainer.run)
thread.start(); thread.join(120)
print(json.dumps({"state": trainer.state, "engine_thread": sorted(set(seen)),
                  "process": torch.get_num_threads()}))
"""


def run_threads(*overrides: str, omp: str | None = None, script: Path | None = None) -> dict:
    """RUN in a fresh interpreter with OMP_NUM_THREADS=`omp` (or unset); with no `omp` and
    `script` (a file to write RUN to), forked from the warm server, which has torch imported
    with no OMP_NUM_THREADS either (a fresh one is the only way to give torch another)."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env["PYTHONPATH"] = str(REPO)
    if omp is not None:
        env["OMP_NUM_THREADS"] = omp
    if script is not None and omp is None and "OMP_NUM_THREADS" not in os.environ:
        script.write_text(RUN)
        done = warm_process.run([sys.executable, str(script), *overrides], capture_output=True,
                                text=True, timeout=180, env=env, cwd=REPO)  # fmt: skip
    else:
        done = subprocess.run([sys.executable, "-c", RUN, *overrides], capture_output=True,
                              text=True, timeout=180, env=env, cwd=REPO)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("threads", [1, 3])
def test_train_threads_is_what_the_training_thread_uses(threads: int) -> None:
    got = run_threads(f"train.threads={threads}", omp="2")  # the setting wins over the env
    assert got["state"] == "finished"
    assert got["engine_thread"] == [threads]
    assert got["process"] == threads  # the pool is the process's: `cockpit sample` alike


def test_auto_starts_with_a_core_free_on_cpu_and_keeps_an_omp_setting(tmp_path: Path) -> None:
    """Three steps: the run has not measured another count yet (test_thread_tuner.py)."""
    cores = len(os.sched_getaffinity(0))
    assert run_threads(script=tmp_path / "run.py")["engine_thread"] == [max(1, cores - 1)]
    # someone chose OMP_NUM_THREADS: torch's own reading of it is kept
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    torch_says = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
                                capture_output=True, text=True, env=env, check=True).stdout  # fmt: skip
    assert run_threads(omp="2")["engine_thread"] == [int(torch_says)]


def test_the_rule() -> None:
    assert [auto_threads(c) for c in (1, 2, 4, 16)] == [1, 1, 3, 15]
    assert chosen_threads(5, "cpu", {}) == 5 and chosen_threads(5, "cuda", {}) == 5
    assert chosen_threads(0, "cuda", {}) is None  # a GPU: torch's default
    assert chosen_threads(0, "cpu", {"OMP_NUM_THREADS": "4"}) is None


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("-1", "train.threads"),
        ("2000", "train.threads"),
        ("two", "train.threads"),
    ],
)
def test_a_bad_thread_count_is_one_line(value: str, message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_preset("tiny", [f"train.threads={value}"])
    assert message in str(refused.value) and "\n" not in str(refused.value)
