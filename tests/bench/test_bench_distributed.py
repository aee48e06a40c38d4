"""The distributed bench (bench/distributed.py) runs as a script and prints every figure: tiny
settings (the `tiny` preset, 50 timed exchanges, one round), real torchrun launches of 2 gloo
ranks, real headless runs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import warm_process
import warm_ranks

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "distributed.py"
# part 2 (the loop with and without its exchange) is left out: two more launches
TINY = [
    "--preset", "tiny", "--calls", "50", "--warmup", "10", "--steps", "20",
    "--warmup-steps", "10", "--rounds", "1", "--tp-steps", "30", "--parts", "exchange,throughput",
]  # fmt: skip


def test_distributed_bench_prints_its_figures_with_verdicts() -> None:
    # its torchrun launches start warm too (tests/warm_ranks.py's server named to it)
    env = {**os.environ, warm_ranks.ENV_SERVER: warm_ranks.server_path()}
    done = warm_process.run(
        [sys.executable, str(BENCH), *TINY], capture_output=True, text=True, timeout=180, cwd=ROOT,
        env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    # 1. the exchange on each rank, the step time it is set against, the verdict
    for rank in (0, 1):
        assert re.search(rf"rank {rank}: mean [\d.]+ us  p50 [\d.]+ us  p95 [\d.]+ us", out), out
    assert re.search(r"gloo's floor, rank 0: a bare all_reduce .* mean [\d.]+ us", out), out
    assert re.search(r"tiny at world 2: 20 steps, grad_accum=2 .* step_time_s [\d.]+ ms", out), out
    assert re.search(r"per-step cost: mean [\d.]+ us = [\d.]+% .* goal < 1%: (PASS|FAIL)", out), out
    # the loop makes one exchange per step, on every rank
    assert "rank 0 20 in 20 steps, rank 1 20 in 20 steps: 1.00 per step" in out, out
    # 3. tokens/s at both world sizes and their ratio
    assert re.search(r"round 1: world 1 [\d,]+ tok/s .* world 2 [\d,]+ tok/s .* ratio [\d.]+", out)
    assert re.search(r"median: world 1 [\d,]+ tok/s  world 2 [\d,]+ tok/s  ratio [\d.]+", out)
    assert "Traceback" not in done.stderr


def test_distributed_bench_refuses_an_unshareable_accumulation_in_one_line() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--grad-accum", "3"], capture_output=True, text=True, timeout=60
    )  # fmt: skip
    assert done.returncode == 2  # argparse's usage error, before anything starts
    assert "--grad-accum must be a multiple of 2" in done.stderr
    assert "Traceback" not in done.stderr
