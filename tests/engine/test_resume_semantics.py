"""Resume does what the user asked, or refuses: --set on the optimizer and schedule, another
optimizer, an extended run, an older checkpoint, a finished run. Real Trainer on tiny models,
and the real CLI for what the user types."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from run_copies import copy_run
from tiny import set_args, tiny_overrides

from cockpit.cli import main
from engine.checkpoint.store import latest_checkpoint, list_checkpoints
from engine.config.presets import load_preset
from engine.events import Event
from engine.optim.schedule import lr_at
from engine.rundir.metrics_log import read_history
from engine.train.trainer import Trainer

SMALL = tiny_overrides("model.block_size=32", "sample.max_new_tokens=4", quiet=True)  # 32: the tiny preset's own


def train(run_dir: Path, *extra: str) -> list[Event]:
    """A tiny preset run (warmup 10, lr 3e-3, min_lr 3e-4) with its events."""
    events: list[Event] = []
    trainer = Trainer(
        load_preset("tiny", [*SMALL, *extra]),
        run_dir=run_dir,
        sinks=[events.append],
        telemetry=False,
    )
    assert trainer.run() == "finished"
    return events


@pytest.fixture(scope="module")
def trained(
    tmp_path_factory: pytest.TempPathFactory, isolated_env: dict[str, str]
) -> Callable[..., Path]:
    """The finished run of `train(...extra)`, trained once for the module: tests copy it."""
    runs: dict[tuple[str, ...], Path] = {}

    def run_of(*extra: str) -> Path:
        if extra not in runs:
            with pytest.MonkeyPatch.context() as patch:
                for name, value in isolated_env.items():
                    patch.setenv(name, value)
                runs[extra] = tmp_path_factory.mktemp("trained") / "run"
                train(runs[extra], *extra)
        return runs[extra]

    return run_of


def resume(target: Path, *overrides: str, should_stop=None) -> tuple[Trainer, list[Event], str]:
    events: list[Event] = []
    trainer = Trainer(
        load_preset("default"),
        resume=target,
        resume_overrides=list(overrides),
        sinks=[events.append],
        telemetry=False,
    )
    final = trainer.run(should_stop)
    return trainer, events, final


def of(events: list[Event], kind: str) -> list[Event]:
    return [e for e in events if e.kind == kind]


def records(run_dir: Path, kind: str) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == kind]


def cli(capsys, *args: str) -> tuple[int, str]:
    code = main(["train", "--headless", "--no-telemetry", *args])
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert "Traceback" not in text
    return code, text


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---------------------------------------------------------------- item 1: --set on the optimizer


def test_optimizer_settings_set_on_resume_are_the_ones_training(tmp_path, trained):
    run_dir = copy_run(trained("train.max_steps=20"), tmp_path / "run")
    trainer, events, final = resume(
        run_dir,
        "train.max_steps=24",
        "schedule.decay_steps=40",
        "optim.lr=1e-2",
        "schedule.min_lr=1e-3",
        "optim.weight_decay=0.05",
        "optim.beta2=0.9",
    )
    assert final == "finished"
    # The LR the optimizer applied at the first resumed step is the new schedule's.
    first = of(events, "step")[0]
    assert first.step == 21
    assert first.lr == pytest.approx(lr_at(20, trainer.cfg), rel=1e-9)
    assert first.lr == pytest.approx(1e-3 + 0.75 * 9e-3, rel=1e-9)  # a third into the decay
    groups = trainer.built.parts.optimizer.param_groups
    assert {g["betas"] for g in groups} == {(0.9, 0.9)}
    assert {g["weight_decay"] for g in groups} == {0.0, 0.05}
    assert {g["base_lr"] for g in groups} == {1e-2}
    # ...said in the first lines, kept in metrics.jsonl, and config.json is the truth.
    notes = of(events, "run_started")[0].notes
    assert any(
        n.startswith("optim.lr: 0.003 -> 0.01 (applied from the first resumed step)") for n in notes
    ), notes
    assert any(n.startswith("optim.weight_decay: 0.1 -> 0.05") for n in notes), notes
    assert any(n.startswith("LR at step 20:") for n in notes), notes
    assert records(run_dir, "run_started")[-1]["notes"] == list(notes)
    config = json.loads((run_dir / "config.json").read_text())
    assert config["optim"]["lr"] == 1e-2 and config["optim"]["beta2"] == 0.9


def test_the_headless_printer_shows_the_changes_first(tmp_path, capsys):
    run_dir = tmp_path / "run"
    code, _ = cli(
        capsys, "--preset", "tiny", "--run-dir", str(run_dir), *set_args([*SMALL, "train.max_steps=4"])
    )
    assert code == 0
    code, text = cli(
        capsys, "--resume", str(run_dir), "--set", "train.max_steps=6", "--set", "optim.lr=1e-2"
    )
    assert code == 0, text
    lines = [line for line in text.splitlines() if not line.startswith("data ")]  # the corpus
    assert "resumed from" in lines[0]
    assert any(line.startswith("resume: optim.lr: 0.003 -> 0.01") for line in lines[1:4]), lines


# ---------------------------------------------------------------- item 2: another optimizer


@pytest.mark.parametrize(
    "before, after",
    [
        ("adamw", "lion"),
        ("adamw", "adafactor"),
        ("adamw", "muon"),
        ("muon", "adamw"),
        ("lion", "adamw"),
    ],
)
def test_another_optimizer_starts_fresh_with_a_notice(tmp_path, trained, before, after):
    run_dir = copy_run(trained("train.max_steps=4", f"optim.name={before}"), tmp_path / "run")
    trainer, events, final = resume(run_dir, "train.max_steps=7", f"optim.name={after}")
    assert final == "finished", of(events, "alert")
    assert [e.step for e in of(events, "step")] == [5, 6, 7]
    notes = of(events, "run_started")[0].notes
    assert any(n.startswith(f"optim.name: {before!r} -> {after!r}") and "fresh" in n for n in notes)
    warnings = [a for a in of(events, "alert") if a.level == "warning" and a.code == "resume"]
    assert warnings and after in warnings[0].message and "fresh" in warnings[0].message
    assert not [a for a in of(events, "alert") if a.level == "error"]
    # the new optimizer's own state, nothing carried over from the old one
    optimizer = trainer.built.parts.optimizer
    kinds = {type(o).__name__ for o in getattr(optimizer, "optimizers", [optimizer])}
    # AdamW is torch's fused kernel (it skips a refused step on the device)
    expected = {"adamw": {"FusedAdamW"}, "lion": {"Lion"}, "adafactor": {"Adafactor"}}
    assert kinds == expected.get(after, {"Muon", "FusedAdamW"})
    # and the next resume continues the new optimizer from its own state
    _, events, final = resume(run_dir, "train.max_steps=8")
    assert final == "finished"
    assert not [n for n in of(events, "run_started")[0].notes if "optim.name" in n]


# ---------------------------------------------------------------- item 4: schedule, refusals, branches


def test_extending_max_steps_keeps_the_lr_where_it_was(tmp_path, trained):
    run_dir = copy_run(trained("train.max_steps=20"), tmp_path / "run")
    trainer, events, final = resume(run_dir, "train.max_steps=30")
    assert final == "finished"
    lrs = [e.lr for e in of(events, "step")]
    # the first run ended at its floor (3e-4): the extension continues there, no jump
    assert lrs[0] == pytest.approx(3e-4, rel=1e-9) and max(lrs) == pytest.approx(3e-4, rel=1e-9)
    started = of(events, "run_started")[0]
    assert any(n.startswith("schedule.decay_steps: kept at 20") for n in started.notes)
    assert [lr for step, lr in started.planned_lr if step >= 20] == [pytest.approx(3e-4)] * 10
    assert json.loads((run_dir / "config.json").read_text())["schedule"]["decay_steps"] == 20


def test_an_explicit_decay_horizon_replans_and_says_how_far_the_lr_jumps(tmp_path, trained):
    run_dir = copy_run(trained("train.max_steps=20"), tmp_path / "run")
    trainer, events, final = resume(run_dir, "train.max_steps=30", "schedule.decay_steps=30")
    assert final == "finished"
    first = of(events, "step")[0]
    assert first.lr == pytest.approx(lr_at(20, trainer.cfg)) and first.lr > 1e-3
    notes = of(events, "run_started")[0].notes
    assert f"LR at step 20: 0.0003 -> {first.lr:.3g} (the new planned schedule)" in notes


def test_resuming_an_older_checkpoint_sets_the_newer_ones_aside(tmp_path):
    train(
        tmp_path,
        "train.max_steps=30",
        "checkpoint.interval=10",
        "checkpoint.keep_last=3",
        "eval.interval=10",
    )
    abandoned = {p.name: digest(p) for _, p in list_checkpoints(tmp_path)[1:]}
    assert sorted(abandoned) == ["ckpt-00000020.pt", "ckpt-00000030.pt"]
    older = tmp_path / "ckpt-00000010.pt"

    def stop_at_25() -> bool:
        return bool(trainer_box and trainer_box[0].step >= 25)

    trainer_box: list[Trainer] = []
    events: list[Event] = []
    trainer = Trainer(
        load_preset("default"),
        resume=older,
        resume_overrides=["eval.interval=0"],
        sinks=[events.append],
        telemetry=False,
    )
    trainer_box.append(trainer)
    assert trainer.run(stop_at_25) == "stopped"

    # the abandoned branch is kept, named, out of the way; the older checkpoint is not pruned
    (aside,) = [p for p in tmp_path.iterdir() if p.name.startswith("abandoned-")]
    assert {p.name: digest(p) for p in aside.glob("ckpt-*.pt")} == abandoned
    assert [p.name for _, p in list_checkpoints(tmp_path)] == [
        "ckpt-00000010.pt",
        "ckpt-00000020.pt",
        "ckpt-00000025.pt",
    ]
    assert latest_checkpoint(tmp_path).name == "ckpt-00000025.pt"
    best = tmp_path / "best.pt"
    assert not (best.exists() and best.samefile(aside / "ckpt-00000030.pt"))
    notes = of(events, "run_started")[0].notes
    assert any(aside.name in n and "ckpt-00000030.pt" in n for n in notes), notes
    # the curves of the new branch: the abandoned branch's eval at step 20 is not one of them
    history = read_history(tmp_path / "metrics.jsonl", 25)
    assert [e.step for e in history if e.kind == "eval"] == [10]
    steps = [e for e in history if e.kind == "step"]
    assert [e.step for e in steps] == list(range(1, 26))
    # and `--resume DIR` continues the new branch
    _, events, final = resume(tmp_path, "train.max_steps=27")
    assert of(events, "run_started")[0].start_step == 25 and final == "finished"


# ---------------------------------------------------------------- item 7: a finished run


def test_resuming_a_finished_run_says_so_and_touches_nothing(tmp_path):
    train(tmp_path, "train.max_steps=6")
    before = {p.name: digest(p) for p in tmp_path.iterdir() if p.is_file()}
    _, events, final = resume(tmp_path)
    assert final == "finished"
    assert not of(events, "eval") + of(events, "sample") + of(events, "checkpoint")
    (alert,) = of(events, "alert")
    assert f"{tmp_path} is finished at step 6/6" in alert.message
    assert f"--resume {tmp_path} --set train.max_steps=12" in alert.message
    assert {p.name: digest(p) for p in tmp_path.iterdir() if p.is_file()} == before


def test_cli_resume_of_a_finished_run_is_one_line_exit_0(tmp_path, capsys):
    run_dir = tmp_path / "run"
    code, _ = cli(
        capsys, "--preset", "tiny", "--run-dir", str(run_dir), *set_args([*SMALL, "train.max_steps=4"])
    )
    assert code == 0
    before = {p.name: digest(p) for p in run_dir.iterdir()}
    code, text = cli(capsys, "--resume", str(run_dir))
    assert code == 0
    assert text.strip() == (
        f"{run_dir} is finished at step 4/4; extend it with "
        f"--resume {run_dir} --set train.max_steps=8"
    )
    assert {p.name: digest(p) for p in run_dir.iterdir()} == before


@pytest.mark.parametrize("command", ["train", "start"])
def test_cli_resume_on_a_device_this_machine_lacks_is_one_line_exit_2(tmp_path, capsys, command):
    """The device a resumed run would train on is checked before anything starts, as a new run's
    is: one line naming the fix, exit 2, the run's files untouched and no background run spawned
    (`cockpit start` had spawned one that failed out of sight)."""
    run_dir = tmp_path / "run"
    code, _ = cli(
        capsys, "--preset", "tiny", "--run-dir", str(run_dir), *set_args([*SMALL, "train.max_steps=4"])
    )
    assert code == 0
    before = {p.name: digest(p) for p in run_dir.iterdir()}
    args = ["--resume", str(run_dir), "--set", "train.max_steps=8", "--set", "train.device=cuda"]
    if command == "train":
        code, text = cli(capsys, *args)
    else:
        code = main(["start", "--no-telemetry", *args])
        captured = capsys.readouterr()
        text = captured.out + captured.err
    assert code == 2
    assert text.strip() == (
        "cockpit: train.device: CUDA is not available on this machine; use --set train.device=auto"
    )
    assert {p.name: digest(p) for p in run_dir.iterdir()} == before
