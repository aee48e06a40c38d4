"""One rank of a test run under torchrun: `cockpit train --headless` as the CLI runs it, plus
what a test needs to see every rank (rank 0 alone writes metrics.jsonl):

- RUN_DIR/rank-R.jsonl: this rank's own events, as metrics.jsonl would hold them;
- RUN_DIR/pid-R: this rank's pid (to signal or kill one rank);
- RUN_DIR/weights-R.pt: this rank's weights when its run ends;
- with GRAD_CHECK=1, RUN_DIR/grads-R.pt: the gradients the optimizer applies at step 1 and
  the batches this rank trained them on (the test checks them against one process);
- with WORLD_CHECK=1, RUN_DIR/world-R.json: whether a process group was up once the run was
  set up, the class of the forward it trains with, and how many command exchanges it made;
- with BATCHES_CHECK=1, RUN_DIR/batches-R.json: [step counter, sequences, tokens per sequence]
  of every training batch this rank took, in order (what it trained, counted by hand);
- with GROUPS_CHECK=1, RUN_DIR/groups-R.json: the weight decay of each optimizer group at each
  optimizer step where it differs from the step before, as [step counter, [decays]] (the
  counter then: the steps trained before this one).

Launched by the tests as `torchrun --standalone --nproc-per-node 2 tests/distributed/rank_worker.py
ARGS...` where ARGS are `cockpit train`'s.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

from cockpit.cli.command_line import parse_args
from cockpit.cli.headless import ProgressPrinter, RankErrorPrinter
from cockpit.cli.launch import make_trainer, resume_after_restart
from cockpit.cli.preflight import preflight, torchrun_rank
from cockpit.cli.stop_signals import StopSignals
from engine.rundir.metrics_log import MetricsWriter


def full(t: torch.Tensor) -> torch.Tensor:
    """A tensor whole (a DTensor shard gathered), detached, on the CPU."""
    return (t.full_tensor() if hasattr(t, "full_tensor") else t).detach().cpu().clone()


def local(t: torch.Tensor) -> torch.Tensor:
    """This rank's part of a tensor (a DTensor's shard), detached, on the CPU."""
    return (t.to_local() if hasattr(t, "to_local") else t).detach().cpu().clone()


def record_first_step(trainer, run_dir: Path, rank: int) -> None:  # noqa: ANN001
    """Keep the batches and, at the first optimizer step, the gradients and initial weights."""
    run = trainer.built
    sampler = run.parts.train_batches
    batches: list[tuple[torch.Tensor, torch.Tensor]] = []
    take = sampler.next

    def next_batch():  # noqa: ANN202
        x, y = take()
        if len(batches) < run.instruments.step.micro_steps:
            batches.append((x.clone(), y.clone()))
        return x, y

    sampler.next = next_batch
    initial = {k: full(v) for k, v in run.parts.model.state_dict().items()}
    optimizer = run.parts.optimizer
    step = optimizer.step
    done = []

    def step_and_record(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        if not done:
            done.append(True)
            grads = {n: full(p.grad) for n, p in run.parts.model.named_parameters() if p.grad is not None}
            torch.save({"grads": grads, "batches": batches, "initial": initial,
                        "vocab_size": run.parts.model.vocab_size}, run_dir / f"grads-{rank}.pt")  # fmt: skip
        return step(*args, **kwargs)

    optimizer.step = step_and_record


def record_weight_decay(trainer, changes: list) -> None:  # noqa: ANN001
    """Note each optimizer step's group decays where they change (a live `set`)."""
    optimizer = trainer.built.parts.optimizer
    step = optimizer.step

    def step_and_note(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        decays = [group["weight_decay"] for group in optimizer.param_groups]
        if not changes or changes[-1][1] != decays:
            changes.append([trainer.step, decays])
        return step(*args, **kwargs)

    optimizer.step = step_and_note


def record_batches(trainer, taken: list) -> None:  # noqa: ANN001
    """Note the shape of every training batch the rank takes, and the step it is for."""
    sampler = trainer.built.parts.train_batches
    take = sampler.next

    def next_and_note():  # noqa: ANN202
        x, y = take()
        taken.append([trainer.step, *x.shape])
        return x, y

    sampler.next = next_and_note


CHECKS = ("GRAD_CHECK", "WORLD_CHECK", "GROUPS_CHECK", "BATCHES_CHECK")


def main() -> int:
    args = parse_args(["train", "--headless", *sys.argv[1:]])
    signals = StopSignals()
    signals.install()
    resume_after_restart(args)
    preflight(args)
    rank = torchrun_rank()
    target = Path(args.run_dir or args.resume)
    run_dir = target.parent if target.suffix in (".pt", ".dcp") else target  # a checkpoint
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / f"pid-{rank}").write_text(str(os.getpid()))
    own = MetricsWriter()
    own.open(run_dir / f"rank-{rank}.jsonl")
    printer = ProgressPrinter() if rank == 0 else RankErrorPrinter(rank)
    trainer = make_trainer(args, sinks=[own, printer], interactive=False)
    signals.attach(trainer)
    checks = [name for name in CHECKS if os.environ.get(name)]
    if checks:
        trainer.set_up()  # the checks look at what it built; run() goes on from there
    if "GRAD_CHECK" in checks:
        record_first_step(trainer, run_dir, rank)
    seen: dict[str, object] = {}
    if "WORLD_CHECK" in checks:
        import torch.distributed as dist

        seen["process_group"] = dist.is_available() and dist.is_initialized()
        seen["forward"] = type(trainer.built.instruments.step.forward).__name__
    decays: list = []
    if "GROUPS_CHECK" in checks:
        record_weight_decay(trainer, decays)
    taken: list = []
    if "BATCHES_CHECK" in checks:
        record_batches(trainer, taken)
    state = trainer.run()
    if os.environ.get("BATCHES_CHECK"):
        (run_dir / f"batches-{rank}.json").write_text(json.dumps(taken))
    if decays:
        (run_dir / f"groups-{rank}.json").write_text(json.dumps(decays))
    if seen:
        seen["exchanges"] = trainer.sync.exchanges
        (run_dir / f"world-{rank}.json").write_text(json.dumps(seen))
    if trainer.built is not None and state != "failed":
        # the process group is gone by now: a sharded run's weights are this rank's shards
        weights = {k: local(v) for k, v in trainer.built.parts.model.state_dict().items()}
        torch.save(weights, run_dir / f"weights-{rank}.pt")
    return 1 if state == "failed" else 0


if __name__ == "__main__":
    sys.exit(main())
