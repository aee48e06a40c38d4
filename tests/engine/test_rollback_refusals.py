"""A rollback that cannot be done is refused in one line and the run goes on with its weights:
a factor out of range over a live run's socket, a checkpoint damaged on disk (the command and
the automatic rollback after a NaN)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from raw_viewer import RawViewer as Viewer
from raw_viewer import kind

from engine.checkpoint.store import list_checkpoints, load_checkpoint
from engine.config.presets import load_preset
from engine.train.trainer import Trainer


def saved_checkpoint(viewer: Viewer) -> Path:
    assert viewer.command("checkpoint", 1)["ok"] is True
    return Path(viewer.until(kind("checkpoint"))["path"])


def test_rollback_with_a_factor_out_of_range_is_refused_in_one_line_and_training_goes_on(live):
    viewer = Viewer(live.run_dir)
    saved_checkpoint(viewer)  # something to roll back to: only the factor is wrong
    # no run takes these: refused in the reply itself, never acknowledged with ok
    for id, factor in enumerate((-2, 0, "x"), start=10):
        reply = viewer.command("rollback", id, lr_factor=factor)
        assert reply["ok"] is False and "\n" not in reply["error"], reply
        assert reply["error"].startswith("rollback: lr_factor must be a"), reply
    # one that depends on the schedule (its LR past the maximum) is the run's to refuse
    assert viewer.command("rollback", 13, lr_factor=1e300)["ok"] is True
    refusal = viewer.until(kind("alert", code="rollback"))
    assert refusal["level"] == "warning", refusal
    assert refusal["message"].startswith("rollback refused: ") and "\n" not in refusal["message"]
    assert "goes on" in refusal["message"]
    assert live.steps_grow(5)
    # nothing was rolled back: no LR change, the step counter never went back
    assert live.records("lr_changed") == []
    assert not [r for r in live.records("alert", code="rollback") if r["level"] == "info"]
    steps = [r["step"] for r in live.records("step")]
    assert steps == sorted(steps) and len(set(steps)) == len(steps)
    viewer.close()


def test_rollback_to_a_damaged_checkpoint_is_refused_and_the_live_weights_train_on(live):
    viewer = Viewer(live.run_dir)
    path = saved_checkpoint(viewer)
    for _, old in list_checkpoints(live.run_dir):
        if old != path:
            old.unlink()  # the damaged one is the newest: the one a rollback reads
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])  # cut short: a bad disk
    before = live.step()
    assert viewer.command("rollback", 2, lr_factor=0.5)["ok"] is True
    refusal = viewer.until(kind("alert", code="rollback"))
    assert refusal["level"] == "warning" and "\n" not in refusal["message"]
    assert refusal["message"].startswith("rollback refused: ")
    assert "cannot read this checkpoint" in refusal["message"]
    assert live.steps_grow(10)
    assert live.process.poll() is None  # still training
    steps = [r["step"] for r in live.records("step")]
    assert steps == sorted(steps) and steps[-1] >= before + 10  # on from where it was
    assert live.records("lr_changed") == [] and live.records("state", state="failed") == []
    # and what it trained since is saved whole on the next checkpoint
    newer = saved_checkpoint(viewer)
    assert load_checkpoint(newer)["step"] > before
    viewer.close()


def test_an_automatic_rollback_to_a_damaged_checkpoint_keeps_the_weights(tmp_path):
    """Headless, a NaN rolls back on its own: with the checkpoint damaged the run fails as with
    none, saving the intact weights in memory first, instead of failing with nothing saved."""
    cfg = load_preset(
        "tiny",
        [
            "train.max_steps=60",
            "checkpoint.interval=10",
            "eval.interval=0",
            "sample.interval=0",
            "train.on_anomaly=rollback",
        ],
    )
    trainer = Trainer(cfg, run_dir=tmp_path, telemetry=False, interactive=False)
    events: list[Any] = []

    def on_event(event: Any) -> None:
        events.append(event)
        if event.kind == "checkpoint" and event.step == 10:
            damaged = Path(event.path)
            damaged.write_bytes(damaged.read_bytes()[:1000])
            step_parts = trainer.built.instruments.step
            forward = step_parts.forward
            calls = {"n": 0}

            def poisoned(x: Any, y: Any = None) -> Any:
                calls["n"] += 1
                logits, loss = forward(x, y)
                return (logits, loss * float("nan")) if calls["n"] == 5 else (logits, loss)

            step_parts.forward = poisoned  # the 5th step from here (step 15) is a NaN

    trainer.sinks.append(on_event)
    assert trainer.run() == "failed"
    nan = next(e for e in events if e.kind == "alert" and e.code == "nan")
    assert "cannot roll back" in nan.message and "cannot read this checkpoint" in nan.message
    assert "\n" not in nan.message
    saved = [e for e in events if e.kind == "checkpoint" and e.reason == "stop"]
    assert saved and saved[0].step == 14  # the weights from before the NaN step
    assert load_checkpoint(Path(saved[0].path))["step"] == 14
    assert not [e for e in events if e.kind == "alert" and e.code == "crash"]


def test_an_unreadable_checkpoint_is_decided_as_none_and_the_line_says_why() -> None:
    from engine.train.faults import decide_anomaly

    problem = "ckpt-00000010.pt: cannot read this checkpoint (RuntimeError)"
    args = {"policy": "rollback", "rollbacks": 0, "max_rollbacks": 3}
    headless = decide_anomaly(
        "loss is not finite at step 15",
        interactive=False,
        checkpoint_name="ckpt-00000010.pt",
        checkpoint_problem=problem,
        **args,
    )
    assert (headless.action, headless.save_on_stop) == ("stop", True)
    assert headless.message == f"loss is not finite at step 15; cannot roll back: {problem}: stopping"
    watched = decide_anomaly(
        "loss is not finite at step 15",
        interactive=True,
        checkpoint_name="ckpt-00000010.pt",
        checkpoint_problem=problem,
        **args,
    )
    assert watched.action == "pause" and "roll back to" not in watched.message  # it cannot help
    assert watched.message.endswith(": paused; lower the LR, then resume")
