"""The training loop's parts built alone, without a Trainer: counters, reporter, setup, one
step, the work between updates, closing. Real tiny models on CPU."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import torch
from tiny import tiny_overrides

from engine.config.presets import load_preset, load_replay
from engine.config.timeline import SettingsTimeline
from engine.data.batches import BatchSampler
from engine.distributed.world import World, rank_seed
from engine.events import Alert, EventQueue, RunState, SettingsChanged, StateChanged
from engine.train.cadence import DueWork, evaluate, sample, work_due
from engine.train.config_file import ConfigFile
from engine.train.counters import Counters
from engine.train.reporter import Reporter
from engine.train.run import weights_finite
from engine.train.setup import announce, build, instrument
from engine.train.step import train_step
from engine.train.trainer import close_sinks


def test_counters_save_the_five_checkpoint_keys_and_load_them_back() -> None:
    counters = Counters(step=12, tokens=12 * 256, lr_scale=0.5, train_time_s=3.25, best_val=1.75)
    counters.rollbacks, counters.current_lr = 2, 1e-3
    state = counters.state_dict()
    # the keys and order checkpoints have always had; rollbacks and the LR are not saved
    assert state == {
        "step": 12,
        "lr_scale": 0.5,
        "train_time_s": 3.25,
        "tokens": 3072,
        "best_val": 1.75,
    }
    assert list(state) == ["step", "lr_scale", "train_time_s", "tokens", "best_val"]
    fresh = Counters()
    assert fresh.best_val == math.inf and fresh.step == 0 and fresh.lr_scale == 1.0
    fresh.rollbacks = 1
    fresh.load_state_dict({**state, "model": "ignored"})  # a whole checkpoint state will do
    assert fresh.state_dict() == state
    assert fresh.rollbacks == 1  # a restore (a rollback) keeps this process's count


def make_reporter(**kwargs):
    events, seen, counters = EventQueue(10), [], Counters(step=7, train_time_s=2.5)
    sinks = [seen.append]
    return Reporter(events=events, sinks=sinks, counters=counters, **kwargs), events, sinks, seen


def test_events_reach_the_queue_and_every_sink_even_one_added_later() -> None:
    reporter, events, sinks, seen = make_reporter()
    reporter.alert("warning", "disk nearly full", "disk")
    later: list = []
    sinks.append(later.append)
    reporter.alert("info", "second", "x")
    queued = events.drain()
    assert [e.message for e in queued] == ["disk nearly full", "second"]
    assert seen == queued and later == queued[1:]
    first = queued[0]
    assert isinstance(first, Alert)
    assert (first.level, first.step, first.code) == ("warning", 7, "disk")


def test_a_state_change_is_held_and_announced_with_the_step_and_training_time() -> None:
    ended: list[str] = []
    reporter, events, _, _ = make_reporter(before_final_state=ended.append)
    assert reporter.state == RunState.STARTING
    reporter.set_state(RunState.PAUSED, "paused by user")
    assert reporter.state == RunState.PAUSED and ended == []
    reporter.counters.step = 9
    reporter.set_state(RunState.FINISHED)
    assert ended == [RunState.FINISHED]  # before its StateChanged: the final state is the last
    changes = events.drain()
    assert all(isinstance(e, StateChanged) for e in changes)
    assert [(e.state, e.step, e.reason, e.train_time_s) for e in changes] == [
        ("paused", 7, "paused by user", 2.5),
        ("finished", 9, "", 2.5),
    ]


def test_what_runs_before_the_final_state_reports_ahead_of_it() -> None:
    reporter: Reporter
    reporter, events, _, _ = make_reporter(
        before_final_state=lambda state: reporter.alert("warning", f"closing before {state}")
    )
    reporter.set_state(RunState.STOPPED, "stopped by user")
    assert [e.kind for e in events.drain()] == ["alert", "state"]


# ---------------------------------------------------------------------- setup, alone
SMALL = tiny_overrides(
    "train.batch_size=3",
    "train.grad_accum=2",
    "eval.batches=1",
    "sample.max_new_tokens=4",
    "sample.prompts=['ab', 'c']",
)


def small_cfg(*extra: str):
    return load_preset("default", [*SMALL, *extra])


def built(cfg, corpus: Path):
    report, events, _, seen = make_reporter()
    parts = build(
        cfg,
        device=torch.device("cpu"),
        world=World(),
        data_path=str(corpus),
        emit=report.emit,
        should_stop=lambda: False,
        resume_state=None,
    )
    return parts, report, events, seen


def test_build_returns_what_trains_and_instrument_what_the_loop_measures(some_text: Path) -> None:
    cfg = small_cfg()
    parts, report, events, _ = built(cfg, some_text)
    assert [e.kind for e in events.drain()][-1] == "data_progress"  # the preparation reports
    assert parts.device == torch.device("cpu") and parts.dtype == torch.float32
    assert parts.parallel.mode == "single" and parts.parallel.micro_steps == 2
    assert not parts.scaler.is_enabled()  # fp32: no loss scaling
    assert parts.model.lm_head.weight.device.type == "cpu"
    optimized = {id(p) for g in parts.optimizer.param_groups for p in g["params"]}
    assert optimized == {id(p) for p in parts.model.parameters()}
    x, y = parts.train_batches.next()
    assert x.shape == y.shape == (3, 16) and torch.equal(x[:, 1:], y[:, :-1])
    assert int(x.max()) < parts.data.tokenizer.vocab_size
    assert parts.memory_plan.fits
    parts.train_batches.close()

    instruments = instrument(cfg, parts, world=World(), report=report)
    step = instruments.step
    assert step.model is parts.model and step.batches is parts.train_batches
    assert step.forward is parts.model  # no compile, one process: the model itself
    assert step.micro_steps == 2
    assert instruments.log_every == 1  # on CPU every step is read back (train.log_every=0)
    # 6 x non-embedding parameters per token, plus attention's 6 x layers x block x width
    n = parts.model.num_params()
    assert instruments.flops_per_token >= 6 * n
    assert instruments.peak.flops > 0 and instruments.peak_meter.peak == instruments.peak


def test_announce_writes_config_json_and_says_the_run_started(some_text: Path, tmp_path: Path) -> None:
    cfg = small_cfg()
    parts, report, events, _ = built(cfg, some_text)
    parts.train_batches.close()
    instruments = instrument(cfg, parts, world=World(), report=report)
    events.drain()
    report.counters.step = 5
    announce(
        cfg,
        run_dir=tmp_path,
        parts=parts,
        instruments=instruments,
        counters=report.counters,
        notes=["a note"],
        resume_state=None,
        report=report,
    )
    assert json.loads((tmp_path / "config.json").read_text()) == cfg.to_dict()
    (started,) = events.drain()
    assert started.kind == "run_started" and started.start_step == 5
    assert started.run_dir == str(tmp_path) and started.notes == ("a note",)
    assert started.n_params == parts.model.num_params(non_embedding=False)


def test_the_config_file_is_the_replayable_start_and_its_changes(tmp_path: Path) -> None:

    cfg, timeline = small_cfg(), SettingsTimeline()
    config_file = ConfigFile(tmp_path / "config.toml", cfg, timeline)
    config_file.write()
    assert "cockpit train --preset THIS_FILE" in (tmp_path / "config.toml").read_text()
    timeline.add(3, {"optim.weight_decay": 0.0})
    config_file(SettingsChanged(step=3, changes={"optim.weight_decay": [0.1, 0.0]}))
    replay = load_replay(str(tmp_path / "config.toml"))
    assert replay.config.model == cfg.model and [(c.step, c.settings) for c in replay.changes.changes] == [
        (3, {"optim.weight_decay": 0.0})
    ]


# ---------------------------------------------------------------------- one step, alone
def test_a_step_accumulates_the_mean_gradient_of_its_micro_batches(some_text: Path) -> None:
    cfg = small_cfg("optim.grad_clip=1000", "optim.weight_decay=0")
    parts, report, _, _ = built(cfg, some_text)
    parts.train_batches.close()
    instruments = instrument(cfg, parts, world=World(), report=report)
    reference = copy.deepcopy(parts.model)
    # the same two micro-batches, drawn by a sampler with the same seed
    batches = BatchSampler(parts.data.train, 16, 3, torch.device("cpu"), rank_seed(cfg.train.seed, 0))
    micro = [batches.next(), batches.next()]
    batches.close()
    losses = [reference(x, y)[1] for x, y in micro]
    expected_loss = (losses[0] + losses[1]) / 2
    expected_loss.backward()
    expected_grads = [p.grad.clone() for p in reference.parameters()]
    expected_norm = torch.linalg.vector_norm(torch.stack([g.norm() for g in expected_grads]))

    seen_grads: list[torch.Tensor] = []
    optimizer = torch.optim.SGD(parts.model.parameters(), lr=0.1)
    for group in optimizer.param_groups:
        group["base_lr"] = 0.1
    real_step = optimizer.step

    def step_recording(*args, **kwargs):
        seen_grads.extend(p.grad.clone() for p in parts.model.parameters())
        return real_step(*args, **kwargs)

    optimizer.step = step_recording  # type: ignore[method-assign]
    before = [p.detach().clone() for p in parts.model.parameters()]
    outcome = train_step(instruments.step, optimizer, step=0, lr_schedule_factor=0.5, report_memory=False)
    assert outcome.memory is None
    pending = outcome.pending
    assert pending.step == 1 and pending.lr == 0.05
    assert torch.allclose(pending.loss, expected_loss.detach(), atol=1e-6)
    assert torch.allclose(pending.grad_norm, expected_norm, rtol=1e-5)
    assert len(seen_grads) == len(expected_grads)
    for got, want in zip(seen_grads, expected_grads, strict=True):
        assert torch.allclose(got, want, atol=1e-6)
    # SGD at LR 0.1 x 0.5: each weight moved by -0.05 x its accumulated gradient
    for old, new, grad in zip(before, parts.model.parameters(), expected_grads, strict=True):
        assert torch.allclose(new.detach(), old - 0.05 * grad, atol=1e-6)
    assert all(p.grad is None for p in parts.model.parameters())  # zeroed for the next step


# ---------------------------------------------------------------------- between updates
def test_work_is_due_at_its_intervals_and_never_at_the_last_step() -> None:
    cfg = small_cfg(
        "eval.interval=10", "sample.interval=15", "checkpoint.interval=0", "train.max_steps=30"
    )
    assert work_due(10, cfg) == DueWork(evaluate=True, sample=False, checkpoint=False)
    assert work_due(15, cfg) == DueWork(evaluate=False, sample=True, checkpoint=False)
    assert not any(work_due(7, cfg))
    assert not any(work_due(30, cfg))  # the run's end evaluates and samples in its own way
    assert work_due(20, small_cfg("eval.interval=10", "checkpoint.interval=20", "train.max_steps=40")) == (
        DueWork(evaluate=True, sample=False, checkpoint=True)
    )


def test_an_eval_and_samples_are_emitted_at_the_counted_step(some_text: Path) -> None:
    cfg = small_cfg()
    parts, report, events, _ = built(cfg, some_text)
    parts.train_batches.close()
    instruments = instrument(cfg, parts, world=World(), report=report)
    events.drain()
    report.counters.step, report.counters.train_time_s = 12, 4.5
    result = evaluate(instruments.evaluator, parts.data, report.counters, report)
    sample(
        instruments.evaluator, parts.data.tokenizer, parts.sample_generator, 12, report
    )
    emitted = events.drain()
    assert emitted[0] is result
    assert (result.step, result.train_time_s) == (12, 4.5)
    assert math.isfinite(result.train_loss) and math.isfinite(result.val_loss)
    texts = [e for e in emitted if e.kind == "sample"]
    assert [(e.step, e.prompt) for e in texts] == [(12, "ab"), (12, "c")]
    assert all(len(e.text) == 4 for e in texts)  # sample.max_new_tokens characters, after it
    # the run's own sample RNG: the same seed draws the same texts again
    parts.sample_generator.manual_seed(cfg.train.seed + 2)
    sample(instruments.evaluator, parts.data.tokenizer, parts.sample_generator, 12, report)
    assert [e.text for e in events.drain() if e.kind == "sample"] == [e.text for e in texts]


def test_a_non_finite_val_loss_is_an_error_alert() -> None:
    class Diverged:  # an evaluator whose model has diverged
        val_full = True

        def losses(self, data):
            return math.nan, math.inf

        def bits_per_byte(self, data, train_loss, val_loss):
            return None, None  # a loss that is not finite has none

        def capped_note(self):
            return None

    report, events, _, _ = make_reporter()
    result = evaluate(Diverged(), None, report.counters, report)
    alert = events.drain()[-1]
    assert result.val_loss == math.inf
    assert (alert.kind, alert.level, alert.code) == ("alert", "error", "nan")
    assert alert.message == "val loss is inf at step 7"


# ---------------------------------------------------------------------- closing
def test_closing_sinks_turns_what_they_say_into_warnings() -> None:
    report, events, _, _ = make_reporter()
    closed: list[str] = []

    class Quiet:
        def __call__(self, event):
            pass

        def close(self):
            closed.append("quiet")

    class Complaining(Quiet):
        def close(self):
            closed.append("complaining")
            return "tensorboard could not flush"

    close_sinks([Quiet(), print, Complaining()], report)  # print has no close: left alone
    assert closed == ["quiet", "complaining"]
    (alert,) = events.drain()
    assert (alert.level, alert.message, alert.code) == ("warning", "tensorboard could not flush", "log")


def test_weights_with_a_nan_are_not_finite() -> None:
    model = torch.nn.Linear(3, 2)
    assert weights_finite(model)
    with torch.no_grad():
        model.weight[1, 2] = math.nan
    assert not weights_finite(model)
