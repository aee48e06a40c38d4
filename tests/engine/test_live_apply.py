"""A `set` put in force at the next step boundary: on a real tiny run (in this process, the
change asked from a sink when a step is read back, so it lands at a known step), and
LiveSettings alone on a small model and its optimizer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from engine.config.live import live_change
from engine.config.presets import load_preset
from engine.config.run_config import RunConfig
from engine.data.shape_schedule import tokens_through
from engine.events import Alert, Event, SettingsChanged, Step
from engine.model.gpt import GPT
from engine.optim.optimizers import build_optimizer
from engine.optim.schedule import lr_at, lr_multiplied, planned_curve
from engine.train.counters import Counters
from engine.train.live_settings import LiveSettings, micro_steps_per_rank, rank_share_refusal
from engine.train.trainer import Trainer
from tests.engine.test_trainer import tiny_cfg

QUIET = ("eval.interval=0", "sample.interval=0", "checkpoint.interval=0")


class Run:
    """A tiny run that asks for `sets[step]` once step `step` is read back (so it applies at
    that boundary), and records every event and the optimizer's groups after each step."""

    def __init__(self, tmp_path: Path, *extra: str, sets: dict[int, dict[str, Any]]) -> None:
        self.events: list[Event] = []
        self.groups: dict[int, list[dict[str, Any]]] = {}  # step -> each group's settings
        self.sets = sets
        self.trainer = Trainer(
            tiny_cfg(*QUIET, *extra), run_dir=tmp_path / "run", sinks=[self], telemetry=False
        )

    def __call__(self, event: Event) -> None:
        self.events.append(event)
        if isinstance(event, Step):
            self.groups[event.step] = [
                {k: v for k, v in g.items() if k != "params"}
                for g in self.trainer.built.parts.optimizer.param_groups
            ]
            if event.step in self.sets:
                self.trainer.set_settings(self.sets[event.step], by="test")

    def run(self) -> Run:
        assert self.trainer.run() == "finished", self.of(Alert)
        return self

    def of(self, kind: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]

    def steps(self) -> dict[int, Step]:
        return {e.step: e for e in self.of(Step)}


def test_weight_decay_and_lr_change_what_the_optimizer_applies_from_the_next_step(tmp_path):
    run = Run(
        tmp_path, "train.max_steps=6", "schedule.kind=constant", "schedule.warmup_steps=0",
        "optim.lr=1e-3", "optim.weight_decay=0.1",
        sets={3: {"optim.weight_decay": 0.0, "optim.lr": "2e-3"}},
    ).run()  # fmt: skip
    decays = lambda step: [g["weight_decay"] for g in run.groups[step]]  # noqa: E731
    # the embeddings and the matrices decay, the gains and biases never
    assert decays(3) == [0.1, 0.1, 0.0]
    assert decays(4) == [0.0, 0.0, 0.0]
    assert [g["lr"] for g in run.groups[3]] == [1e-3] * 3
    assert [g["lr"] for g in run.groups[4]] == [2e-3] * 3  # applied by step 4
    assert run.steps()[3].lr == 1e-3 and run.steps()[4].lr == 2e-3
    (ack,) = run.of(SettingsChanged)
    assert ack.step == 3 and ack.by == "test"
    assert ack.changes == {"optim.weight_decay": [0.1, 0.0], "optim.lr": [1e-3, 2e-3]}
    assert ack.planned_lr and ack.planned_lr[-1][1] == 2e-3  # the peak moved: re-planned
    assert run.trainer.cfg.optim.lr == 2e-3  # what a checkpoint saves from now on


def test_a_longer_run_trains_to_the_new_count_and_a_shorter_one_stops_there(tmp_path):
    longer = Run(tmp_path / "a", "train.max_steps=5", sets={2: {"train.max_steps": 9}}).run()
    assert max(longer.steps()) == 9 and longer.trainer.step == 9
    (ack,) = longer.of(SettingsChanged)
    assert ack.max_steps == 9 and ack.planned_lr[-1][0] == 8  # the curve covers the new length
    shorter = Run(tmp_path / "b", "train.max_steps=50", sets={2: {"train.max_steps": 4}}).run()
    assert max(shorter.steps()) == 4 and shorter.trainer.step == 4


def test_grad_accum_doubles_the_tokens_a_step_trains_on(tmp_path):
    run = Run(tmp_path, "train.max_steps=5", sets={2: {"train.grad_accum": 2}}).run()
    tokens = {step: e.tokens for step, e in run.steps().items()}
    per_step = 4 * 32  # train.batch_size x model.block_size
    assert tokens[2] - tokens[1] == per_step
    assert tokens[3] - tokens[2] == tokens[5] - tokens[4] == 2 * per_step
    assert run.trainer.built.instruments.step.micro_steps == 2
    assert run.of(SettingsChanged)[0].tokens_per_step == 2 * per_step


def test_a_resume_records_the_tokens_its_steps_trained_before_a_live_grad_accum(tmp_path):
    """grad_accum 1 -> 2 at step 3 of a batch ramp (2 -> 4 sequences over 8 steps): the
    resume's RunStarted.tokens_schedule had the new accumulation from step 0 (step 3 recorded
    at 128 tokens from step 0, not the 64 of its first 3 steps), which the summary and the LR
    panel read."""
    ramp = ("train.batch_start=2", "train.batch_ramp_steps=8", "checkpoint.interval=0")
    first = Run(tmp_path, "train.max_steps=6", *ramp, sets={3: {"train.grad_accum": 2}}).run()
    trained = {step: e.tokens for step, e in first.steps().items()}
    events: list[Event] = []
    resumed = Trainer(
        tiny_cfg(*QUIET, *ramp), resume=tmp_path / "run", resume_overrides=["train.max_steps=12"],
        sinks=[events.append], telemetry=False,
    )  # fmt: skip
    assert resumed.run() == "finished"
    trained |= {e.step: e.tokens for e in events if isinstance(e, Step)}
    (started,) = [e for e in events if e.kind == "run_started"]
    # by hand: 2 sequences of 32 until step 8 (the ramp rounds down to multiples of 2), x1
    # then x2 from step 3; from step 8, 4 sequences x2
    assert started.tokens_schedule == ((0, 64), (3, 128), (8, 256))
    assert {s: tokens_through(started.tokens_schedule, s) for s in range(1, 13)} == trained


def test_what_the_loop_built_from_a_setting_follows_it(tmp_path):
    run = Run(
        tmp_path, "train.max_steps=6",
        sets={2: {"train.log_every": 2, "train.spike_sigma": 4.5, "train.max_steps": 8}},
    ).run()  # fmt: skip
    trainer = run.trainer
    assert trainer.built.instruments.log_every == 2  # losses read back every 2 steps from here
    assert trainer.built.parts.spikes.sigma == 4.5  # the spike guard's threshold
    assert trainer.built.disk.max_steps == 8  # a run paused for its disk at step 8 is at its end


def test_eval_sample_and_checkpoint_intervals_follow(tmp_path):
    run = Run(
        tmp_path, "train.max_steps=10",
        sets={2: {"eval.interval": 4, "sample.interval": 3, "checkpoint.interval": 5}},
    ).run()  # fmt: skip
    kinds = lambda kind: sorted({e.step for e in run.events if e.kind == kind})  # noqa: E731
    assert kinds("eval") == [4, 8, 10]  # and the run's end, as always
    assert kinds("sample") == [3, 6, 9, 10]
    saved = [e.step for e in run.events if e.kind == "checkpoint" and e.reason == "interval"]
    assert saved == [5]


def test_cool_down_now_decays_a_wsd_run_from_the_next_step(tmp_path):
    run = Run(
        tmp_path, "train.max_steps=40", "schedule.kind=wsd", "schedule.warmup_steps=0",
        "optim.lr=1e-3", "schedule.min_lr=1e-5",
        sets={6: {"schedule.cooldown": 4}},
    ).run()  # fmt: skip
    lrs = {step: e.lr for step, e in run.steps().items()}
    assert lrs[6] == pytest.approx(1e-3)  # stable until the change
    # the decay starts at once: step 7 is its first (at the peak, as every WSD decay's first
    # step is), each after it lower, towards min_lr at the run's new end
    assert lrs[7] == pytest.approx(1e-3) and 1e-3 > lrs[8] > lrs[9] > lrs[10]
    assert lrs[10] == pytest.approx(1e-3 + 0.75 * (1e-5 - 1e-3))
    assert max(lrs) == 10  # it lasts the 4 steps asked, and the run ends with it
    (ack,) = run.of(SettingsChanged)
    assert ack.changes == {"schedule.decay_start": [0, 6], "train.max_steps": [40, 10]}


def test_a_refused_setting_changes_nothing_and_says_why(tmp_path):
    run = Run(
        tmp_path, "train.max_steps=4",
        sets={1: {"model.n_layer": 3, "optim.weight_decay": 0.0}, 2: {"optim.weight_decay": 0.1}},
    ).run()  # fmt: skip
    assert run.of(SettingsChanged) == []
    refused, unchanged = [a for a in run.of(Alert) if a.code == "set"]
    assert refused.level == "warning" and "model.n_layer cannot change" in refused.message
    assert refused.step == 1
    assert unchanged.level == "info" and "unchanged" in unchanged.message  # 0.1 already
    assert run.trainer.cfg.model.n_layer == 2 and run.trainer.cfg.optim.weight_decay == 0.1
    assert [g["weight_decay"] for g in run.groups[4]] == [0.1, 0.1, 0.0]


def test_the_change_is_in_metrics_jsonl_and_the_runs_summary(tmp_path):
    from engine.rundir.summary import SUMMARY_NAME, read_summary

    Run(tmp_path, "train.max_steps=4", sets={2: {"sample.interval": 3, "train.max_steps": 5}}).run()
    run_dir = tmp_path / "run"
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]
    (change,) = [r for r in records if r["kind"] == "settings_changed"]
    assert change["step"] == 2 and change["by"] == "test" and change["max_steps"] == 5
    assert change["changes"] == {
        "sample.interval": [0, 3], "train.max_steps": [4, 5], "schedule.decay_steps": [0, 4]
    }  # the cosine keeps its horizon, as a resume keeps it
    assert SettingsChanged.from_record(change).changes == change["changes"]
    assert read_summary(run_dir).facts["max_steps"] == 5  # `cockpit runs` and `ps`: step 5/5
    (run_dir / SUMMARY_NAME).unlink()
    assert read_summary(run_dir).facts["max_steps"] == 5  # rebuilt from metrics.jsonl alike



def test_the_change_is_replayed_wherever_the_run_is_drawn_again(tmp_path):
    import threading

    from engine.control.catch_up import LiveReplay
    from engine.rundir.metrics_log import read_history
    from engine.rundir.replay_reader import read_replay

    run = Run(tmp_path, "train.max_steps=4", sets={2: {"train.max_steps": 5}}).run()
    (ack,) = run.of(SettingsChanged)
    run_dir = tmp_path / "run"
    # a finished run's view, a resumed run's curves, an attaching viewer's replay
    assert [e for e in read_replay(run_dir).events if isinstance(e, SettingsChanged)] == [ack]
    assert [e for e in read_history(run_dir / "metrics.jsonl", 5) if e.kind == ack.kind] == [ack]
    replay = LiveReplay(threading.Lock())
    for event in run.events:
        replay.note(event)
    assert ack in replay.events()


# ------------------------------------------------------------------------- LiveSettings alone


class Holder:
    def __init__(self, optimizer: Any) -> None:
        self.optimizer = optimizer


def alone(cfg: RunConfig, ranks: int = 1, micro_batch: int = 4) -> tuple[LiveSettings, list]:
    torch.manual_seed(0)
    model = GPT(cfg.model, 64)
    followed: list[RunConfig] = []
    live = LiveSettings(
        cfg=cfg, counters=Counters(step=10), optimizer=Holder(build_optimizer(model, cfg.optim, "cpu")),
        model=model, device_type="cpu", ranks=ranks, micro_batch=lambda: micro_batch,
        follow=followed.append,
    )  # fmt: skip
    return live, followed


def small(*extra: str) -> RunConfig:
    return load_preset(
        "default", ["model.n_layer=1", "model.n_head=2", "model.n_embd=16", "model.block_size=8",
                    "train.batch_size=4", *extra]
    )  # fmt: skip


def test_muon_groups_take_muon_lr_and_momentum_and_adamw_groups_the_rest() -> None:
    cfg = small("optim.name=muon", "optim.weight_decay=0.1", "train.max_steps=100")
    live, followed = alone(cfg)
    change = live_change(cfg, {"optim.muon_lr": 0.05, "optim.muon_momentum": 0.9,
                               "optim.beta2": 0.99, "optim.weight_decay": 0.2}, 10)  # fmt: skip
    assert not isinstance(change, str)
    event = live.apply(change, by="alice")
    muon, *adam = live.holder.optimizer.param_groups
    assert muon["base_lr"] == 0.05 and muon["momentum"] == 0.9 and muon["weight_decay"] == 0.2
    assert [g["betas"] for g in adam] == [(0.9, 0.99)] * len(adam)
    assert [g["weight_decay"] for g in adam] == [0.2, 0.0]  # the no-decay group stays 0
    assert [g["base_lr"] for g in adam] == [cfg.optim.lr] * 2
    # the LR the next step writes (the step alone writes LRs): the schedule at step 10 times each peak
    factor = lr_multiplied(10, cfg, live.counters.lr_scale)
    assert muon["base_lr"] * factor == pytest.approx(0.05 * lr_at(10, cfg) / cfg.optim.lr)
    assert followed == [cfg] and cfg.optim.muon_lr == 0.05
    assert event.planned_lr == ()  # muon_lr is no part of the drawn schedule
    assert live.state_dict() == [
        {"step": 10, "by": "alice", "settings": change.settings}
    ]


def test_a_new_schedule_is_re_planned_in_the_event() -> None:
    cfg = small("train.max_steps=100")
    live, _ = alone(cfg)
    change = live_change(cfg, {"train.max_steps": 200, "schedule.decay_steps": 200}, 10)
    event = live.apply(change, by="app")
    assert event.planned_lr == planned_curve(cfg) and event.planned_lr[-1][0] == 199
    assert event.max_steps == 200 and cfg.train.max_steps == 200


def test_ranks_take_whole_micro_batches_of_a_new_grad_accum() -> None:
    cfg = small("train.grad_accum=2")  # batch 4: 8 sequences a step
    assert micro_steps_per_rank(cfg, 2, 4) == 1
    cfg.train.grad_accum = 4
    assert micro_steps_per_rank(cfg, 2, 4) == 2 and rank_share_refusal(cfg, 2, 4) is None
    cfg.train.grad_accum = 3  # 12 sequences: 2 ranks of 4-sequence micro-batches cannot share it
    why = rank_share_refusal(cfg, 2, 4)
    assert why is not None and "train.grad_accum=2 or 4" in why
    assert rank_share_refusal(cfg, 1, 4) is None  # one process takes 3
    # the run's check is the one live_change runs: refused in one line, nothing changed
    live, followed = alone(small("train.grad_accum=2"), ranks=2)
    answer = live_change(live.cfg, {"train.grad_accum": 3}, 10, check=live.check)
    assert isinstance(answer, str) and answer.startswith("set refused: train.grad_accum=3")
    assert live.cfg.train.grad_accum == 2 and followed == []
    accepted = live_change(live.cfg, {"train.grad_accum": 6}, 10, check=live.check)
    live.apply(accepted, by="app")
    assert micro_steps_per_rank(live.cfg, 2, 4) == 3  # each of the 2 ranks: 24 sequences / 2 / 4
