"""QA of the batch-size schedule and sequence-length warmup as a user meets them (issue 26 item 1):
what `cockpit plan` says of a schedule's shapes must be true of the steps the run trains."""

from __future__ import annotations

from engine.config.presets import load_preset
from engine.plan.report import schedule_lines

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
