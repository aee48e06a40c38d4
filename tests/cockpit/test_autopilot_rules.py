"""The autopilot's rules: read from TOML (bad ones refused in one line naming the rule and the
fix) and evaluated against hand-built event sequences."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
import tomllib

from cockpit.research.autopilot_rules import Autopilot, clock_deadline, load_rules, parse_rules
from engine.config import ConfigError
from engine.events import Alert, Eval, Step

RULES = """
[[rule]]
when = "plateau"
evals = 2
do = "cooldown"

[[rule]]
when = "spike"
do = ["checkpoint", "scale_lr 0.5"]

[[rule]]
when = "at"
step = 100
do = "set optim.lr=1e-4 optim.weight_decay=0"
"""


def rules(text: str = RULES) -> list:
    return parse_rules(tomllib.loads(text))


def evaluation(step: int, val: float) -> Eval:
    return Eval(step=step, train_loss=val, val_loss=val, train_time_s=1.0, time=1000.0 + step)


def fired(pilot: Autopilot, *events: object, live: bool = True) -> list[tuple[int, int]]:
    return [(f.rule.number, f.step) for e in events for f in pilot.observe(e, live)]  # type: ignore[arg-type]


def test_the_actions_are_the_wire_commands() -> None:
    plateau, spike, at = rules()
    assert [(a.command, a.arguments) for a in plateau.actions] == [
        ("set", {"settings": {"schedule.cooldown": 0}})
    ]
    assert [(a.command, a.arguments) for a in spike.actions] == [
        ("checkpoint", {}),
        ("scale_lr", {"factor": 0.5}),
    ]
    assert at.actions[0].arguments == {"settings": {"optim.lr": "1e-4", "optim.weight_decay": "0"}}
    cooldown_200 = rules('[[rule]]\nwhen = "plateau"\nevals = 1\ndo = "cooldown 200"')[0]
    assert cooldown_200.actions[0].arguments == {"settings": {"schedule.cooldown": 200}}


def test_a_plateau_fires_once_per_plateau() -> None:
    pilot = Autopilot(rules(), start=0.0)
    assert fired(pilot, evaluation(10, 3.0), evaluation(20, 2.5), evaluation(30, 2.6)) == []
    assert fired(pilot, evaluation(40, 2.5)) == [(1, 40)]  # two evaluations not below 2.5
    assert fired(pilot, evaluation(50, 2.7), evaluation(60, 2.9)) == []  # the same plateau
    # a new best ends it; two more evaluations without one are a new plateau
    assert fired(pilot, evaluation(70, 2.0), evaluation(80, 2.1)) == []
    assert fired(pilot, evaluation(90, 2.2)) == [(1, 90)]


def test_min_delta_counts_a_small_gain_as_no_gain() -> None:
    text = '[[rule]]\nwhen = "plateau"\nevals = 2\nmin_delta = 0.1\ndo = "cooldown"'
    pilot = Autopilot(rules(text), start=0.0)
    assert fired(pilot, evaluation(1, 3.0), evaluation(2, 2.95)) == []
    assert fired(pilot, evaluation(3, 2.91)) == [(1, 3)]


def test_the_replay_informs_but_never_fires() -> None:
    pilot = Autopilot(rules(), start=0.0)
    replay = [evaluation(10, 2.0), evaluation(20, 2.1), evaluation(30, 2.2)]
    spike = Alert(level="error", message="loss spike", step=30, code="spike")
    step = Step(
        step=150, loss=2.0, lr=1e-3, grad_norm=1.0, tokens_per_s=1.0, step_time_s=0.1, tokens=1
    )
    assert fired(pilot, *replay, spike, step, live=False) == []
    assert pilot.step == 150
    assert fired(pilot, evaluation(160, 2.3)) == [(1, 160)]  # the plateau the replay began


def test_each_spike_fires_and_an_at_step_rule_once() -> None:
    pilot = Autopilot(rules(), start=0.0)
    spike = Alert(level="error", message="loss spike", step=5, code="spike")
    other = Alert(level="warning", message="disk", step=5, code="disk")
    assert fired(pilot, spike, other, spike) == [(2, 5), (2, 5)]
    steps = [
        Step(step=s, loss=2.0, lr=1e-3, grad_norm=1.0, tokens_per_s=1.0, step_time_s=0.1, tokens=1)
        for s in (99, 100, 101)
    ]
    assert fired(pilot, *steps) == [(3, 100)]


def test_after_and_time_rules_fire_once_when_their_time_comes() -> None:
    text = '[[rule]]\nwhen = "at"\nafter = "2m"\ndo = "scale_lr 0.5"'
    pilot = Autopilot(rules(text), start=1000.0)
    assert pilot.tick(1119.0) == []
    assert [f.rule.number for f in pilot.tick(1120.0)] == [1]
    assert pilot.tick(1200.0) == []
    start = datetime.datetime(2026, 12, 5, 23, 30).timestamp()
    assert clock_deadline("02:00", start) == datetime.datetime(2026, 12, 6, 2, 0).timestamp()
    assert clock_deadline("23:45", start) == datetime.datetime(2026, 12, 5, 23, 45).timestamp()


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (
            '[[rule]]\nwhen = "soon"\ndo = "cooldown"',
            "rule 1: when = 'soon': set when to one of plateau, spike, at",
        ),
        (
            '[[rule]]\nwhen = "plateau"\ndo = "cooldown"',
            "rule 1 (plateau): evals = None: set evals to a whole number",
        ),
        (
            '[[rule]]\nwhen = "spike"\ndo = "halve"',
            "rule 1 (spike): unknown action 'halve'; the actions are cooldown",
        ),
        (
            '[[rule]]\nwhen = "spike"\ndo = "scale_lr 0"',
            "rule 1 (spike): 'scale_lr 0': the factor is above 0",
        ),
        (
            '[[rule]]\nwhen = "spike"\ndo = "set optim.lr"',
            "rule 1 (spike): 'set optim.lr': write set KEY=VALUE",
        ),
        (
            '[[rule]]\nwhen = "spike"\nevals = 2\ndo = "checkpoint"',
            "rule 1 (spike): unknown key 'evals'; a spike rule takes do, when",
        ),
        (
            '[[rule]]\nwhen = "at"\ndo = "checkpoint"',
            'rule 1 (at): give exactly one of time = "02:00"',
        ),
        (
            '[[rule]]\nwhen = "at"\ntime = "25:00"\ndo = "checkpoint"',
            "rule 1 (at): time = '25:00': a wall-clock time as HH:MM",
        ),
        (
            '[[rule]]\nwhen = "at"\nafter = "2 days"\ndo = "checkpoint"',
            "rule 1 (at): after = '2 days': a duration with its unit",
        ),
        ('[[rule]]\nwhen = "spike"', "rule 1 (spike): do = None: give an action or a list of them"),
        (
            '[[rule]]\nwhen = "at"\nstep = 9\ndo = "set model.n_layer=3"',
            "rule 1 (at): 'set model.n_layer=3': model.n_layer cannot change while the run trains",
        ),
        ("[rules]\nx = 1", "unknown table or key 'rules'; rules are [[rule]] tables"),
        ("", "no rules; add one"),
    ],
)
def test_a_bad_rule_is_one_line_naming_it_and_the_fix(text: str, line: str) -> None:
    with pytest.raises(ConfigError) as caught:
        rules(text)
    assert line in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_file_that_is_no_toml_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "rules.toml"
    path.write_text("[[rule]\nwhen =")
    with pytest.raises(ConfigError, match=r"rules\.toml: not valid TOML") as caught:
        load_rules(path)
    assert "\n" not in str(caught.value)
