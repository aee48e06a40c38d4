"""Changes of settings survive everything: a checkpoint carries them, a resume and a fork keep
them, a rollback undoes those after its checkpoint, config.toml lists them beside the starting
values and a run started from it makes them again at the same steps (the same losses, bit for
bit, on the CPU). Real tiny runs in the test process."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import tomllib
import torch
from tiny import tiny_overrides

from cockpit.cli import main
from engine.checkpoint.store import checkpoint_path, latest_checkpoint, load_checkpoint
from engine.config import ConfigError, SettingsTimeline, config_to_toml, load_preset, load_replay
from engine.events import Event
from engine.rundir.branch import branch_overrides
from engine.train.config_file import ReplayPlan
from engine.train.live_settings import resumed_settings, settings_back
from engine.train.trainer import Trainer

SMALL = tiny_overrides(
    "model.block_size=32",  # the tiny preset's own
    "train.max_steps=16",
    "train.log_every=1",  # every step read back at once: a command lands at the next boundary
    quiet=True,
)
WD = 0.1  # the default weight decay, the starting value the set at step 7 changes

Action = Callable[[Trainer], None]


def run(trainer: Trainer, at: dict[int, Action]) -> tuple[str, list[Event]]:
    """Run `trainer`, asking for at[N] once step N is read back (it lands at the boundary of
    step N: the change is recorded at step N and shapes step N + 1 on)."""
    events: list[Event] = []

    def sink(event: Event) -> None:
        events.append(event)
        if event.kind == "step" and event.step in at:
            at.pop(event.step)(trainer)

    trainer.sinks.append(sink)
    return trainer.run(), events


def fresh(run_dir: Path, *extra: str) -> Trainer:
    return Trainer(load_preset("tiny", [*SMALL, *extra]), run_dir=run_dir, telemetry=False,
                   interactive=False)  # fmt: skip


def resumed(target: Path, *overrides: str) -> Trainer:
    return Trainer(load_preset("tiny"), resume=target, resume_overrides=list(overrides),
                   telemetry=False, interactive=False)  # fmt: skip


def set_wd(trainer: Trainer) -> None:
    trainer.set_settings({"optim.weight_decay": 0.0})


def step_losses(run_dir: Path) -> dict[int, float]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return {r["step"]: r["loss"] for r in map(json.loads, lines) if r["kind"] == "step"}


def of(events: list[Event], kind: str) -> list[Event]:
    return [e for e in events if e.kind == kind]


@pytest.fixture(scope="module")
def stopped_at_10(tmp_path_factory) -> Path:
    """A run with weight decay set to 0 at step 7, stopped (and saved) at step 10 of 16."""
    run_dir = tmp_path_factory.mktemp("persist") / "run"
    state, events = run(fresh(run_dir), {7: set_wd, 10: lambda t: t.stop()})
    assert state == "stopped", [e.message for e in of(events, "alert")]
    return run_dir


def copy_of(run_dir: Path, tmp_path: Path) -> Path:
    from tests.run_copies import copy_run

    return copy_run(run_dir, tmp_path / run_dir.name)


# ---------------------------------------------------------------- the checkpoint


def test_a_checkpoint_carries_the_settings_in_force_and_the_changes_so_far(stopped_at_10):
    state = load_checkpoint(checkpoint_path(stopped_at_10, 10))
    assert state["config"]["optim"]["weight_decay"] == 0.0  # in force at its step
    assert state["start_config"]["optim"]["weight_decay"] == WD  # config.toml's starting value
    assert state["settings_changes"] == [
        {"step": 7, "by": "app", "settings": {"optim.weight_decay": 0.0}}
    ]
    assert state["settings_planned"] == []


def test_config_toml_lists_the_changes_after_the_starting_values(stopped_at_10):
    text = (stopped_at_10 / "config.toml").read_text()
    assert text.index("[log]") < text.index("[[changes]]")
    assert 'settings = { "optim.weight_decay" = 0.0 }' in text
    assert "# The changes made while the run trained" in text
    raw = tomllib.loads(text)
    assert raw["optim"]["weight_decay"] == WD
    assert raw["changes"] == [{"step": 7, "by": "app", "settings": {"optim.weight_decay": 0.0}}]
    replay = load_replay(str(stopped_at_10 / "config.toml"))
    assert replay.config.optim.weight_decay == WD
    assert [c.record() for c in replay.changes.changes] == raw["changes"]
    # as a plain preset it is the starting values
    assert load_preset(str(stopped_at_10 / "config.toml")).optim.weight_decay == WD


# ---------------------------------------------------------------- resume, fork


def test_a_resume_keeps_the_changes_in_force_at_its_checkpoint(stopped_at_10, tmp_path):
    run_dir = copy_of(stopped_at_10, tmp_path)
    trainer = resumed(run_dir)
    state, events = run(trainer, {})
    assert state == "finished"
    assert trainer.cfg.optim.weight_decay == 0.0
    decays = [g["weight_decay"] for g in trainer.built.parts.optimizer.param_groups]
    assert decays and max(decays) == 0.0  # the optimizer trains with it, not the start's 0.1
    final = load_checkpoint(latest_checkpoint(run_dir))
    assert [c["step"] for c in final["settings_changes"]] == [7]
    assert tomllib.loads((run_dir / "config.toml").read_text())["changes"][0]["step"] == 7


def test_a_resume_set_of_a_changed_key_wins_and_is_a_change_by_resume(stopped_at_10, tmp_path):
    run_dir = copy_of(stopped_at_10, tmp_path)
    trainer = resumed(run_dir, "optim.weight_decay=0.05")
    state, _ = run(trainer, {})
    assert state == "finished" and trainer.cfg.optim.weight_decay == 0.05
    changes = tomllib.loads((run_dir / "config.toml").read_text())["changes"]
    assert changes == [
        {"step": 7, "by": "app", "settings": {"optim.weight_decay": 0.0}},
        {"step": 10, "by": "resume", "settings": {"optim.weight_decay": 0.05}},
    ]
    assert any("optim.weight_decay: 0.0 -> 0.05" in note for note in trainer.resume_notes)


def test_a_fork_carries_the_timeline_of_its_checkpoint(stopped_at_10, tmp_path, capsys):
    branch = tmp_path / "branch"
    code = main(["fork", str(checkpoint_path(stopped_at_10, 10)), "--set", "train.max_steps=13",
                 "--run-dir", str(branch), "--no-start"])  # fmt: skip
    assert code == 0
    said = capsys.readouterr().err
    assert "with the changes made before it: step 7 optim.weight_decay=0.0" in said
    fork = json.loads((branch / "fork.json").read_text())
    assert fork["settings_changes"] == [
        {"step": 7, "by": "app", "settings": {"optim.weight_decay": 0.0}}
    ]
    trainer = resumed(branch, *branch_overrides(branch))
    state, _ = run(trainer, {})
    assert state == "finished" and trainer.step == 13
    assert trainer.cfg.optim.weight_decay == 0.0
    changes = tomllib.loads((branch / "config.toml").read_text())["changes"]
    assert changes == [
        {"step": 7, "by": "app", "settings": {"optim.weight_decay": 0.0}},
        # the cosine decay's horizon kept where it was, as the resume kept it
        {"step": 10, "by": "resume", "settings": {"schedule.decay_steps": 16, "train.max_steps": 13}},
    ]


# ---------------------------------------------------------------- replay


def test_a_replay_makes_the_changes_at_the_same_steps_with_the_same_losses(stopped_at_10, tmp_path):
    """The original: wd 0 at step 7, stopped at 10, resumed, LR set at step 12. Its config.toml
    started afresh trains the same losses, to the last bit."""
    original = copy_of(stopped_at_10, tmp_path)
    state, events = run(resumed(original), {12: lambda t: t.set_lr(1e-3)})
    assert state == "finished" and len(of(events, "lr_changed")) == 1
    changes = tomllib.loads((original / "config.toml").read_text())["changes"]
    assert [(c["step"], list(c["settings"])) for c in changes] == [
        (7, ["optim.weight_decay"]), (12, ["lr_scale"]),
    ]  # fmt: skip

    replay = load_replay(str(original / "config.toml"))
    again = Trainer(replay.config, planned_changes=replay.changes, run_dir=tmp_path / "again",
                    telemetry=False, interactive=False)  # fmt: skip
    state, events = run(again, {})
    assert state == "finished"
    made = of(events, "settings_changed")
    assert [(e.step, e.replayed, e.changes) for e in made] == [
        (7, True, {"optim.weight_decay": [WD, 0.0]})
    ]
    assert [e.step for e in of(events, "lr_changed")] == [12]
    expected = step_losses(original)
    assert sorted(expected) == list(range(1, 17))
    assert step_losses(tmp_path / "again") == expected  # identical floats, every step
    # and its own config.toml says the same changes again
    assert tomllib.loads((tmp_path / "again" / "config.toml").read_text())["changes"] == changes


def test_a_replay_resumed_goes_on_replaying(tmp_path):
    plan = SettingsTimeline()
    plan.add(3, {"optim.weight_decay": 0.0})
    plan.add(6, {"optim.grad_clip": 0.5})
    cfg = load_preset("tiny", [*SMALL, "train.max_steps=8"])
    first = Trainer(cfg, planned_changes=plan, run_dir=tmp_path / "r", telemetry=False,
                    interactive=False)  # fmt: skip
    assert run(first, {4: lambda t: t.stop()})[0] == "stopped"
    assert [c["step"] for c in load_checkpoint(tmp_path / "r")["settings_planned"]] == [6]
    trainer = resumed(tmp_path / "r")
    state, events = run(trainer, {})
    assert state == "finished" and trainer.cfg.optim.grad_clip == 0.5
    assert [e.step for e in of(events, "settings_changed")] == [6]


def test_a_replay_plan_makes_each_change_once_at_its_step():
    plan = SettingsTimeline()
    for step in (2, 5, 5):
        plan.add(step, {"optim.grad_clip": float(step)})
    replay = ReplayPlan(plan.changes)
    assert replay.due(0) == [] and replay.due(2) == [plan.changes[0]] and replay.due(2) == []
    assert replay.due(5) == plan.changes[1:] and replay.due(5) == []
    replay = ReplayPlan(plan.changes)
    assert replay.due(4) == []  # resumed past step 2: that one is not made
    assert replay.state_dict()["settings_planned"] == [c.record() for c in plan.changes[1:]]


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ('step = 7\nsettings = { "optim.weight_decay" = -1.0 }', "entry 1 (step 7, by app): set: optim.weight_decay: expected a value >= 0.0"),
        ('step = 7\nsettings = { "model.n_layer" = 4 }', "entry 1 (step 7, by app): model.n_layer cannot change"),
        ('step = 40\nsettings = { "optim.grad_clip" = 1.0 }', "entry 1 (step 40, by app): the run ends at step 16"),
        ('step = 7\nsettings = { "lr_scale" = 0.0 }', "lr_scale: expected a positive number"),
        ('step = 7\nby = "resume"\nsettings = { "train.batch_size" = 2 }', "train.batch_size was changed by a resume"),
        ("settings = {}", "a [[changes]] entry needs step"),
    ],
)
def test_a_replay_that_no_longer_holds_is_refused_in_one_line_naming_the_entry(tmp_path, entry, words):
    path = tmp_path / "config.toml"
    path.write_text(config_to_toml(load_preset("tiny", SMALL)) + f"\n[[changes]]\n{entry}\n")
    with pytest.raises(ConfigError) as refused:
        load_replay(str(path))
    message = str(refused.value)
    assert words in message and "\n" not in message and message.startswith(str(path))


def test_the_cli_refuses_such_a_replay_before_training(tmp_path, capsys):
    path = tmp_path / "config.toml"
    path.write_text(config_to_toml(load_preset("tiny", SMALL))
                    + '\n[[changes]]\nstep = 99\nsettings = { "optim.grad_clip" = 1.0 }\n')  # fmt: skip
    code = main(["train", "--headless", "--no-telemetry", "--preset", str(path),
                 "--run-dir", str(tmp_path / "never")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "[[changes]] entry 1 (step 99, by app)" in err
    assert "Traceback" not in err and not (tmp_path / "never").exists()


# ---------------------------------------------------------------- rollback


def test_a_rollback_past_a_change_undoes_it_and_says_so(tmp_path):
    trainer = fresh(tmp_path / "r", "checkpoint.interval=5")
    state, events = run(trainer, {7: set_wd, 9: lambda t: t.rollback(0.5)})
    assert state == "finished"
    alert = next(e for e in of(events, "alert") if e.code == "rollback")
    assert alert.message.startswith("rolled back to step 5 (ckpt-00000005.pt), LR x0.5")
    assert "settings back to those at step 5: optim.weight_decay 0 -> 0.1" in alert.message
    assert trainer.cfg.optim.weight_decay == WD
    assert max(g["weight_decay"] for g in trainer.built.parts.optimizer.param_groups) == WD
    # the undone change is gone from the timeline; the rollback's LR multiplier is one
    changes = tomllib.loads((tmp_path / "r" / "config.toml").read_text())["changes"]
    assert changes == [{"step": 5, "by": "rollback", "settings": {"lr_scale": 0.5}}]


class Holder:
    def __init__(self, optimizer) -> None:
        self.optimizer = optimizer


def live_alone(cfg):
    from engine.model.gpt import GPT
    from engine.optim.optimizers import build_optimizer
    from engine.train.counters import Counters
    from engine.train.live_settings import LiveSettings

    model = GPT(cfg.model, 64)
    return LiveSettings(cfg=cfg, counters=Counters(step=9), model=model, device_type="cpu",
                        optimizer=Holder(build_optimizer(model, cfg.optim, "cpu")),
                        micro_batch=lambda: cfg.train.batch_size)  # fmt: skip


def test_settings_back_puts_a_checkpoints_live_settings_and_timeline_in_force():
    saved = load_preset("tiny", SMALL)
    cfg = load_preset("tiny", [*SMALL, "optim.weight_decay=0.0", "eval.interval=4"])
    live = live_alone(cfg)
    live.timeline.add(7, {"optim.weight_decay": 0.0})
    records = [{"step": 2, "by": "app", "settings": {"lr_scale": 0.5}}]
    event = settings_back(live, {"config": saved.to_dict(), "step": 5, "settings_changes": records})
    assert event is not None and event.by == "rollback" and event.step == 5
    assert event.changes == {"optim.weight_decay": [0.0, WD], "eval.interval": [4, 0]}
    assert cfg.optim.weight_decay == WD and cfg.eval.interval == 0
    assert max(g["weight_decay"] for g in live.holder.optimizer.param_groups) == WD
    assert live.timeline.state_dict() == records
    assert settings_back(live, {"config": saved.to_dict(), "step": 5}) is None  # nothing differs
    assert not live.timeline  # a checkpoint from before: none


def test_settings_back_keeps_the_micro_batch_an_out_of_memory_retry_halved():
    saved = load_preset("tiny", SMALL)  # 4 sequences a step, in one micro-batch
    cfg = load_preset("tiny", [*SMALL, "train.batch_size=2", "train.grad_accum=2"])
    live = live_alone(cfg)
    assert settings_back(live, {"config": saved.to_dict(), "step": 5}) is None
    assert (cfg.train.batch_size, cfg.train.grad_accum) == (2, 2)


# ---------------------------------------------------------------- files from before


def test_a_checkpoint_from_before_the_timeline_resumes_with_none(stopped_at_10, tmp_path):
    run_dir = copy_of(stopped_at_10, tmp_path)
    path = checkpoint_path(run_dir, 10)
    state = torch.load(path, weights_only=True)
    for key in ("settings_changes", "start_config", "settings_planned"):
        del state[key]
    state["lr_scale"] = 0.5
    torch.save(state, path)
    trainer = resumed(run_dir)
    assert run(trainer, {})[0] == "finished"
    assert trainer.cfg.optim.weight_decay == 0.0  # its config was saved with it in force
    assert any("predates the timeline" in note for note in trainer.resume_notes)
    raw = tomllib.loads((run_dir / "config.toml").read_text())
    assert raw["optim"]["weight_decay"] == 0.0 and "changes" not in raw  # its config: the start


def test_a_config_toml_from_before_reads_with_no_changes(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text(config_to_toml(load_preset("tiny", SMALL)))
    replay = load_replay(str(path))
    assert not replay.changes and replay.config.train.max_steps == 16


def test_a_resume_records_what_its_set_changed_and_nothing_else():
    saved = load_preset("tiny").to_dict()
    saved["data"]["source"] = "/somewhere/else.txt"  # the corpus's path is not a change
    cfg = load_preset("tiny", ["train.max_steps=200", "optim.weight_decay=0.0"])
    assert resumed_settings(saved, cfg) == {"optim.weight_decay": 0.0, "train.max_steps": 200}


def test_a_resume_of_a_checkpoint_from_before_a_setting_records_no_change_of_it():
    saved = load_preset("tiny").to_dict()
    del saved["model"]["vocab_multiple"]  # before padding: read as 1, as it was trained
    del saved["schedule"]["decay_start"]  # before cool down now: the default
    cfg = load_preset("tiny", ["model.vocab_multiple=1", "train.max_steps=200"])
    assert resumed_settings(saved, cfg) == {"train.max_steps": 200}
