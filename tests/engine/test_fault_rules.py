"""The engine's rules as pure parts, with hand-computed cases and no Trainer: spike detection,
the anomaly policy, the out-of-memory retry, hand-set LR changes and the one LR ceiling."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cockpit.screens.lr_dialog import parse_lr_input
from engine.config.presets import load_preset
from engine.config.run_config import MAX_LR, ConfigError
from engine.optim.schedule import LrChange, LrPlan, lr_change, lr_plan
from engine.train.faults import (
    AnomalyDecision,
    SpikeDetector,
    decide_anomaly,
    decide_out_of_memory,
    halved_micro_batch,
)

# ---------------------------------------------------------------------------------------------
# Spike detection


def test_the_first_losses_only_build_the_statistics() -> None:
    spikes = SpikeDetector(sigma=3.0, warmup=2)
    assert [spikes.observe(loss) for loss in (1.0, 1.0, 1.0)] == [False, False, False]
    assert (spikes.mean, spikes.var, spikes.count) == (1.0, 0.0, 3)
    # three losses seen: more than `warmup` after the first, so a jump is judged now
    assert spikes.observe(1.1) is True


def test_the_moving_statistics_by_hand() -> None:
    spikes = SpikeDetector(sigma=3.0, warmup=1, beta=0.5)
    spikes.observe(2.0)
    spikes.observe(4.0)  # mean 0.5*2 + 0.5*4 = 3; var 0.5*0 + 0.5*(4-2)^2 = 2
    assert (spikes.mean, spikes.var, spikes.count) == (3.0, 2.0, 2)
    twin = SpikeDetector(sigma=3.0, warmup=1, beta=0.5)
    twin.observe(2.0)
    twin.observe(4.0)
    # the threshold is now 3 + 3*sqrt(2) = 7.24
    assert twin.observe(7.3) is True
    assert spikes.observe(7.2) is False  # and it moves the statistics: mean 5.1, var 1 + 4.2^2/2
    assert spikes.mean == pytest.approx(5.1) and spikes.var == pytest.approx(1.0 + 0.5 * 4.2**2)


def test_a_spike_does_not_move_the_statistics_it_is_judged_by() -> None:
    spikes = SpikeDetector(sigma=6.0, warmup=50)
    for _ in range(51):
        assert spikes.observe(2.0) is False
    before = (spikes.mean, spikes.var, spikes.count)
    assert spikes.observe(100.0) is True
    assert (spikes.mean, spikes.var, spikes.count) == before
    assert spikes.observe(100.0) is True  # still a spike: nothing was learnt from the first


def test_sigma_zero_never_reports_a_spike_and_reset_forgets() -> None:
    off = SpikeDetector(sigma=0.0, warmup=0)
    assert not any(off.observe(loss) for loss in (1.0, 1.0, 1e6))
    on = SpikeDetector(sigma=1.0, warmup=0)
    on.observe(1.0)
    on.observe(1.0)
    on.reset()  # after a rollback: the next loss starts the history again
    assert (on.mean, on.count) == (None, 0)
    assert on.observe(1e6) is False


# ---------------------------------------------------------------------------------------------
# The anomaly policy


def decide(
    policy: str = "auto",
    interactive: bool = True,
    rollbacks: int = 0,
    ckpt: str | None = "ckpt-00000010.pt",
) -> AnomalyDecision:
    return decide_anomaly(
        "loss is not finite at step 15",
        policy=policy,
        interactive=interactive,
        rollbacks=rollbacks,
        max_rollbacks=3,
        checkpoint_name=ckpt,
    )


def test_a_person_watching_gets_a_pause_with_what_helps_in_words() -> None:
    d = decide(policy="auto", interactive=True)
    assert (d.action, d.level, d.failure) == ("pause", "error", None)
    assert d.message == (
        "loss is not finite at step 15: paused; roll back to the last checkpoint with half the "
        "LR, or lower the LR"
    )


def test_unattended_rolls_back_to_the_named_checkpoint() -> None:
    d = decide(policy="auto", interactive=False)
    assert (d.action, d.level) == ("rollback", "warning")
    assert d.message == (
        "loss is not finite at step 15; rolling back to ckpt-00000010.pt with the LR halved"
    )
    # an explicit rollback policy rolls back even with a person watching
    assert decide(policy="rollback", interactive=True).action == "rollback"


def test_rollbacks_that_did_not_help_fail_the_run_without_saving() -> None:
    d = decide(policy="rollback", interactive=False, rollbacks=3)
    assert (d.action, d.level, d.save_on_stop) == ("stop", "error", False)
    assert d.failure == "loss is not finite at step 15; 3 rollbacks did not help"
    assert d.message == f"{d.failure}: stopping, resume with a lower LR"
    assert decide(policy="rollback", rollbacks=2).action == "rollback"


def test_no_checkpoint_pauses_a_watched_run_and_fails_an_unattended_one_keeping_its_weights() -> None:
    assert decide(policy="rollback", interactive=True, ckpt=None).action == "pause"
    d = decide(policy="auto", interactive=False, ckpt=None)
    assert (d.action, d.save_on_stop) == ("stop", True)
    assert d.failure == "loss is not finite at step 15; no checkpoint to roll back to"
    assert d.message == f"{d.failure}: stopping"
    # pause configured but nobody there to press a key: the same
    assert decide(policy="pause", interactive=False).action == "stop"


def test_out_of_memory_halves_the_micro_batch_while_it_can() -> None:
    assert halved_micro_batch(8, 1) == (4, 2)
    assert halved_micro_batch(4, 3) == (2, 6)  # the effective batch stays 12
    assert halved_micro_batch(1, 8) is None
    assert halved_micro_batch(3, 2) is None  # odd: halving would change the batch
    retry = decide_out_of_memory(8, 1)
    assert (retry.retry, retry.level) == ((4, 2), "warning")
    assert retry.message == (
        "out of memory: retrying the step with micro-batch 4 x 2 accumulation (same effective batch)"
    )
    stuck = decide_out_of_memory(1, 8)
    assert (stuck.retry, stuck.level) == (None, "error")
    assert stuck.message.startswith("out of memory at micro-batch 1: paused; `cockpit plan`")


# ---------------------------------------------------------------------------------------------
# Hand-set LR changes and the one ceiling


def _plan(scheduled: float, scale: float = 1.0, step: int = 100) -> LrPlan:
    """A step after warmup whose planned LR is `scheduled` (and the highest from there on)."""
    return LrPlan(step, scale, scheduled, step, scheduled, scheduled)


def test_set_lr_keeps_the_schedule_shape_as_a_multiplier() -> None:
    change = lr_change("set_lr", 3e-4, _plan(1e-3))
    assert isinstance(change, LrChange)
    assert change.old_lr == 1e-3
    assert change.scale == pytest.approx(0.3) and change.new_lr == pytest.approx(3e-4)


def test_scale_lr_multiplies_the_current_multiplier() -> None:
    change = lr_change("scale_lr", 2.0, _plan(1e-3, scale=0.5))
    assert change == LrChange(old_lr=5e-4, new_lr=1e-3, scale=1.0, settled_step=100, settled_lr=1e-3)


def test_set_lr_during_warmup_is_the_lr_after_it() -> None:
    cfg = load_preset("tiny", ["optim.lr=3e-4", "schedule.warmup_steps=20"])
    plan = lr_plan(12, cfg, 1.0)
    assert plan.in_warmup and plan.settled_step == 20 and plan.settled == pytest.approx(3e-4)
    change = lr_change("set_lr", 1e-3, plan)
    assert isinstance(change, LrChange)
    # x3.33 on the schedule: 1e-3 once warmup is over, the ramp's share of it until then
    assert change.scale == pytest.approx(1e-3 / 3e-4)
    assert change.settled_lr == pytest.approx(1e-3)
    assert change.new_lr == pytest.approx(1e-3 * 13 / 21)
    assert lr_change("set_lr", MAX_LR, lr_plan(9, cfg, 1.0)).settled_lr == pytest.approx(MAX_LR)


def test_a_factor_that_passes_the_maximum_after_warmup_is_refused_during_it() -> None:
    cfg = load_preset("tiny", ["optim.lr=1", "schedule.warmup_steps=20"])
    plan = lr_plan(0, cfg, 1.0)  # the ramp is at 1/21 now: x8 gives 0.38 now, 8 later
    assert isinstance(lr_change("scale_lr", 8.0, plan), LrChange)
    assert lr_change("scale_lr", 20.0, plan) == (
        "LR change refused: x20 would take the LR to 20 at step 20 (after warmup); the maximum is 10"
    )


@pytest.mark.parametrize(
    ("command", "value", "scheduled", "message"),
    [
        ("set_lr", 11.0, 1e-3, "11 is not an LR in (0, 10]"),
        ("scale_lr", 20_000.0, 1e-3, "x20000 would take the LR to 20; the maximum is 10"),
        ("set_lr", -1e-3, 1e-3, "-0.001 is not an LR in (0, 10]"),
        ("scale_lr", 0.0, 1e-3, "x0 is not a factor greater than 0"),
        # the schedule at 0 (a floor of 0 at the end): no multiplier gives 1e-3
        (
            "set_lr", 1e-3, 0.0,
            "the planned LR at step 100 is 0, so no multiplier makes it 0.001; change it by a "
            "factor later",
        ),
    ],
)  # fmt: skip
def test_an_lr_outside_the_range_is_refused_with_the_range(
    command: str, value: float, scheduled: float, message: str
) -> None:
    assert lr_change(command, value, _plan(scheduled)) == f"LR change refused: {message}"


def test_one_ceiling_for_the_config_the_dialog_and_the_running_engine() -> None:
    assert load_preset("tiny", [f"optim.lr={MAX_LR}"]).optim.lr == MAX_LR
    with pytest.raises(ConfigError, match="optim.lr"):
        load_preset("tiny", [f"optim.lr={MAX_LR * 1.01}"])
    assert parse_lr_input(str(MAX_LR)) == ("set", MAX_LR)
    with pytest.raises(ValueError, match=f"at most {MAX_LR:g}"):
        parse_lr_input(str(MAX_LR * 1.01))
    assert isinstance(lr_change("set_lr", MAX_LR, _plan(1e-3)), LrChange)
    assert isinstance(lr_change("set_lr", MAX_LR * 1.01, _plan(1e-3)), str)


def test_the_lr_dialog_and_the_rules_load_without_torch() -> None:
    code = (
        "import sys, cockpit.screens.lr_dialog, engine.train.faults, engine.files, engine.optim.schedule, engine.checkpoint.resume;"
        "sys.exit(1 if 'torch' in sys.modules else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr + "torch was imported"
