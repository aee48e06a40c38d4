"""The journal's entries for live settings, from records as metrics.jsonl holds them: a viewer's
`set` and its `settings_changed` are one entry, a refusal says why on the same entry, an app's
own set is the app's, a replayed change the engine's, and a set that changed nothing none."""

from __future__ import annotations

from typing import Any

from engine.rundir.journal import APP, ENGINE, journal

T = 1_764_512_345.0
ALICE = "alice@gpu1 (pts/3)"
VIEWER = f"viewer 2 {ALICE}"


def rec(kind: str, t: float, **fields: Any) -> dict[str, Any]:
    return {"kind": kind, "time": T + t, **fields}


def started() -> dict[str, Any]:
    return rec("run_started", 0, preset="tiny", start_step=0, resumed_from=None)


def asked(t: float, settings: dict[str, Any], step: int) -> dict[str, Any]:
    return rec("command", t, name="set", args={"settings": settings}, viewer=2, who=ALICE, step=step)


def changed(t: float, step: int, changes: dict[str, list[Any]], **fields: Any) -> dict[str, Any]:
    return rec("settings_changed", t, step=step, changes=changes, **fields)


def lines(records: list[dict[str, Any]]) -> list[tuple[int, str]]:
    return [(e.step, e.line) for e in journal(records)][1:]  # after "started"


def test_a_viewers_set_and_its_acknowledgement_are_one_entry() -> None:
    records = [
        started(),
        asked(1, {"optim.weight_decay": 0.0, "train.max_steps": 5000}, step=40),
        rec("step", 2, step=41, loss=2.0),
        changed(3, 41, {"optim.weight_decay": [0.1, 0.0], "train.max_steps": [2000, 5000]}, by=VIEWER),
    ]
    assert lines(records) == [  # at the step it was made at, as metrics.jsonl says
        (41, f"{VIEWER}: set optim.weight_decay 0.1 -> 0, train.max_steps 2000 -> 5000"),
    ]


def test_a_refused_set_says_why_on_its_own_entry() -> None:
    refusal = (
        "set refused: model.n_layer cannot change while the run trains: the weights belong to "
        "the model they are trained as; a run with another model.n_layer is a new run"
    )
    records = [
        started(),
        asked(1, {"model.n_layer": 8}, step=10),
        rec("alert", 2, level="warning", code="set", message=refusal, step=10),
        rec("alert", 3, level="warning", code="set", message="set refused: again", step=11),
    ]
    assert lines(records) == [
        (10, f"{VIEWER}: set model.n_layer=8 (refused: {refusal.removeprefix('set refused: ')})"),
        (11, f"{APP}: set (refused: again)"),  # no viewer's set waits: the app's own was refused
    ]


def test_the_apps_own_set_is_the_apps_and_leaves_a_viewers_waiting() -> None:
    records = [
        started(),
        asked(1, {"eval.interval": 50}, step=10),
        changed(2, 10, {"optim.grad_clip": [1.0, 0.5]}),  # by "app": the cockpit running it
        changed(3, 11, {"eval.interval": [100, 50]}, by=VIEWER),
    ]
    assert lines(records) == [
        (11, f"{VIEWER}: set eval.interval 100 -> 50"),
        (10, f"{APP}: set optim.grad_clip 1 -> 0.5"),
    ]


def test_a_replayed_change_is_the_engines_and_a_set_that_changed_nothing_no_entry() -> None:
    records = [
        started(),
        changed(1, 300, {"schedule.decay_start": [0, 300], "train.max_steps": [2000, 700]},
                by="alice", replayed=True),  # fmt: skip
        asked(2, {"optim.weight_decay": 0.1}, step=310),
        changed(3, 310, {}, by=VIEWER),  # already 0.1
        asked(4, {"sample.prompts": ["ROMEO:"]}, step=320),
        changed(5, 320, {"sample.prompts": [["\n"], ["ROMEO:"]]}, by=VIEWER),
    ]
    assert lines(records) == [
        (300, f"{ENGINE}: replayed set schedule.decay_start 0 -> 300, train.max_steps 2000 -> 700"),
        (320, f"{VIEWER}: set sample.prompts ['\\n'] -> ['ROMEO:']"),
    ]


def test_a_set_never_acknowledged_keeps_what_was_asked() -> None:
    records = [started(), asked(1, {"optim.lr": "3e-4", "sample.prompts": ["a", "b"]}, step=5)]
    assert lines(records) == [(5, f"{VIEWER}: set optim.lr=3e-4, sample.prompts=['a', 'b']")]


def test_a_value_refused_by_its_check_says_refused_once() -> None:
    # a value's check speaks as --set's ("set: KEY: expected ..."), a rule as "set refused: ..."
    check = "set: optim.weight_decay: expected a value >= 0.0, got -1.0"
    records = [
        started(),
        asked(1, {"optim.weight_decay": -1}, step=10),
        rec("alert", 2, level="warning", code="set", message=check, step=10),
    ]
    assert lines(records) == [
        (10, f"{VIEWER}: set optim.weight_decay=-1 (refused: optim.weight_decay: expected a value >= 0.0, got -1.0)"),
    ]
