"""The training loop driven for real on tiny CPU models: commands, events, checkpoints, resume."""

from __future__ import annotations

import json
import math
import threading
import time
from pathlib import Path

import pytest
import torch

from engine.checkpoint.store import list_checkpoints, load_checkpoint
from engine.config.presets import load_preset
from engine.events import Event
from engine.train.trainer import Trainer

TINY = [
    "model.n_layer=2",
    "model.n_head=2",
    "model.n_embd=32",
    "model.block_size=32",
    "train.batch_size=4",
    "eval.batches=2",
    "sample.max_new_tokens=8",
]


def tiny_cfg(*extra: str):
    return load_preset("default", [*TINY, *extra])


class Recorder:
    """A sink that keeps every event and lets a test wait for one."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._cond = threading.Condition()

    def __call__(self, event: Event) -> None:
        with self._cond:
            self.events.append(event)
            self._cond.notify_all()

    def of(self, kind: str) -> list[Event]:
        return [e for e in list(self.events) if e.kind == kind]

    def wait_for(self, predicate, timeout: float = 30.0) -> Event:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for e in self.events:
                    if predicate(e):
                        return e
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"event not seen; last: {self.events[-3:]}")
                self._cond.wait(left)


def start(trainer: Trainer) -> threading.Thread:
    thread = threading.Thread(target=trainer.run, daemon=True)
    thread.start()
    return thread


def test_commands_are_applied_and_acknowledged(tmp_path):
    rec = Recorder()
    trainer = Trainer(
        tiny_cfg("train.max_steps=100000", "eval.interval=0", "sample.interval=0"),
        run_dir=tmp_path,
        sinks=[rec],
        telemetry=False,
    )
    thread = start(trainer)
    rec.wait_for(lambda e: e.kind == "step" and e.step >= 3)

    trainer.pause()
    paused = rec.wait_for(lambda e: e.kind == "state" and e.state == "paused")
    time.sleep(0.4)
    assert trainer.step == paused.step  # the step counter stops while paused
    assert not [e for e in rec.of("step") if e.step > paused.step]

    trainer.set_lr(5e-4)  # applied while paused, from the next step on
    ack = rec.wait_for(lambda e: e.kind == "lr_changed")
    # typed during the preset's 100 warmup steps: the LR warmup ends at, the ramp leading there
    assert (ack.after_warmup_lr, ack.warmup_ends) == (pytest.approx(5e-4), 100)
    assert ack.new_lr == pytest.approx(5e-4 * (paused.step + 1) / 101)
    trainer.resume()
    rec.wait_for(lambda e: e.kind == "state" and e.state == "running" and e.step == paused.step)
    nxt = rec.wait_for(lambda e: e.kind == "step" and e.step == paused.step + 1)
    # the LR the optimizer applied is the one acknowledged, the schedule's from the new point
    assert nxt.lr == pytest.approx(ack.new_lr)

    trainer.pause()
    paused2 = rec.wait_for(lambda e: e.kind == "state" and e.state == "paused" and e is not paused)
    last = [e for e in rec.of("step") if e.step == paused2.step][0]
    applied = {g["lr"] for g in trainer.built.parts.optimizer.param_groups}
    assert applied == {last.lr}  # what AdamW applied
    trainer.resume()

    trainer.scale_lr(2.0)
    ack2 = rec.wait_for(lambda e: e.kind == "lr_changed" and e is not ack)
    assert ack2.scale == pytest.approx(ack.scale * 2)

    trainer.checkpoint()
    saved = rec.wait_for(lambda e: e.kind == "checkpoint" and e.reason == "manual")
    state = load_checkpoint(Path(saved.path))
    assert state["step"] == saved.step
    assert state["lr_scale"] == pytest.approx(ack2.scale)

    trainer.sample()
    sample = rec.wait_for(lambda e: e.kind == "sample")
    assert sample.prompt in trainer.cfg.sample.prompts and len(sample.text) > 0

    trainer.evaluate()
    ev = rec.wait_for(lambda e: e.kind == "eval")
    assert math.isfinite(ev.val_loss) and ev.train_time_s > 0

    trainer.stop(checkpoint=True)
    thread.join(30)
    assert not thread.is_alive()
    assert trainer.state == "stopped"
    assert rec.of("checkpoint")[-1].reason == "stop"


def test_invalid_lr_changes_nothing(tmp_path):
    rec = Recorder()
    trainer = Trainer(
        tiny_cfg("train.max_steps=100000", "eval.interval=0", "sample.interval=0"),
        run_dir=tmp_path,
        sinks=[rec],
        telemetry=False,
    )
    thread = start(trainer)
    rec.wait_for(lambda e: e.kind == "step")
    for bad in (-1.0, 0.0, math.nan, math.inf, 1e9):
        trainer.set_lr(bad)
    trainer.scale_lr(-2.0)
    trainer.pause()
    rec.wait_for(lambda e: e.kind == "state" and e.state == "paused")
    assert trainer.lr_scale == 1.0
    assert not rec.of("lr_changed")
    assert len([a for a in rec.of("alert") if a.code == "lr"]) == 6
    trainer.stop(checkpoint=False)
    thread.join(30)
    assert trainer.state == "stopped"


def test_should_stop_keeps_the_run(tmp_path):
    """The app closing (worker cancelled) checkpoints rather than losing the run."""
    rec = Recorder()
    trainer = Trainer(
        tiny_cfg("train.max_steps=100000", "eval.interval=0", "sample.interval=0"),
        run_dir=tmp_path,
        sinks=[rec],
        telemetry=False,
    )
    flag = threading.Event()
    thread = threading.Thread(target=trainer.run, kwargs={"should_stop": flag.is_set}, daemon=True)
    thread.start()
    rec.wait_for(lambda e: e.kind == "step" and e.step >= 2)
    flag.set()
    thread.join(30)
    assert trainer.state == "stopped"
    assert list_checkpoints(tmp_path)


def run_straight_or_split(tmp_path: Path, split_at: int | None, total: int = 24):
    """Train `total` steps, either straight or stopping at `split_at` and resuming."""
    cfg = tiny_cfg(
        f"train.max_steps={total}",
        "model.dropout=0.1",
        "eval.interval=8",
        "sample.interval=8",
        "checkpoint.interval=0",
    )
    rec = Recorder()
    trainer = Trainer(cfg, run_dir=tmp_path, sinks=[rec], telemetry=False)
    if split_at is not None:
        rec_stop = lambda e: e.kind == "step" and e.step == split_at and trainer.stop()  # noqa: E731
        trainer.sinks.append(rec_stop)
    trainer.run()
    if split_at is not None:
        assert trainer.state == "stopped" and trainer.step == split_at
        trainer = Trainer(cfg, resume=tmp_path, sinks=[rec], telemetry=False)
        trainer.run()
    assert trainer.state == "finished"
    losses = {e.step: e.loss for e in rec.of("step")}
    return trainer.built.parts.model.state_dict(), losses


def test_resume_is_bit_exact(tmp_path):
    straight_weights, straight_losses = run_straight_or_split(tmp_path / "a", None)
    split_weights, split_losses = run_straight_or_split(tmp_path / "b", 12)
    assert straight_losses == split_losses  # identical floats, every step
    for name, tensor in straight_weights.items():
        assert torch.equal(tensor, split_weights[name]), name


def test_metrics_file_records_every_kind(tmp_path):
    cfg = tiny_cfg(
        "train.max_steps=20", "eval.interval=10", "sample.interval=10", "checkpoint.interval=10"
    )
    assert Trainer(cfg, run_dir=tmp_path, telemetry=False).run() == "finished"
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    kinds = {r["kind"] for r in records}
    assert {"run_started", "step", "eval", "sample", "checkpoint", "state"} <= kinds
    steps = [r["step"] for r in records if r["kind"] == "step"]
    assert steps == list(range(1, 21))
    evals = [r for r in records if r["kind"] == "eval"]
    assert [e["step"] for e in evals] == [10, 20]
    assert all({"train_loss", "val_loss", "train_time_s"} <= set(e) for e in evals)
    assert (tmp_path / "best.pt").exists()
    assert [s for s, _ in list_checkpoints(tmp_path)] == [10, 20]


def test_loss_falls_on_shakespeare(tmp_path, shakespeare):
    cfg = load_preset(
        "nanogpt-cpu",
        [
            # a higher LR than the preset's reaches the bound in 120 steps, not 300 (CPU time)
            "train.max_steps=120",
            "optim.lr=4e-3",
            "eval.interval=0",
            "sample.interval=0",
            "checkpoint.interval=0",
            "schedule.decay_steps=120",
            "schedule.warmup_steps=12",
        ],
    )
    rec = Recorder()
    assert (
        Trainer(
            cfg, run_dir=tmp_path, data_path=str(shakespeare), sinks=[rec], telemetry=False
        ).run()
        == "finished"
    )
    first = rec.of("step")[0].loss
    final = rec.of("eval")[-1].val_loss
    assert first == pytest.approx(math.log(65), abs=0.3)  # starts near ln(vocab)
    assert final < 2.6  # well below after 120 steps (2.49 measured)


def test_errors_become_a_failed_state_not_an_exception(tmp_path):
    rec = Recorder()
    cfg = tiny_cfg("data.source=/no/such/corpus.txt")
    assert Trainer(cfg, run_dir=tmp_path, sinks=[rec], telemetry=False).run() == "failed"
    alert = rec.of("alert")[-1]
    assert alert.level == "error" and "/no/such/corpus.txt" in alert.message
    assert rec.of("state")[-1].state == "failed"


def test_resume_replays_the_curves_to_the_ui(tmp_path):
    cfg = tiny_cfg(
        "train.max_steps=12", "eval.interval=4", "sample.interval=0", "checkpoint.interval=4"
    )
    assert Trainer(cfg, run_dir=tmp_path, telemetry=False).run() == "finished"
    # a crash after step 8 would leave records past the checkpoint: simulate with the file as is
    (tmp_path / "ckpt-00000012.pt").unlink()
    (tmp_path / "best.pt").unlink()
    trainer = Trainer(cfg, resume=tmp_path, telemetry=False)
    trainer.cfg = cfg
    trainer.set_up()
    events = [e for e in trainer.events.drain() if e.kind not in ("data_progress", "state")]
    assert events[0].kind == "run_started" and events[0].start_step == 8
    replayed = [e.step for e in events[1:] if e.kind == "step"]
    assert replayed == list(range(1, 9))  # steps 9-12 will be trained again
    assert [e.step for e in events if e.kind == "eval"] == [4, 8]


def strict_json(line: str) -> dict:
    """Parse as Node's JSON.parse would: NaN and Infinity are not JSON."""

    def refuse(constant: str):
        raise ValueError(f"not JSON: {constant}")

    return json.loads(line, parse_constant=refuse)


def test_metrics_file_is_strict_json_and_history_reads_it_back(tmp_path):
    from engine.rundir.metrics_log import read_history

    cfg = tiny_cfg(
        "train.max_steps=60", "eval.interval=30", "sample.interval=30", "checkpoint.interval=30"
    )
    assert Trainer(cfg, run_dir=tmp_path, telemetry=False).run() == "finished"
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    records = [strict_json(line) for line in lines]  # every line, not just most
    steps = [r for r in records if r["kind"] == "step"]
    assert len(steps) == 60
    # update_ratio is sampled every 50 steps; the others say "no reading" as null
    assert [r["step"] for r in steps if r["update_ratio"] is not None] == [1, 51]
    replayed = [e for e in read_history(tmp_path / "metrics.jsonl", 60) if e.kind == "step"]
    assert len(replayed) == 60
    assert all(isinstance(e.update_ratio, float) for e in replayed)  # null back to NaN
    assert math.isnan(replayed[1].update_ratio) and math.isfinite(replayed[0].update_ratio)


@pytest.mark.serial  # a wall-clock bound: not beside another test
def test_a_pause_is_not_counted_in_step_time_or_throughput(tmp_path):
    rec = Recorder()
    trainer = Trainer(
        tiny_cfg("train.max_steps=100000", "eval.interval=0", "sample.interval=0"),
        run_dir=tmp_path,
        sinks=[rec],
        telemetry=False,
    )
    thread = start(trainer)
    rec.wait_for(lambda e: e.kind == "step" and e.step >= 5)
    trainer.pause()
    paused = rec.wait_for(lambda e: e.kind == "state" and e.state == "paused")
    time.sleep(1.5)
    trainer.resume()
    after = rec.wait_for(lambda e: e.kind == "step" and e.step == paused.step + 1)
    before = [e for e in rec.of("step") if 1 < e.step <= paused.step]
    trainer.stop(checkpoint=False)
    thread.join(30)
    typical = sorted(e.step_time_s for e in before)[len(before) // 2]
    assert after.step_time_s < 0.5, after  # the 1.5 s pause is not part of the step
    assert after.step_time_s < 20 * typical + 0.05
    assert after.tokens_per_s > trainer.cfg.tokens_per_step / 0.5


def scripted_evals(
    monkeypatch: pytest.MonkeyPatch, trainer: Trainer, val_by_step: dict[int, float]
) -> None:
    """Evaluations of `trainer` measure the given loss at each step (the trainer still runs,
    times and records them)."""
    from engine.model.evaluation import Evaluator

    def losses(self: Evaluator, data: object) -> tuple[float, float]:
        return val_by_step[trainer.step], val_by_step[trainer.step]

    monkeypatch.setattr(Evaluator, "losses", losses)


def test_best_is_the_lowest_val_among_checkpoints_and_survives_resume(tmp_path, monkeypatch):
    vals = {10: 3.0, 20: 2.5, 30: 2.0, 40: 2.6, 50: 2.45, 60: 2.3, 70: 2.9, 80: 2.8}
    cfg = tiny_cfg(
        "train.max_steps=40",
        "eval.interval=10",
        "sample.interval=0",
        "checkpoint.interval=20",
        "checkpoint.keep_last=1",
    )
    trainer = Trainer(cfg, run_dir=tmp_path, telemetry=False)
    scripted_evals(monkeypatch, trainer, vals)
    assert trainer.run() == "finished"
    # val 2.0 at step 30 had no checkpoint; ckpt-40 (2.6) is worse than ckpt-20 (2.5)
    best = load_checkpoint(tmp_path / "best.pt")
    assert best["step"] == 20 and best["best_val"] == 2.5 and best["is_best"]
    last = load_checkpoint(tmp_path / "ckpt-00000040.pt")
    assert last["best_val"] == 2.5 and not last["is_best"]

    # Resumed: ckpt-60 (2.3) beats ckpt-20 (2.5), though not the unsaved 2.0 at step 30.
    resumed = Trainer(
        cfg, resume=tmp_path, resume_overrides=["train.max_steps=80"], telemetry=False
    )
    scripted_evals(monkeypatch, resumed, vals)
    assert resumed.run() == "finished"
    best = load_checkpoint(tmp_path / "best.pt")
    assert best["step"] == 60 and best["best_val"] == 2.3 and best["is_best"]
    assert load_checkpoint(tmp_path / "ckpt-00000080.pt")["best_val"] == 2.3


def test_a_sample_records_the_prompt_the_model_was_given_and_says_what_was_left_out(tmp_path):
    # A char-level model has no token for a character its corpus never had: it is left out of
    # the prompt. The record must show what the model was given, and an alert say what went.
    cfg = tiny_cfg(
        "train.max_steps=2", "sample.interval=1", "sample.prompts=['Hi\u2603 there', '\u2603']"
    )
    rec = Recorder()
    assert Trainer(cfg, run_dir=tmp_path, sinks=[rec], telemetry=False).run() == "finished"
    samples = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    prompts = [r["prompt"] for r in samples if r["kind"] == "sample"]
    assert prompts[:2] == ["Hi there", ""]  # what the model was fed (was 'Hi\u2603 there')
    notes = [e.message for e in rec.events if getattr(e, "code", "") == "sample"]
    assert len(notes) == 1  # once per run, not at every sample
    assert "'Hi\u2603 there' is given as 'Hi there' (no token for '\u2603')" in notes[0], notes


def test_set_up_before_run_builds_once_and_run_trains_what_it_built(tmp_path):
    """A script may set the run up, wrap its forward, then run it: the run is announced once,
    and the steps go through the wrapper."""
    events: list[Event] = []
    trainer = Trainer(tiny_cfg("train.max_steps=6"), run_dir=tmp_path, telemetry=False,
                      sinks=[events.append])  # fmt: skip
    trainer.set_up()
    assert trainer.state == "starting" and trainer.step == 0
    assert (tmp_path / "config.toml").exists()  # the directory is the run's already
    run = trainer.built
    model, forward, calls = run.parts.model, run.instruments.step.forward, []

    def counted(x, y=None):
        calls.append(x.shape)
        return forward(x, y)

    run.instruments.step.forward = counted
    trainer.set_up()  # again: nothing is rebuilt
    assert trainer.built.parts.model is model
    assert trainer.run() == "finished" and trainer.step == 6
    assert len(calls) >= 6  # every step's forward (and the final evaluation's)
    assert [e.kind for e in events].count("run_started") == 1
