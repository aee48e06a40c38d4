"""Every engine the app can be handed satisfies `engine.contract.EngineHandle`, member by member.

`isinstance` with a runtime-checkable Protocol only checks that the names exist; the signature
comparison catches a drift in what a caller may pass (a renamed parameter, a changed default).
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest
import test_app_pilot
from scripted import ScriptedTrainer

from engine.config.presets import load_preset
from engine.contract import EngineHandle
from engine.control.client import RemoteEngine
from engine.events import Event, Step
from engine.rundir.recorded import RecordedRun
from engine.train.trainer import Trainer

PROPERTIES = [
    name for name, value in vars(EngineHandle).items() if isinstance(value, property)
]
METHODS = [
    name
    for name, value in vars(EngineHandle).items()
    if inspect.isfunction(value) and not name.startswith("_")
]


def real_trainer(tmp_path: Any) -> Trainer:
    return Trainer(load_preset("tiny"), run_dir=tmp_path / "run", telemetry=False)


def fake_engine_types() -> list[type]:
    """The scripted engine and every variant of it the pilot tests define."""
    variants = [
        value
        for value in vars(test_app_pilot).values()
        if isinstance(value, type) and issubclass(value, ScriptedTrainer)
    ]
    return [ScriptedTrainer, *(v for v in variants if v is not ScriptedTrainer)]


def engines(tmp_path: Any) -> list[Any]:
    return [real_trainer(tmp_path), *(cls() for cls in fake_engine_types())]


def test_the_protocol_has_the_members_the_app_uses() -> None:
    assert set(METHODS) == {
        "pause", "resume", "checkpoint", "set_lr", "scale_lr", "sample", "evaluate", "stop",
        "rollback", "set_settings", "drain_events", "wait_for_events", "run", "close",
    }  # fmt: skip
    assert set(PROPERTIES) == {
        "state", "dropped_events", "outlives_viewer", "read_only", "replayed_until", "recorded",
        "run_dir", "resume_from", "telemetry_enabled",
    }  # fmt: skip


def test_every_handle_has_every_member(tmp_path: Any) -> None:
    from run_dirs import write_run

    handles = [*engines(tmp_path), RecordedRun(write_run(tmp_path, "over"))]
    for handle in handles:
        missing = [name for name in (*PROPERTIES, *METHODS) if not hasattr(handle, name)]
        assert missing == [], type(handle).__name__
    for name in (*PROPERTIES, *METHODS):  # an attached run's handle, without connecting
        assert hasattr(RemoteEngine, name) or name in REMOTE_INSTANCE_ATTRIBUTES, name


REMOTE_INSTANCE_ATTRIBUTES = {"run_dir", "read_only", "replayed_until"}  # set on connecting


def test_only_a_finished_runs_view_is_recorded(tmp_path: Any) -> None:
    from run_dirs import write_run

    assert [e.recorded for e in engines(tmp_path)] == [False] * len(engines(tmp_path))
    assert RemoteEngine.recorded is False
    recorded = RecordedRun(write_run(tmp_path, "over"))
    assert recorded.recorded is True and recorded.resume_from is None
    assert recorded.run_dir == tmp_path / "over"


def test_a_trainer_says_where_it_resumed_from(tmp_path: Any) -> None:
    fresh = real_trainer(tmp_path)
    assert fresh.resume_from is None and fresh.run_dir == tmp_path / "run"
    (tmp_path / "run").mkdir()
    resumed = Trainer(load_preset("tiny"), resume=tmp_path / "run", telemetry=False)
    assert resumed.resume_from == tmp_path / "run" and resumed.run_dir == tmp_path / "run"


def test_fake_engines_cover_the_pilot_tests_variants() -> None:
    names = {cls.__name__ for cls in fake_engine_types()}
    assert {"ScriptedTrainer", "GatedTrainer", "SlowStepTrainer"} <= names


def test_every_engine_is_an_engine_handle(tmp_path: Any) -> None:
    for engine in engines(tmp_path):
        assert isinstance(engine, EngineHandle), type(engine).__name__


# Who asked for a `set` or an LR change: an in-process engine may be told (the control server
# names the viewer); the protocol's callers never pass it.
BY = {("by", inspect.Parameter.POSITIONAL_OR_KEYWORD, "app", str)}
EXTRA_KEYWORDS = {"set_settings": BY, "set_lr": BY, "scale_lr": BY}


def signature(function: Any, extra: set[tuple[Any, ...]] = frozenset()) -> list[tuple[Any, ...]]:
    sig = inspect.signature(function, eval_str=True)
    return [
        *(
            described
            for p in sig.parameters.values()
            if (described := (p.name, p.kind, p.default, p.annotation)) not in extra
        ),
        ("return", sig.return_annotation),
    ]


@pytest.mark.parametrize("name", METHODS)
def test_every_engine_takes_the_protocols_arguments(tmp_path: Any, name: str) -> None:
    expected = signature(getattr(EngineHandle, name))
    for engine_type in [*(type(e) for e in engines(tmp_path)), RemoteEngine, RecordedRun]:
        implementation = getattr(engine_type, name)
        extra = EXTRA_KEYWORDS.get(name, set())
        assert signature(implementation, extra) == expected, f"{engine_type.__name__}.{name}"


def test_only_an_attached_engine_outlives_its_viewer(tmp_path: Any) -> None:
    for engine in engines(tmp_path):
        assert engine.outlives_viewer is False and engine.read_only is False
    assert RemoteEngine.outlives_viewer is True  # read_only: what the run's hello said


def test_a_finished_run_is_an_engine_handle_that_only_watches(tmp_path: Any) -> None:
    from run_dirs import write_run

    recorded = RecordedRun(write_run(tmp_path, "over"))
    assert isinstance(recorded, EngineHandle)
    assert recorded.read_only is True and recorded.outlives_viewer is False
    assert recorded.run() == recorded.state == "finished"


def test_events_are_drained_through_the_handle(tmp_path: Any) -> None:
    step = Step(
        step=1, loss=2.5, lr=1e-3, grad_norm=0.5, tokens_per_s=1e4, step_time_s=0.1, tokens=768
    )
    for engine in engines(tmp_path):
        engine.events.put(step)
        drained = engine.drain_events()
        assert drained == [step] and all(isinstance(e, Event) for e in drained)
        assert engine.drain_events() == []
        assert engine.dropped_events == 0 and isinstance(engine.state, str)


def test_dropped_events_counts_what_the_bounded_queue_let_go(tmp_path: Any) -> None:
    trainer = Trainer(
        load_preset("tiny"), run_dir=tmp_path / "run", telemetry=False, event_capacity=2
    )
    for step in range(1, 6):
        trainer.emit(
            Step(step=step, loss=2.0, lr=1e-3, grad_norm=0.5, tokens_per_s=1e4,
                 step_time_s=0.1, tokens=768 * step)
        )  # fmt: skip
    assert trainer.dropped_events == 3
    assert [e.step for e in trainer.drain_events()] == [4, 5]
