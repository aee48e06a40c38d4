"""Which settings a `set` may change mid-run, as it checks them, and the timeline of changes."""

import math

import pytest

from engine.config import (
    COOLDOWN,
    SettingsTimeline,
    config_from_dict,
    describe,
    live_change,
    wsd_decay_start,
)
from engine.optim.schedule import lr_at


def _cfg(**schedule):
    return config_from_dict(
        {
            "optim": {"lr": 1e-3, "weight_decay": 0.1},
            "schedule": {"warmup_steps": 10, "min_lr": 1e-4, **schedule},
            "train": {"max_steps": 100},
        }
    )


def test_values_typed_or_spelled_as_set_spells_them():
    change = live_change(_cfg(), {"weight_decay": "0.0", "train.max_steps": 500}, step=20)
    assert not isinstance(change, str)
    assert change.changes["optim.weight_decay"] == (0.1, 0.0)
    assert change.config.optim.weight_decay == 0.0 and change.config.train.max_steps == 500
    # the implicit cosine horizon is kept, as a resume keeps it: no LR jump at step 21
    assert change.config.schedule.decay_steps == 100
    assert lr_at(21, change.config) == lr_at(21, _cfg())


def test_nothing_changes_unless_every_key_is_accepted():
    cfg = _cfg()
    refused = live_change(cfg, {"optim.weight_decay": 0.0, "model.n_layer": 8}, step=5)
    assert isinstance(refused, str)
    assert refused.startswith("set refused: model.n_layer cannot change")
    assert refused.endswith("a run with another model.n_layer is a new run")  # a resume refuses it too
    assert cfg.optim.weight_decay == 0.1
    # what a resume takes, the refusal says to resume with
    resumable = live_change(cfg, {"model.dropout": 0.1}, step=5)
    assert isinstance(resumable, str) and resumable.endswith("resume it with --set model.dropout=...")


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"train.seed": 1}, "random streams"),
        ({"data.tokenizer": "r50k_base"}, "corpus and tokenizer"),
        ({"train.batch_size": 4}, "train.grad_accum"),
        ({"optim.weight_decay": -1.0}, "expected a value >= 0.0"),
        ({"train.max_steps": 20}, "must be more than 20"),
        ({"schedule.warmup_steps": 50}, "warmup ended at step 10"),
        ({"weight_dcay": 0.0}, "did you mean 'optim.weight_decay'"),
        ({COOLDOWN: 0}, "needs a WSD schedule"),
        ({}, "no settings given"),
    ],
)
def test_refusals_say_why_in_one_line(settings, words):
    refused = live_change(_cfg(), settings, step=20)
    assert isinstance(refused, str) and words in refused and "\n" not in refused


def test_warmup_changes_while_warming_up():
    change = live_change(_cfg(), {"schedule.warmup_steps": 40}, step=5)
    assert change.config.schedule.warmup_steps == 40
    assert lr_at(6, change.config) == pytest.approx(1e-3 * 7 / 41)


def test_cool_down_now_starts_the_wsd_decay_at_this_step():
    cfg = _cfg(kind="wsd", decay_fraction=0.2)  # decay 80 -> 100
    assert wsd_decay_start(cfg) == 80
    change = live_change(cfg, {COOLDOWN: 0}, step=30)  # the configured 20 steps, from 30
    new = change.config
    assert (new.schedule.decay_start, new.train.max_steps) == (30, 50)
    assert change.changes == {"schedule.decay_start": (0, 30), "train.max_steps": (100, 50)}
    assert lr_at(30, new) == pytest.approx(1e-3)
    assert lr_at(40, new) == pytest.approx((1e-3 + 1e-4) / 2)  # half way down, by hand
    given = live_change(cfg, {COOLDOWN: 10}, step=30).config
    assert given.train.max_steps == 40 and lr_at(35, given) == pytest.approx((1e-3 + 1e-4) / 2)
    assert "cooling down since step 80" in live_change(cfg, {COOLDOWN: 0}, step=85)


def test_an_unchanged_value_is_no_change():
    change = live_change(_cfg(), {"optim.weight_decay": 0.1}, step=3)
    assert change.changes == {}


def test_callers_check_is_asked():
    refused = live_change(_cfg(), {"train.grad_accum": 3}, step=3, check=lambda c: "odd share")
    assert refused == "set refused: odd share"


def test_describe():
    assert describe({"optim.lr": (1e-3, 5e-4), "train.max_steps": (100, 200)}) == (
        "optim.lr 0.001 -> 0.0005, train.max_steps 100 -> 200"
    )


def test_timeline_keeps_what_a_checkpoint_was_trained_under():
    timeline = SettingsTimeline()
    timeline.add(10, {"optim.weight_decay": 0.0}, by="viewer 1 alice")
    timeline.add(30, {"train.max_steps": 500})
    assert [c.step for c in timeline.up_to(20).changes] == [10]
    assert timeline.due(30)[0].settings == {"train.max_steps": 500}
    again = SettingsTimeline.from_records(timeline.state_dict())
    assert again == timeline and again.changes[0].by == "viewer 1 alice"
    assert not SettingsTimeline.from_records(None)  # a checkpoint from before live settings
    with pytest.raises(Exception, match="needs step"):
        SettingsTimeline.from_records([{"step": -1, "settings": {}}])
    assert math.isfinite(timeline.changes[0].settings["optim.weight_decay"])


def test_a_wsd_run_already_decaying_keeps_its_decay_start_when_extended():
    cfg = _cfg(kind="wsd", decay_fraction=0.2)  # decay 80 -> 100
    change = live_change(cfg, {"train.max_steps": 200}, step=90)
    new = change.config
    assert new.schedule.decay_start == 80  # not 160: the LR does not jump back to its peak
    assert change.changes["schedule.decay_start"] == (0, 80)
    assert lr_at(91, new) < lr_at(80, new) == pytest.approx(1e-3)
    assert lr_at(91, new) > lr_at(91, cfg)  # the decay stretched from step 80 to 200
    before = live_change(cfg, {"train.max_steps": 200}, step=50).config  # not decaying yet
    assert before.schedule.decay_start == 0 and wsd_decay_start(before) == 160


def test_cool_down_now_is_refused_while_warming_up():
    refused = live_change(_cfg(kind="wsd"), {COOLDOWN: 0}, step=5)  # warmup to step 10
    assert isinstance(refused, str) and "still warming up (to step 10)" in refused
