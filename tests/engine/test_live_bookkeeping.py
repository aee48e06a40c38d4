"""The bookkeeping of live settings built alone: a resume's --set and a rollback recorded in the
timeline (resume_as_change, LiveSettings.roll_back_to), and the run's derived values followed after
a change (DerivedValues), without a Trainer."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch

from engine.config import live_change, load_preset
from engine.events import Event, SettingsChanged
from engine.model.gpt import GPT
from engine.optim.optimizers import build_optimizer
from engine.train.counters import Counters
from engine.train.faults import SpikeDetector
from engine.train.live_settings import DerivedValues, LiveSettings, resume_as_change

SMALL = ["model.n_layer=1", "model.n_head=2", "model.n_embd=16", "model.block_size=8",
         "train.batch_size=4", "train.max_steps=100"]  # fmt: skip


class Holder:
    def __init__(self, optimizer: Any) -> None:
        self.optimizer = optimizer


def live_alone(cfg: Any, step: int = 9, lr_scale: float = 1.0, **kwargs: Any) -> LiveSettings:
    torch.manual_seed(0)
    model = GPT(cfg.model, 64)
    return LiveSettings(
        cfg=cfg, counters=Counters(step=step, lr_scale=lr_scale), model=model, device_type="cpu",
        optimizer=Holder(build_optimizer(model, cfg.optim, "cpu")),
        micro_batch=lambda: cfg.train.batch_size, **kwargs,
    )  # fmt: skip


def test_a_resumes_set_is_a_change_by_resume_at_the_resume_step() -> None:
    saved = load_preset("tiny", SMALL).to_dict()
    live = live_alone(load_preset("tiny", [*SMALL, "train.max_steps=200"]), step=9)
    notes = resume_as_change({"config": saved, "settings_changes": []}, live.cfg, live.counters, live.timeline)
    assert notes == []
    assert live.timeline.state_dict() == [
        {"step": 9, "by": "resume", "settings": {"train.max_steps": 200}}
    ]


def test_a_resume_with_nothing_set_records_nothing() -> None:
    cfg = load_preset("tiny", SMALL)
    live = live_alone(cfg)
    assert resume_as_change({"config": cfg.to_dict(), "settings_changes": []}, live.cfg, live.counters, live.timeline) == []
    assert not live.timeline


def test_a_hand_set_lr_multiplier_from_before_the_timeline_is_a_note() -> None:
    cfg = load_preset("tiny", SMALL)
    live = live_alone(cfg, lr_scale=0.5)
    (note,) = resume_as_change({"config": cfg.to_dict()}, live.cfg, live.counters, live.timeline)  # no settings_changes: from before
    assert "x0.5" in note and "predates the timeline" in note


def test_a_rollback_puts_the_settings_back_emits_the_change_and_says_it() -> None:
    saved = load_preset("tiny", SMALL)
    cfg = load_preset("tiny", [*SMALL, "optim.weight_decay=0.0"])
    emitted: list[Event] = []
    live = live_alone(cfg, step=9, emit=emitted.append)
    line = live.roll_back_to({"config": saved.to_dict(), "step": 5, "lr_scale": 1.0}, 0.5)
    assert cfg.optim.weight_decay == saved.optim.weight_decay
    (event,) = emitted
    assert isinstance(event, SettingsChanged) and event.by == "rollback"
    assert "optim.weight_decay" in line
    # the rollback's LR multiplier is a change of the timeline the checkpoint had (none)
    assert live.timeline.state_dict() == [
        {"step": 9, "by": "rollback", "settings": {"lr_scale": 0.5}}
    ]


def test_a_rollback_to_the_same_settings_says_nothing() -> None:
    cfg = load_preset("tiny", SMALL)
    emitted: list[Event] = []
    live = live_alone(cfg, emit=emitted.append)
    assert live.roll_back_to({"config": cfg.to_dict(), "step": 5}, 1.0) == ""
    assert emitted == [] and not live.timeline


def derived_alone() -> tuple[DerivedValues, Any, Any, Any]:
    spikes, disk = SpikeDetector(4.0), SimpleNamespace(max_steps=100)
    instruments = SimpleNamespace(step=SimpleNamespace(micro_steps=1), log_every=1)
    # one rank of micro-batches of one sequence: a step's train.batch_size x grad_accum
    derived = DerivedValues(
        spikes=spikes, disk=disk, instruments=instruments,  # type: ignore[arg-type]
        device=torch.device("cpu"), ranks=1, batches=SimpleNamespace(batch_size=1),  # type: ignore[arg-type]
    )  # fmt: skip
    return derived, spikes, disk, instruments


def test_derived_values_follow_a_change_of_the_spike_guard_and_the_run_length() -> None:
    derived, spikes, disk, _ = derived_alone()
    cfg = load_preset("tiny", [*SMALL, "train.spike_sigma=7", "train.max_steps=300"])
    derived(cfg)
    assert spikes.sigma == 7.0 and disk.max_steps == 300


def test_derived_values_follow_the_micro_batches_a_step_and_the_read_back_cadence() -> None:
    derived, _, _, instruments = derived_alone()
    derived(load_preset("tiny", [*SMALL, "train.batch_size=3", "train.log_every=5"]))
    assert instruments.step.micro_steps == 3 and instruments.log_every == 5
    derived(load_preset("tiny", [*SMALL, "train.log_every=0"]))
    assert instruments.log_every == 1  # on CPU a read-back costs nothing: every step


def test_live_settings_follow_through_derived_values_on_a_set() -> None:
    cfg = load_preset("tiny", SMALL)
    instruments = SimpleNamespace(step=SimpleNamespace(micro_steps=1), log_every=1)
    spikes, disk = SpikeDetector(cfg.train.spike_sigma), SimpleNamespace(max_steps=100)
    derived = DerivedValues(
        spikes=spikes, disk=disk, instruments=instruments,  # type: ignore[arg-type]
        device=torch.device("cpu"), ranks=1,
        batches=SimpleNamespace(batch_size=cfg.train.batch_size),  # type: ignore[arg-type]
    )  # fmt: skip
    live = live_alone(cfg, follow=derived)
    change = live_change(cfg, {"train.grad_accum": 2, "train.max_steps": 150}, 9)
    assert not isinstance(change, str)
    live.apply(change, by="app")
    assert instruments.step.micro_steps == 2 and disk.max_steps == 150
