"""QA of the batch-size schedule and sequence-length warmup as a user meets them (issue 26 item 1):
what `cockpit plan` says of a schedule's shapes must be true of the steps the run trains."""

from __future__ import annotations

import json
from pathlib import Path

from engine.config.presets import load_preset
from engine.events import Eval, RunStarted, StateChanged, Step
from engine.plan.report import schedule_lines
from engine.rundir.history import read_curves

TINY = ["train.device=cpu"]  # tiny: micro-batches of 8 sequences of 32 tokens, 100 steps


def test_the_plan_of_a_ramp_longer_than_the_run_says_the_run_never_reaches_its_shape() -> None:
    """A ramp of 1,000 steps on a run of 100: the run trains 2 x 8 throughout, so "from step
    1,000 on" and "the later steps 256 each" were both false."""
    cfg = load_preset(
        "tiny",
        [*TINY, "train.batch_start=2", "train.batch_ramp_steps=1000", "train.seq_start=8",
         "train.seq_warmup_steps=1000"],
    )  # fmt: skip
    text = "\n".join(schedule_lines(cfg))
    assert "which this run does not reach (its ramps reach it at step 1,000, past the run's last, 99)" in text
    assert "step 0 trains 16 tokens, the last step 16 (2 sequences of 8)" in text
    assert "256" not in text  # no step of this run trains the configured 8 x 32


def test_the_plan_says_the_steps_grow_rather_than_that_every_later_step_is_full() -> None:
    cfg = load_preset("tiny", [*TINY, "train.batch_start=2", "train.batch_ramp_steps=50"])
    text = "\n".join(schedule_lines(cfg))
    assert "planned at the largest shape, 8 x 32 (from step 50 on)" in text
    assert "step 0 trains 64 tokens, growing to 256 a step" in text
    assert "each" not in text  # steps 1..49 train fewer than 256


def _session(start: int, last: int, schedule: tuple[tuple[int, int], ...], tokens: int) -> list:
    """One engine's records: steps start+1..last growing by the schedule's sizes (from `tokens`
    trained before them), an eval at every even step."""
    events: list = [
        RunStarted(
            run_dir="x", preset="tiny", description="", config={}, device="cpu", dtype="float32",
            n_params=1, n_params_non_embedding=1, vocab_size=65, tokenizer="char", train_tokens=1,
            val_tokens=1, start_step=start, max_steps=8, tokens_per_step=256, planned_lr=((0, 1e-3),),
            tokens_schedule=schedule,
        ),  # fmt: skip
        StateChanged(state="running", step=start),
    ]
    for n in range(start + 1, last + 1):
        tokens += max(t for s, t in schedule if s <= n - 1)  # step n trains step n-1's size
        events.append(Step(step=n, loss=3.0, lr=1e-3, grad_norm=0.5, tokens_per_s=1e3,
                           step_time_s=0.01, tokens=tokens, mfu=0.1, data_time_s=0.0))  # fmt: skip
        if n % 2 == 0:
            events.append(Eval(step=n, train_loss=3.0, val_loss=2.0, train_time_s=0.01 * n))
    return events


def test_evals_sit_at_the_tokens_trained_when_a_resume_changed_the_schedule(tmp_path: Path) -> None:
    """`cockpit train --resume RUN --set train.batch_start=...` is allowed; the evals before the
    resume were placed (cockpit compare, the tokens axis) by the new schedule from step 0."""
    first = _session(0, 6, ((0, 16), (4, 64)), 0)  # steps 1-4 train 16 tokens, 5-6 train 64
    resumed = _session(6, 8, ((0, 128),), 4 * 16 + 2 * 64)  # the resume's schedule: 128 a step
    lines = []
    for event in [*first, *resumed]:
        record = event.to_record()
        record.pop("config", None)
        lines.append(json.dumps(record, default=str) + "\n")
    (tmp_path / "metrics.jsonl").write_text("".join(lines))
    curves = read_curves(tmp_path)
    assert curves.tokens.tolist() == [16, 32, 48, 64, 128, 192, 320, 448]
    assert curves.val_step.tolist() == [2, 4, 6, 8]
    assert curves.val_tokens.tolist() == [32, 64, 192, 448]  # the steps' own counts


def test_a_crash_with_a_message_of_many_lines_is_said_in_one(tmp_path: Path) -> None:
    """torch.compile's CppCompileError (a run with a batch-size schedule recompiling at its new
    shape, on a loaded machine) carries the whole g++ command and its output: the alert and the
    failed state said all 60 lines, the headless run's last line "Output:"; the details are
    error.log's."""
    from engine.train.trainer import Trainer

    cfg = load_preset("tiny", [*TINY, "train.max_steps=4", "eval.interval=0", "sample.interval=0"])
    events: list = []

    def compile_fails(event: object) -> None:
        if getattr(event, "kind", "") == "step":
            raise RuntimeError("CppCompileError: C++ compile error\n\nCommand:\ng++ x.cpp\n\nOutput:\n")

    trainer = Trainer(cfg, run_dir=tmp_path / "run", sinks=[events.append, compile_fails], telemetry=False)
    trainer.run()
    (alert,) = [e for e in events if e.kind == "alert" and e.code == "crash"]
    assert "\n" not in alert.message
    assert alert.message.startswith("RuntimeError: CppCompileError: C++ compile error (details in ")
    assert "Output:" in (tmp_path / "run" / "error.log").read_text()


def test_the_plan_of_a_world_says_the_sequences_its_ranks_train_at_step_0() -> None:
    """`cockpit plan --nproc 2` with train.batch_start=2 of 8: each rank's sampler takes its
    share of the 2 (1 of its 4), so the world trains 1 x 2 x 32 = 64 tokens at step 0; the plan
    said 128, a start of 2 sequences of the rank's 4. (A start the ranks cannot split, 3 of 8,
    is refused: tests/engine/test_schedule_rank_shares.py.)"""
    from engine.distributed import per_rank_batch

    cfg = load_preset("tiny", [*TINY, "train.batch_start=2", "train.batch_ramp_steps=10"])
    text = "\n".join(schedule_lines(per_rank_batch(cfg, 2)))
    assert "batch 1 -> 4 sequences over 10 steps" in text
    assert "step 0 trains 64 tokens, growing to 256 a step" in text
    assert per_rank_batch(load_preset("tiny", TINY), 2).train.batch_start == 0  # off stays off
