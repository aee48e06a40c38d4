"""QA of issue 25's `set` decisions: a key that would change nothing on this run is refused
(no acknowledgement of a change that is none), and the refusals name what to do."""

import pytest

from engine.config import COOLDOWN, config_from_dict, live_change


def _cfg(optim: str = "adamw", kind: str = "cosine"):
    return config_from_dict(
        {
            "optim": {"name": optim, "lr": 1e-3},
            "schedule": {"kind": kind, "warmup_steps": 10, "min_lr": 1e-4, "decay_fraction": 0.2},
            "train": {"max_steps": 100},
        }
    )


@pytest.mark.parametrize(
    "optim, kind, settings, expected",
    [
        ("adamw", "cosine", {"optim.muon_lr": 0.01}, "optim.muon_lr changes nothing on this run: it applies to optim.name = 'muon', and this run's is 'adamw'"),
        ("adamw", "cosine", {"optim.muon_momentum": 0.9}, "it applies to optim.name = 'muon'"),
        ("adamw", "wsd", {"schedule.decay_steps": 50}, "schedule.decay_steps changes nothing on this run: it applies to schedule.kind = 'cosine', and this run's is 'wsd'"),
        ("adamw", "cosine", {"schedule.decay_fraction": 0.5}, "it applies to schedule.kind = 'wsd', and this run's is 'cosine'"),
        ("adamw", "constant", {"schedule.decay_start": 60}, "schedule.decay_start changes nothing on this run"),
        ("adamw", "constant", {"schedule.min_lr": 0.0}, "a constant schedule has no floor to decay to; set optim.lr"),
    ],
)
def test_a_key_that_changes_nothing_on_this_run_is_refused(optim, kind, settings, expected):
    refused = live_change(_cfg(optim, kind), settings, step=20)
    assert isinstance(refused, str) and refused.startswith("set refused: ") and expected in refused


def test_the_same_keys_are_taken_where_they_apply():
    assert not isinstance(live_change(_cfg("muon"), {"optim.muon_lr": 0.01}, step=20), str)
    assert not isinstance(live_change(_cfg(kind="wsd"), {"schedule.decay_fraction": 0.5}, step=20), str)
    assert not isinstance(live_change(_cfg(), {"schedule.decay_steps": 50}, step=20), str)
    # asking for the value in force is no change, wherever it applies
    unchanged = live_change(_cfg(), {"optim.muon_lr": 0.02}, step=20)
    assert not isinstance(unchanged, str) and not unchanged.changes


def test_an_unknown_key_lists_cool_down_now_among_the_live_ones():
    refused = live_change(_cfg(), {"zzz.qqq": 1}, step=20)
    assert isinstance(refused, str) and f", {COOLDOWN})" in refused


def test_cooling_down_again_says_how_to_move_the_end():
    cfg = _cfg(kind="wsd")
    cooling = live_change(cfg, {COOLDOWN: 0}, step=30)
    assert not isinstance(cooling, str)
    refused = live_change(cooling.config, {COOLDOWN: 0}, step=40)
    assert refused == (
        "set refused: the run has been cooling down since step 30; to end it sooner or later, "
        "set train.max_steps"
    )


def test_a_sample_too_long_to_wait_for_is_refused_mid_run():
    # the run samples between steps: a billion tokens held it (and its stop) for hours
    refused = live_change(_cfg(), {"sample.max_new_tokens": 1_000_000_000}, step=20)
    assert refused == (
        "set refused: sample.max_new_tokens=1,000,000,000: the run samples between steps, so a "
        "sample that long would hold the training (and a stop) until it ends; at most 10,000 while "
        "the run trains (cockpit sample RUN_DIR --tokens N writes longer text)"
    )
    taken = live_change(_cfg(), {"sample.max_new_tokens": 10_000}, step=20)
    assert not isinstance(taken, str) and taken.changes["sample.max_new_tokens"][1] == 10_000


def test_the_head_lr_of_a_tied_head_and_normuons_beta2_off_normuon_are_refused():
    tied = _cfg()  # tie_embeddings is on by default
    assert tied.model.tie_embeddings
    refused = live_change(tied, {"optim.head_lr": 0.01}, step=20)
    assert isinstance(refused, str) and "its head is tied to the embeddings" in refused
    refused = live_change(_cfg("muon"), {"optim.normuon_beta2": 0.9}, step=20)
    assert isinstance(refused, str) and "applies to optim.muon_variant = 'normuon'" in refused
    untied = config_from_dict({"model": {"tie_embeddings": False}, "train": {"max_steps": 100}})
    assert not isinstance(live_change(untied, {"optim.head_lr": 0.01}, step=20), str)
    normuon = config_from_dict(
        {"optim": {"name": "muon", "muon_variant": "normuon"}, "train": {"max_steps": 100}}
    )
    assert not isinstance(live_change(normuon, {"optim.normuon_beta2": 0.9}, step=20), str)
