"""Putting a mid-run change of settings in force: `LiveSettings`, one per run.

`LiveSettings.apply` writes a `set` into the run's one shared RunConfig, in place, and rebuilds
what was built from it once: the optimizer's groups and `DerivedValues`. A resume's --set
(`resume_as_change`) and a rollback (`settings_back`) are changes too. Every rank decides and
applies alike: a change depends only on the config, the step and the world's shape.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from engine.checkpoint.resume import optimizer_settings, put_settings
from engine.config.live import LIVE_SETTINGS, LR_SCALE, SettingsChange, describe, setting_value
from engine.config.loading import config_from_dict, recorded_config
from engine.config.run_config import SECTIONS, RunConfig
from engine.config.timeline import SettingsTimeline, TimedChange
from engine.data.shape_schedule import ShapeSchedule
from engine.events import Event, SettingsChanged
from engine.optim.optimizers import build_optimizer
from engine.optim.schedule import lr_at, lr_multiplied, planned_curve
from engine.train.setup import Instruments, read_back_every
from engine.train.step import lr_at_factor

if TYPE_CHECKING:
    import torch

    from engine.checkpoint.checkpointer import OptimizerHolder
    from engine.data.batches import BatchSampler
    from engine.train.counters import Counters
    from engine.train.disk_full import DiskWait
    from engine.train.faults import SpikeDetector

# Settings that reach the optimizer's parameter groups (grad clip is the step's own).
OPTIMIZER_KEYS = frozenset(
    {"optim.lr", "optim.weight_decay", "optim.beta1", "optim.beta2", "optim.eps", "optim.muon_lr",
     "optim.muon_momentum", "optim.embed_lr", "optim.head_lr", "optim.scalar_lr",
     "optim.normuon_beta2"}
)  # fmt: skip


def micro_steps_per_rank(cfg: RunConfig, ranks: int, micro_batch: int) -> int | None:
    """Micro-batches of `micro_batch` sequences each of `ranks` ranks takes so that together
    they take a step's train.batch_size x grad_accum sequences; None when they cannot.

    At launch the ranks may split the micro-batch to share a step (share_step); mid-run the
    running step's micro-batch is fixed, so a new grad_accum must share out in whole ones."""
    sequences = cfg.train.batch_size * cfg.train.grad_accum
    if sequences % (ranks * micro_batch):
        return None
    return sequences // (ranks * micro_batch)


def rank_share_refusal(cfg: RunConfig, ranks: int, micro_batch: int) -> str | None:
    """Why the ranks cannot share a step of `cfg` (its grad_accum), or None when they can."""
    if micro_steps_per_rank(cfg, ranks, micro_batch) is not None:
        return None
    t = cfg.train
    unit = ranks * micro_batch  # sequences one micro-step of every rank takes
    # the grad_accum values nearest the one asked that share out
    fits = [a for a in range(1, 4 * t.grad_accum + unit + 1) if (t.batch_size * a) % unit == 0]
    below = [a for a in fits if a < t.grad_accum]
    above = [a for a in fits if a > t.grad_accum]
    nearest = " or ".join(str(a) for a in (below[-1:] + above[:1]))
    what = f"micro-batches of {micro_batch} sequences"
    if ranks > 1:
        what = f"{ranks} ranks of {what}"
    return (
        f"train.grad_accum={t.grad_accum}: a step's {t.batch_size * t.grad_accum} sequences "
        f"(train.batch_size x grad_accum) cannot be shared by {what}; use "
        f"train.grad_accum={nearest}"
    )


class LiveSettings:
    """The settings a run trains with, changed mid-run, and the timeline of the changes.
    `cfg` is shared by the run's parts (changed in place); `model` and `device_type` build a
    fresh optimizer's groups; `ranks` and `micro_batch()` (an out-of-memory retry halves it):
    how a step is shared; `follow(cfg)`: the owner re-reads what it built from the config;
    `emit`: where a rollback's change goes (a `set`'s is the caller's to emit)."""

    def __init__(
        self,
        *,
        cfg: RunConfig,
        counters: Counters,
        optimizer: OptimizerHolder,
        model: torch.nn.Module,
        device_type: str,
        ranks: int = 1,
        micro_batch: Callable[[], int],
        follow: Callable[[RunConfig], None] = lambda cfg: None,
        emit: Callable[[Event], None] = lambda event: None,
        timeline: SettingsTimeline | None = None,
    ) -> None:
        self.cfg = cfg
        self.counters = counters
        self.holder = optimizer
        self.model = model
        self.device_type = device_type
        self.ranks = ranks
        self.micro_batch = micro_batch
        self.follow = follow
        self.emit = emit
        # the changes so far: the run's checkpoints and config.toml keep the same object
        self.timeline = timeline if timeline is not None else SettingsTimeline()

    def check(self, new: RunConfig) -> str | None:
        """live_change's check of a new config: each rank can take its share of a step."""
        return rank_share_refusal(new, self.ranks, self.micro_batch())

    def apply(self, change: SettingsChange, by: str, replayed: bool = False) -> SettingsChanged:
        """Put `change.config` in force from the next step on and record it in the timeline;
        returns the event that acknowledges it (the caller emits it)."""
        cfg, counters = self.cfg, self.counters
        planned_before = planned_curve(cfg)
        for key in change.changes:
            section, name = key.split(".", 1)
            setattr(getattr(cfg, section), name, setting_value(change.config, key))
        if OPTIMIZER_KEYS & change.changes.keys():
            # the groups a fresh optimizer of this config would have (a group that does not
            # decay keeps 0), written as a resume writes them: the moments so far are kept
            # (the LR itself is the next step's to write, from the new peaks)
            fresh = build_optimizer(self.model, cfg.optim, self.device_type)
            settings = [{k: v for k, v in g.items() if k != "lr"} for g in optimizer_settings(fresh)]
            put_settings(self.holder.optimizer, settings)
        factor = lr_multiplied(counters.step, cfg, counters.lr_scale)
        counters.current_lr = lr_at_factor(self.holder.optimizer, factor)
        self.follow(cfg)
        self.timeline.add(change.step, change.settings, by)
        planned = planned_curve(cfg)
        return SettingsChanged(
            step=change.step,
            changes={key: [old, new] for key, (old, new) in change.changes.items()},
            by=by,
            replayed=replayed,
            max_steps=cfg.train.max_steps,
            tokens_per_step=cfg.tokens_per_step,
            planned_lr=planned if planned != planned_before else (),
        )

    def roll_back_to(self, state: Mapping[str, Any], lr_scale: float) -> str:
        """After a rollback to `state`: its live settings and timeline in force again, with the
        rollback's LR multiplier `lr_scale` a change of it; the settings put back, as one line
        ('' when none differed)."""
        event = settings_back(self, state)
        if lr_scale != state.get("lr_scale", 1.0):
            self.timeline.add(self.counters.step, {LR_SCALE: lr_scale}, "rollback")
        if event is None:
            return ""
        self.emit(event)
        return describe({key: (old, new) for key, (old, new) in event.changes.items()})

    def state_dict(self) -> list[dict[str, Any]]:
        """The timeline's records (a checkpoint keeps them under "settings_changes")."""
        return self.timeline.state_dict()

    def load_state_dict(self, records: Any) -> None:
        self.timeline.load_state_dict(records)


def resume_as_change(
    state: Mapping[str, Any], cfg: RunConfig, counters: Counters, timeline: SettingsTimeline
) -> list[str]:
    """A resume of the checkpoint `state`: its --set is a change at the resume step, by
    "resume", in the `timeline` it continues (so a replay of config.toml makes it too).
    Returns what the resume has to say of it (RunStarted's notes)."""
    settings = resumed_settings(state["config"], cfg)
    if settings:
        timeline.add(counters.step, settings, "resume")
    if "settings_changes" not in state and counters.lr_scale != 1.0:
        return [
            f"the LR multiplier x{counters.lr_scale:.3g} set by hand is kept; this "
            "checkpoint predates the timeline of changes, so config.toml cannot say when it was set"
        ]
    return []


class DerivedValues:
    """What a run derived from its config once, derived again after a live change (the parts
    that hold the config read it themselves): the spike guard's threshold, the disk wait's
    bound, the micro-batches a step takes on each of `ranks` (of `batches`' running size) and
    the read-back cadence on `device`."""

    def __init__(
        self,
        *,
        spikes: SpikeDetector,
        disk: DiskWait,
        instruments: Instruments,
        device: torch.device,
        ranks: int,
        batches: BatchSampler,
    ) -> None:
        self.spikes = spikes
        self.disk = disk
        self.instruments = instruments
        self.device = device
        self.ranks = ranks
        self.batches = batches

    def __call__(self, cfg: RunConfig) -> None:
        self.spikes.sigma = cfg.train.spike_sigma
        self.disk.max_steps = cfg.train.max_steps
        micro_batch = self.batches.batch_size
        steps = micro_steps_per_rank(cfg, self.ranks, micro_batch)
        if steps is None:  # only a config live_change refused could say so
            raise ValueError(rank_share_refusal(cfg, self.ranks, micro_batch))
        self.instruments.step.micro_steps = steps
        self.instruments.log_every = read_back_every(cfg, self.device)


def _flat(raw: Mapping[str, Any]) -> dict[str, Any]:
    return {
        f"{section}.{f.name}": raw.get(section, {}).get(f.name)
        for section in SECTIONS
        for f in fields(SECTIONS[section])
        if isinstance(raw.get(section), dict)
    }


def resumed_settings(saved: Mapping[str, Any], cfg: RunConfig) -> dict[str, Any]:
    """The settings a resume changed: `cfg` (the config it trains with) against `saved` (the
    checkpoint's config), the corpus aside (its path may move; its content is checked apart)."""
    # the saved config with today's defaults filled in: a setting the checkpoint predates is
    # the value it was trained with (recorded_config) or the default, not a change
    filled = config_from_dict(recorded_config(dict(saved)), source="checkpoint").to_dict()
    before, after = _flat(filled), _flat(cfg.to_dict())
    return {
        key: value
        for key, value in after.items()
        if not key.startswith("data.") and key in before and before[key] != value
    }


# the settings the planned LR (`lr_at`) is a function of
SCHEDULE_KEYS = ("optim.lr", "train.max_steps")


def _shapes_schedule(key: str) -> bool:
    return key in SCHEDULE_KEYS or key.startswith("schedule.")


def configs_in_force(start: RunConfig, changes: list[TimedChange]) -> list[tuple[int, RunConfig]]:
    """(from step, config in force) from `start`, the run's starting values, through each of
    `changes` in turn (a key the config does not have is passed over)."""
    segments = [(0, start)]
    current = start
    for change in changes:
        current = copy.deepcopy(current)
        for key, value in change.settings.items():
            section, _, name = key.partition(".")
            part = getattr(current, section, None)
            if part is not None and hasattr(part, name):
                setattr(part, name, value)
        segments.append((change.step, current))
    return segments


def planned_as_followed(
    cfg: RunConfig, start: RunConfig | None, timeline: SettingsTimeline | None, points: int = 400
) -> tuple[tuple[int, float], ...]:
    """The planned LR over the whole run as the run followed it: from `start` (the run's
    starting values) on, each change of `timeline` that re-planned the schedule in force from
    its step, and `cfg` (the settings in force now) from the last one on. A resumed run whose
    past changed its schedule (a longer run, a new peak LR, "cool down now") draws its past
    as it was planned then; without such a change it is `planned_curve(cfg)`."""
    replans = [c for c in (timeline.changes if timeline else ()) if any(map(_shapes_schedule, c.settings))]
    total = cfg.train.max_steps
    if start is None or not replans:
        return planned_curve(cfg, points)
    segments = configs_in_force(start, replans)
    segments[-1] = (segments[-1][0], cfg)  # the settings in force now are the run's own
    steps = {s for s, _ in planned_curve(cfg, points)}
    for boundary, _ in segments[1:]:  # each side of a change exactly, not a slope across it
        steps |= {s for s in (boundary - 1, boundary) if 0 <= s < total}
    curve = []
    for step in sorted(steps):
        in_force = next(c for since, c in reversed(segments) if since <= step)
        curve.append((step, lr_at(step, in_force)))
    return tuple(curve)


# the settings that shape the tokens a step trains (model.block_size is the weights')
TOKENS_KEYS = (
    "train.grad_accum", "train.batch_size", "train.batch_start", "train.batch_ramp_steps",
    "train.seq_start", "train.seq_warmup_steps",
)  # fmt: skip


def tokens_as_followed(
    schedule: ShapeSchedule, start: RunConfig | None, timeline: SettingsTimeline | None, max_steps: int
) -> tuple[tuple[int, int], ...]:
    """RunStarted.tokens_schedule of a run whose past changed the tokens its steps train (a live
    train.grad_accum mid-ramp, a resume's --set of a ramp): each step's tokens with the settings
    then in force, from `start` (the run's starting values) on, and `schedule` (the shapes it
    trains now) from the last change on; `schedule.changes` when none did, or no ramp is on."""
    reshapes = [
        c for c in (timeline.changes if timeline else ()) if any(k in TOKENS_KEYS for k in c.settings)
    ]
    if start is None or not reshapes or not schedule.on:
        return schedule.changes(max_steps)
    segments = [  # the first is the start's own; the later ones grow to its micro-batch
        (since, ShapeSchedule.of(config, start if i else None))
        for i, (since, config) in enumerate(configs_in_force(start, reshapes))
    ]
    segments[-1] = (segments[-1][0], schedule)  # the shapes in force now are the run's own
    # past this, every step trains the last segment's full size
    horizon = max(max(since, shapes.ramp_ends) for since, shapes in segments)
    points: list[tuple[int, int]] = []
    for step in range(min(horizon, max_steps - 1) + 1):
        tokens = next(shapes for since, shapes in reversed(segments) if since <= step).tokens_at(step)
        if not points or tokens != points[-1][1]:
            points.append((step, tokens))
    return tuple(points)


def settings_back(live: LiveSettings, state: Mapping[str, Any]) -> SettingsChanged | None:
    """After a rollback to the checkpoint `state`: the live settings it was saved with in force
    again (the changes made since are undone, without the mid-run rules: the run is back where
    they held) and its timeline the run's. The event that says so, or None when none differed."""
    saved = config_from_dict(recorded_config(dict(state["config"])), source="checkpoint")
    now, step = live.cfg.train, int(state["step"])
    if saved.train.batch_size != now.batch_size:
        # an out-of-memory retry has split the micro-batch since: the checkpoint's step, in
        # micro-batches of the running size (its sequences a step are what the config said)
        sequences = saved.train.batch_size * saved.train.grad_accum
        whole = sequences % now.batch_size == 0
        saved.train.grad_accum = sequences // now.batch_size if whole else now.grad_accum
        saved.train.batch_size = now.batch_size
    changes = {
        key: (setting_value(live.cfg, key), setting_value(saved, key))
        for key in LIVE_SETTINGS
        if setting_value(live.cfg, key) != setting_value(saved, key)
    }
    event = None
    if changes:
        event = live.apply(SettingsChange(step=step, changes=changes, config=saved), "rollback")
    live.load_state_dict(state.get("settings_changes"))  # the checkpoint's, not one more entry
    return event
