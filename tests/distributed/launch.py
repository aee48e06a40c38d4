"""Launching a test run through torchrun itself (2 ranks, gloo, this CPU), and reading what
each rank recorded (tests/distributed/rank_worker.py). torchrun and its ranks start warm, forked
from a server that imported torch once (tests/warm_ranks.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
import warm_ranks

WORKER = Path(__file__).with_name("rank_worker.py")
STAND_IN = warm_ranks.STAND_IN
REPO = WORKER.parents[2]
TIMEOUT_S = 240.0
# a tiny model that trains a step in milliseconds; 2 micro-batches: one per rank at world 2
TINY = [
    "--preset", "tiny", "--no-telemetry",
    "--set", "train.grad_accum=2", "--set", "train.batch_size=4",
    "--set", "eval.interval=0", "--set", "sample.interval=0",
]  # fmt: skip


def torchrun_argv(*argv: str, nproc: int = 2, restarts: int = 0) -> list[str]:
    """torchrun's command line, each of its ranks running rank_worker.py, all started warm."""
    return [
        sys.executable, str(STAND_IN), "-m", "torch.distributed.run", "--standalone",
        f"--nproc-per-node={nproc}", f"--max-restarts={restarts}", str(STAND_IN), str(WORKER), *argv,
    ]  # fmt: skip


def environment(**extra: str) -> dict[str, str]:
    return {**warm_ranks.sharing_env(), **extra}


def run(*argv: str, nproc: int = 2, **env: str) -> subprocess.CompletedProcess[str]:
    """A run through torchrun to its end; its output on failure."""
    result = subprocess.run(
        torchrun_argv(*argv, nproc=nproc), capture_output=True, text=True, cwd=REPO,
        env=environment(**env), timeout=TIMEOUT_S,
    )  # fmt: skip
    return result


def start(*argv: str, nproc: int = 2, restarts: int = 0, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        torchrun_argv(*argv, nproc=nproc, restarts=restarts), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, cwd=REPO, env=environment(**env), start_new_session=True,
    )  # fmt: skip


def single(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The same worker as one process (no torchrun): the reference."""
    return subprocess.run(
        [sys.executable, str(STAND_IN), str(WORKER), *argv], capture_output=True, text=True, cwd=REPO,
        env=environment(**env), timeout=TIMEOUT_S,
    )  # fmt: skip


def records(path: Path, kind: str | None = None) -> list[dict[str, Any]]:
    out = []
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if kind is None or record.get("kind") == kind:
            out.append(record)
    return out


def rank_records(run_dir: Path, rank: int, kind: str | None = None) -> list[dict[str, Any]]:
    return records(run_dir / f"rank-{rank}.jsonl", kind)


def weights(run_dir: Path, rank: int) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / f"weights-{rank}.pt", weights_only=True)


def wait_for(condition: Any, timeout_s: float = TIMEOUT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def checked(result: subprocess.CompletedProcess[str]) -> None:
    """A launch that must have succeeded; its output's end when it did not."""
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def assert_gradients_match_one_process(run_dir: Path) -> None:
    """The gradients every rank applied at step 1 (rank_worker's GRAD_CHECK) equal those of
    one process on the union of every rank's micro-batches, clipped alike."""
    from engine.config.loading import config_from_dict
    from engine.model.gpt import GPT

    ranks = [torch.load(run_dir / f"grads-{r}.pt", weights_only=True) for r in (0, 1)]
    cfg = config_from_dict(json.loads((run_dir / "config.json").read_text()))
    reference = GPT(cfg.model, ranks[0]["vocab_size"])  # the tokenizer's: the weights are padded
    reference.load_state_dict(ranks[0]["initial"])
    batches = [b for rank in ranks for b in rank["batches"]]  # every rank's micro-batches
    assert len(batches) == 2 and not torch.equal(batches[0][0], batches[1][0])  # its own data
    loss = sum(reference(x, y)[1] for x, y in batches) / len(batches)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(reference.parameters(), cfg.optim.grad_clip)
    for name, param in reference.named_parameters():
        for rank in ranks:
            torch.testing.assert_close(rank["grads"][name], param.grad, rtol=1e-5, atol=1e-7)
