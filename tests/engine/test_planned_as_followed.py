"""The planned LR a resumed run announces: its timeline's re-plans, each from its step."""

from __future__ import annotations

from engine.config import SettingsTimeline, load_preset
from engine.optim.schedule import lr_at, planned_curve
from engine.train.live_settings import planned_as_followed


def test_changes_that_do_not_re_plan_keep_the_plan_of_the_settings_in_force() -> None:
    cfg = load_preset("tiny", ["train.max_steps=1000"])
    timeline = SettingsTimeline()
    timeline.add(10, {"optim.weight_decay": 0.0})
    timeline.add(20, {"lr_scale": 0.5}, "app")  # the multiplier is drawn apart, not planned
    assert planned_as_followed(cfg, cfg, timeline) == planned_curve(cfg)
    assert planned_as_followed(cfg, None, timeline) == planned_curve(cfg)


def test_a_cool_down_and_a_new_peak_each_shape_the_plan_from_their_step() -> None:
    start = load_preset("tiny", ["train.max_steps=1000", "schedule.kind=wsd", "schedule.warmup_steps=10"])
    timeline = SettingsTimeline()
    timeline.add(300, {"optim.lr": 1e-3})
    timeline.add(500, {"schedule.decay_start": 500, "train.max_steps": 600}, "app")
    now = load_preset("tiny", ["train.max_steps=600", "schedule.kind=wsd", "schedule.warmup_steps=10",
                               "optim.lr=1e-3", "schedule.decay_start=500"])  # fmt: skip
    curve = dict(planned_as_followed(now, start, timeline))
    assert max(curve) == 599
    assert curve[299] == lr_at(299, start) == 3e-3  # the first peak, up to the change
    assert curve[300] == curve[499] == 1e-3  # the new peak, both sides of the change exactly
    assert curve[599] == lr_at(599, now) < 1e-3  # cooled down
