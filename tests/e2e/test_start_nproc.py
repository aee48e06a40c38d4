"""`cockpit start --nproc N`: a run of N ranks under torch's own launcher (torchrun), in the
background like a single process: served on rank 0's socket, steered by a viewer, stopped with
a checkpoint by one SIGTERM to the pid it printed; and its refusals, one line each."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from command_here import cockpit_here

from engine.control.client import RemoteEngine
from engine.control.live_runs import probe

REPO = Path(__file__).resolve().parents[2]
TWO_RANKS = [
    "--preset", "tiny", "--set", "train.grad_accum=2", "--set", "train.batch_size=4",
    "--set", "train.max_steps=1000000", "--no-telemetry",
]  # fmt: skip


def cockpit(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "cockpit", *argv],
        capture_output=True, text=True, cwd=cwd, timeout=120, env=env,
    )  # fmt: skip


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def descendants(pid: int) -> list[int]:
    """Every process under `pid` (torchrun's workers and theirs)."""
    found: list[int] = []
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return found
    for child in map(int, children):
        found += [child, *descendants(child)]
    return found


def wait(condition, timeout_s: float = 60.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def records(run_dir: Path) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def test_two_ranks_under_torchrun_served_steered_and_stopped_by_one_sigterm(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    result = cockpit(tmp_path, "start", "--nproc", "2", "--no-attach", "--run-dir", str(run_dir), *TWO_RANKS)
    match = re.search(r"torchrun, 2 processes, pid (\d+)", result.stdout)
    pids: list[int] = []
    try:
        assert result.returncode == 0 and match, result.stderr
        torchrun = int(match[1])
        pids = [torchrun, *descendants(torchrun)]
        workers = [p for p in pids[1:] if "cockpit" in Path(f"/proc/{p}/cmdline").read_text()]
        assert len(workers) == 2, pids  # the two ranks, torchrun's children
        live = probe(run_dir)
        assert live is not None and live.pid in workers  # rank 0 serves the socket
        before = live.step
        wait(lambda: (now := probe(run_dir)) is not None and now.step > before + 10, 30)

        engine = RemoteEngine(run_dir)
        engine.pause()
        wait(lambda: engine.state == "paused", 30)  # acknowledged: both ranks stopped together
        engine.close()

        os.kill(torchrun, signal.SIGTERM)  # torchrun passes it to every rank
        wait(lambda: not any(alive(p) for p in pids), 60)
        final = records(run_dir)
        states = [r for r in final if r["kind"] == "state"]
        assert states[-1]["state"] == "stopped" and "SIGTERM" in states[-1]["reason"]
        checkpoint = [r for r in final if r["kind"] == "checkpoint"][-1]
        assert checkpoint["reason"] == "stop" and Path(checkpoint["path"]).is_file()
        assert "SignalException" in (run_dir / "engine.log").read_text()  # torchrun's output too
    finally:
        kill_all(pids)


def test_nproc_refusals_are_one_line_and_start_nothing(tmp_path: Path) -> None:
    for argv, expected in [
        (["--nproc", "0"], "--nproc 0: give a number of processes of 1 or more, or auto"),
        (["--nproc", "two"], "--nproc two"),
        (["--nproc", "-3"], "--nproc -3"),
        # 3 x 3 = 9 sequences a step: neither the accumulation nor the micro-batch splits in 2
        (
            ["--nproc", "2", "--set", "train.grad_accum=3", "--set", "train.batch_size=3"],
            "use --set train.grad_accum=4",
        ),
        (
            ["--nproc", "2", "--set", "train.grad_accum=2", "--set", "train.parallel=fsdp",
             "--set", "optim.name=muon"],
            "optim.name=muon needs whole matrices",
        ),
    ]:
        result = cockpit_here("start", "--preset", "tiny", "--no-attach", *argv, cwd=tmp_path)  # refused: nothing starts
        assert result.returncode == 2, result
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and expected in lines[0] and "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists()


def test_auto_without_a_gpu_is_one_process_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    from cockpit.cli import start

    if torch.cuda.is_available():
        pytest.skip("GPUs are visible: auto is one process per GPU")
    assert start.auto_nproc() == 1
    assert "no GPU visible, so one process (no torchrun)" in capsys.readouterr().err
    assert start.parse_nproc("auto") == "auto" and start.parse_nproc("4") == 4


def test_the_engine_command_is_torchs_launcher_for_more_than_one_process() -> None:
    from cockpit.cli import start
    from cockpit.cli.command_line import parse_args

    args = parse_args(["start", "--nproc", "3", "--preset", "tiny", "--set", "train.grad_accum=3"])
    argv = start.engine_argv(args, Path("r"), 3)
    assert argv[:8] == [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "3",
        "-m", "cockpit",
    ]  # fmt: skip
    assert argv[8:] == [
        "train", "--headless", "--run-dir", "r", "--preset", "tiny", "--set", "train.grad_accum=3",
    ]  # fmt: skip
    assert start.engine_argv(args, Path("r"))[:5] == [sys.executable, "-m", "cockpit", "train", "--headless"]


def test_a_failed_start_under_torchrun_names_the_ranks_error_not_torchruns_report(tmp_path: Path) -> None:
    from cockpit.cli.start import rank_error_line

    log = tmp_path / "engine.log"  # the shape of a real one: the rank's line, then torchrun's
    log.write_text(
        "data      | tiny corpus: prepared earlier (char), 465,126 tokens\n"
        "error: train.device=cuda: no GPU here; use --set train.device=cpu\n"
        "failed at step 0\n"
        "[rank 1] error: train.device=cuda: no GPU here; use --set train.device=cpu\n"
        "E1130 20:27:28.745000 2233 elastic/multiprocessing/api.py:1002] failed (exitcode: 1)\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
        "  exitcode  : 1 (pid: 2351) \n"
        "============================================================\n"
    )
    assert rank_error_line(log) == "train.device=cuda: no GPU here; use --set train.device=cpu"
