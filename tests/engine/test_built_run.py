"""The run is built whole, in one place (engine.train.build_run): no part of it is optional or
filled in later, and the handle the app holds before the build is another object."""

from __future__ import annotations

import dataclasses
import typing

from engine.train.run import Run
from engine.train.trainer import Trainer
from tests.engine.test_trainer import tiny_cfg


def test_no_field_of_a_run_is_optional() -> None:
    hints = typing.get_type_hints(Run)
    for field in dataclasses.fields(Run):
        hint = hints[field.name]
        assert type(None) not in typing.get_args(hint), f"Run.{field.name}: {hint}"
        assert "None" not in str(field.type) and "Optional" not in str(field.type), field


def test_a_run_built_on_the_tiny_preset_has_every_part(tmp_path) -> None:
    trainer = Trainer(
        tiny_cfg("train.max_steps=2", "eval.interval=0", "sample.interval=0"),
        run_dir=tmp_path / "run",
        telemetry=False,
    )
    assert trainer.built is None  # the handle is cheap: nothing is built before set_up
    trainer.set_up()
    run = trainer.built
    assert isinstance(run, Run) and run is not trainer
    missing = [f.name for f in dataclasses.fields(Run) if getattr(run, f.name) is None]
    assert missing == []
    assert run.cfg is trainer.cfg and run.run_dir == trainer.run_dir
    assert trainer.run() == "finished" and trainer.step == 2
