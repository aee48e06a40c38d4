"""Settings a run may change while it trains, and the decision of each change.

`live_change(cfg, settings, step)` decides a `set` command at a step boundary, as `--set` checks
it: the config from the next step on, or the one line why not (the model's shape, corpus, seed
and process settings change only on resume). The changes made go into the run's timeline
(`timeline.py`), with the hand-set LR multiplier as one more key, `LR_SCALE`. Pure and torch-free.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from engine.config.loading import config_from_dict, parse_override
from engine.config.run_config import SECTIONS, ConfigError, RunConfig

# The live settings, each with when its new value takes effect: only when (what the setting is
# is its config field's help; the settings screen shows both, so saying it twice repeated it).
LIVE_SETTINGS: dict[str, str] = {
    "optim.lr": "from the next step (the schedule keeps its shape)",
    "optim.weight_decay": "from the next step",
    "optim.beta1": "from the next step (the moments so far are kept)",
    "optim.beta2": "from the next step (the moments so far are kept)",
    "optim.eps": "from the next step",
    "optim.grad_clip": "from the next step",
    "optim.muon_lr": "from the next step",
    "optim.muon_momentum": "from the next step",
    "schedule.warmup_steps": "only while the run is still warming up",
    "schedule.min_lr": "re-planned from the next step",
    "schedule.decay_steps": "re-planned from the next step",
    "schedule.decay_fraction": "re-planned from the next step",
    "schedule.decay_start": "re-planned from the next step",
    "train.max_steps": "the run's length; the schedule is re-planned as a resume re-plans it",
    "train.grad_accum": "from the next step: tokens per step, throughput and ETA follow",
    "train.spike_sigma": "from the next step",
    "train.on_anomaly": "from the next anomaly",
    "train.check_finite": "from the next step",
    "train.log_every": "from the next step",
    "train.stop_at_val": "from the next evaluation",
    "train.time_budget": "from the next step (the training time so far counts)",
    "eval.interval": "from the next step",
    "eval.fine_interval": "from the next step",
    "sample.interval": "from the next step",
    "sample.prompts": "from the next sample",
    "sample.max_new_tokens": "from the next sample",
    "sample.temperature": "from the next sample",
    "sample.top_k": "from the next sample",
    "checkpoint.interval": "from the next step",
    "checkpoint.keep_last": "from the next checkpoint saved",
    # the speedrun's optimizer settings, last: the settings screen lists them after the rest
    "optim.embed_lr": "from the next step",
    "optim.head_lr": "from the next step",
    "optim.scalar_lr": "from the next step",
    "optim.normuon_beta2": "from the next step (the second moments so far are kept)",
}

# "Cool down now": not a config setting but a request the run turns into settings at its
# step (schedule.decay_start and train.max_steps). Its value is the decay's length in steps,
# 0 for the configured fraction of the run.
COOLDOWN = "schedule.cooldown"
# The hand-set LR multiplier, as the timeline records set_lr, scale_lr and rollback.
LR_SCALE = "lr_scale"

_REFUSED_SECTIONS = {
    "model": "the weights belong to the model they are trained as",
    "data": "the run's corpus and tokenizer are fixed for its weights",
}
# model keys a resume takes (the rest of model.* and data.* belong to the weights)
_RESUME_TAKES = frozenset({"model.grad_checkpoint", "model.recompute_blocks", "model.dropout"})
_REFUSED_KEYS = {
    "train.seed": "the run continues its own random streams",
    "train.batch_size": "the micro-batch is built into the running step; change train.grad_accum",
    # the shape schedules are functions of the step from step 0: a change would make the shape
    # jump (a resume may change them; the steps from there on follow the new schedule)
    "train.batch_start": "the batch-size schedule shapes every step from step 0",
    "train.batch_ramp_steps": "the batch-size schedule shapes every step from step 0",
    "train.seq_start": "the sequence-length warmup shapes every step from step 0",
    "train.seq_warmup_steps": "the sequence-length warmup shapes every step from step 0",
    "train.device": "the model and optimizer live on their device",
    "train.dtype": "the running step is built for its precision",
    "train.compile": "the model is compiled (or not) when the run starts",
    "train.threads": "the process's threads are set when it starts",
    "train.parallel": "the ranks are wrapped when the run starts",
    "train.max_rollbacks": "the limit is the process's",
    "optim.name": "another optimizer starts with fresh state",
    "optim.muon_ns": "the Muon step is built when the run starts",
    "optim.muon_ns_steps": "the Muon step is built when the run starts",
    "optim.muon_variant": "the Muon step is built when the run starts",
    "optim.cautious_wd": "the optimizer's step is built when the run starts",
    "optim.sgd_momentum": "SGD's groups are built when the run starts",
    "optim.sgd_nesterov": "SGD's groups are built when the run starts",
    "train.float8": "the model's MLP and head layers are converted when the run starts",
    "schedule.kind": "another schedule shape would make the LR jump",
    "eval.batches": "every evaluation uses the same fixed batches, so evals compare",
    "eval.full_val": "every evaluation measures the same split, so evals compare",
    "eval.batch_size": "every evaluation uses the same fixed batches, so evals compare",
    "log.tensorboard": "the event file is opened when the run starts",
    "log.metrics_port": "the metrics endpoint listens from the run's start",
}


@dataclass(frozen=True)
class SettingsChange:
    """An accepted `set`: the changed keys with (old, new) values in the order asked, and the
    config the run trains with from the next step on."""

    step: int
    changes: dict[str, tuple[Any, Any]]
    config: RunConfig

    @property
    def settings(self) -> dict[str, Any]:
        """The new values, as the timeline records them."""
        return {key: new for key, (_, new) in self.changes.items()}


def canonical_key(key: str) -> str:
    """`section.name` for a key as `--set` accepts it ("weight_decay" when it is unique);
    ConfigError (one line) for an unknown one."""
    if key == COOLDOWN:
        return key
    section, name, _ = parse_override(f"{key}=0")
    return f"{section}.{name}"


def _unknown(settings: Mapping[str, Any]) -> str:
    """The first key that is no setting, with the closest live one or the list of them."""
    for key in map(str, settings):
        try:
            canonical_key(key)
        except ConfigError:
            close = difflib.get_close_matches(key, [*LIVE_SETTINGS, COOLDOWN], n=1, cutoff=0.5)
            hint = (
                f"did you mean '{close[0]}'?"
                if close
                else "live: " + ", ".join([*LIVE_SETTINGS, COOLDOWN])
            )
            return f"unknown setting '{key}' ({hint})"
    return "unknown setting"


def refusal(key: str) -> str | None:
    """Why `key` (canonical) cannot change mid-run, or None when it can."""
    if key in LIVE_SETTINGS or key == COOLDOWN:
        return None
    section = key.split(".", 1)[0]
    why = _REFUSED_KEYS.get(key) or _REFUSED_SECTIONS.get(section, "it is fixed for the run")
    if (section in _REFUSED_SECTIONS and key not in _RESUME_TAKES) or key == "train.seed":
        # a resume refuses these too: only a new run has them otherwise
        instead = f"a run with another {key} is a new run"
        if section == "data" and key != "data.tokenizer":  # the weights take another corpus
            instead = f"--init-from RUN_DIR starts a new run from these weights with another {key}"
        return f"{key} cannot change while the run trains: {why}; {instead}"
    return (
        f"{key} cannot change while the run trains: {why}; stop the run and resume it with "
        f"--set {key}=..."
    )


def keys_refusal(settings: Mapping[str, Any]) -> str | None:
    """Why a `set` of these keys is refused whatever the run's state (a key that is no setting,
    or one fixed while the run trains), or None: what the control socket checks on receipt."""
    try:
        asked = [canonical_key(str(key)) for key in settings]
    except ConfigError:
        return f"set refused: {_unknown(settings)}"
    for key in asked:
        if (why := refusal(key)) is not None:
            return f"set refused: {why}"
    return None


def setting_value(cfg: RunConfig, key: str) -> Any:
    section, name = key.split(".", 1)
    return getattr(getattr(cfg, section), name)


def _typed(key: str, value: Any) -> Any:
    """A value as the config holds it; a string is read as `--set` reads one (TOML, else a
    bare word), except for settings that are strings."""
    if not isinstance(value, str):
        return value
    section, name = key.split(".", 1)
    kind = {f.name: f.type for f in fields(SECTIONS[section])}[name]
    if kind in (str, "str"):
        return value
    return parse_override(f"{key}={value}")[2]


def live_change(
    cfg: RunConfig,
    settings: Mapping[str, Any],
    step: int,
    *,
    check: Callable[[RunConfig], str | None] | None = None,
) -> SettingsChange | str:
    """Decide a `set` of `settings` at step `step` (the steps trained so far) on `cfg`.

    Returns the change (possibly with no keys: every value was already in force), or the
    one-line refusal; nothing changes unless every key is accepted. `check` is the caller's
    own check of the new config (e.g. that each rank can take its share of a step)."""
    if not settings:
        return "set refused: no settings given; name at least one, e.g. optim.weight_decay=0.0"
    if (why := keys_refusal(settings)) is not None:
        return why
    asked = {canonical_key(str(key)): value for key, value in settings.items()}
    raw = cfg.to_dict()
    try:
        for key, value in asked.items():
            if key == COOLDOWN:
                continue
            section, name = key.split(".", 1)
            raw[section][name] = _typed(key, value)
        if COOLDOWN in asked:
            cooldown = _cooldown(cfg, raw, asked[COOLDOWN], step)
            if isinstance(cooldown, str):
                return f"set refused: {cooldown}"
        new = config_from_dict(raw, source="set")
    except ConfigError as e:
        return f"{e}"  # already "set: section.key: expected ..."
    if (why := _mid_run_rules(cfg, new, asked, step)) is not None:
        return f"set refused: {why}"
    new = _pin_wsd_decay(cfg, _pin_cosine_horizon(cfg, new, asked), asked, step)
    if check is not None and (why := check(new)) is not None:
        return f"set refused: {why}"
    changes = {}
    for key in (*(k for k in asked if k != COOLDOWN), *_cooldown_keys(asked)):
        old_value, new_value = setting_value(cfg, key), setting_value(new, key)
        if old_value != new_value:
            changes[key] = (old_value, new_value)
    for pinned in ("schedule.decay_steps", "schedule.decay_start"):  # kept by a pin above
        if pinned not in changes and setting_value(new, pinned) != setting_value(cfg, pinned):
            changes[pinned] = (setting_value(cfg, pinned), setting_value(new, pinned))
    return SettingsChange(step=step, changes=changes, config=new)


def _cooldown_keys(asked: Mapping[str, Any]) -> tuple[str, ...]:
    return ("schedule.decay_start", "train.max_steps") if COOLDOWN in asked else ()


def _cooldown(cfg: RunConfig, raw: dict[str, Any], value: Any, step: int) -> str | None:
    """Cool down now, as settings: the WSD decay starts at `step` and lasts `value` steps (0:
    the configured fraction of the run); the run's length follows."""
    if cfg.schedule.kind != "wsd":
        return (
            f"cool down now needs a WSD schedule (schedule.kind = 'wsd'); this run's is "
            f"{cfg.schedule.kind!r}: shorten it with train.max_steps instead"
        )
    value = _typed("train.max_steps", value) if isinstance(value, str) else value
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return f"{COOLDOWN}: expected the decay's length in steps (0 = the configured fraction), got {value!r}"
    if step < cfg.schedule.warmup_steps:  # the ramp would go on to the peak, then drop at once
        return (
            f"the run is still warming up (to step {cfg.schedule.warmup_steps}); cool down after "
            "it, or set schedule.warmup_steps to end the warmup sooner"
        )
    start = wsd_decay_start(cfg)
    if step >= start:
        return (
            f"the run has been cooling down since step {start}; to end it sooner or later, set "
            "train.max_steps"
        )
    span = value or max(1, round(cfg.train.max_steps * cfg.schedule.decay_fraction))
    raw["schedule"]["decay_start"] = step
    raw["train"]["max_steps"] = step + span
    return None


def wsd_decay_start(cfg: RunConfig) -> int:
    """The step a WSD schedule's decay starts at: set, or the configured fraction of the run."""
    s, total = cfg.schedule, cfg.train.max_steps
    return s.decay_start or total - round(total * s.decay_fraction)


def _mid_run_rules(
    old: RunConfig, new: RunConfig, asked: Mapping[str, Any], step: int
) -> str | None:
    """What a config may say at a resume but not in the middle of a run."""
    if new.train.max_steps <= step:
        return (
            f"the run is at step {step}: train.max_steps={new.train.max_steps} must be more than "
            f"{step} (to end the run now, stop it)"
        )
    if "schedule.warmup_steps" in asked and new.schedule.warmup_steps != old.schedule.warmup_steps:
        if step >= old.schedule.warmup_steps:
            return (
                f"schedule.warmup_steps: the warmup ended at step {old.schedule.warmup_steps}; "
                "a run past it has nothing to warm up"
            )
    if (why := _inert(old, new, asked)) is not None:
        return why
    tokens = new.sample.max_new_tokens
    if "sample.max_new_tokens" in asked and tokens > max(
        MAX_NEW_TOKENS_LIVE, old.sample.max_new_tokens
    ):
        return (
            f"sample.max_new_tokens={tokens:,}: the run samples between steps, so a sample that long "
            f"would hold the training (and a stop) until it ends; at most {MAX_NEW_TOKENS_LIVE:,} "
            "while the run trains (cockpit sample RUN_DIR --tokens N writes longer text)"
        )
    start = new.schedule.decay_start
    if "schedule.decay_start" in asked and start and start < step:
        return (
            f"schedule.decay_start={start} is behind the run (step {step}); cool down now instead"
        )
    return None


# the longest sample a set may ask for: the run stops training (and cannot stop) while it samples
MAX_NEW_TOKENS_LIVE = 10_000
# keys that shape only one optimizer or schedule: changed on another, they would change nothing
ONLY_FOR = {
    "optim.muon_lr": ("optim.name", "muon"),
    "optim.muon_momentum": ("optim.name", "muon"),
    "schedule.decay_steps": ("schedule.kind", "cosine"),
    "schedule.decay_fraction": ("schedule.kind", "wsd"),
    "schedule.decay_start": ("schedule.kind", "wsd"),
}


def _inert(old: RunConfig, new: RunConfig, asked: Mapping[str, Any]) -> str | None:
    """A key asked that would change nothing the run does (Muon's LR on an AdamW run, a cosine
    horizon on a WSD schedule): refused, so no acknowledgement says a change that is none."""
    for key, (owner, needed) in ONLY_FOR.items():
        if key in asked and setting_value(new, key) != setting_value(old, key):
            running = setting_value(old, owner)
            if running != needed:
                return f"{key} changes nothing on this run: it applies to {owner} = {needed!r}, and this run's is {running!r}"
    if (
        "optim.head_lr" in asked
        and new.optim.head_lr != old.optim.head_lr
        and old.model.tie_embeddings
    ):
        return (
            "optim.head_lr changes nothing on this run: its head is tied to the embeddings "
            "(model.tie_embeddings), which take optim.embed_lr"
        )
    if (
        "optim.normuon_beta2" in asked
        and new.optim.normuon_beta2 != old.optim.normuon_beta2
        and (old.optim.name != "muon" or old.optim.muon_variant != "normuon")
    ):
        return "optim.normuon_beta2 changes nothing on this run: it applies to optim.muon_variant = 'normuon' of optim.name = 'muon'"
    if old.optim.name == "sgd":
        for key in ("optim.beta1", "optim.beta2", "optim.eps"):
            if key in asked and setting_value(new, key) != setting_value(old, key):
                return (
                    f"{key} changes nothing on this run: SGD keeps no moments but its momentum "
                    "buffer (optim.sgd_momentum, set on resume)"
                )
    if (
        "schedule.min_lr" in asked
        and new.schedule.min_lr != old.schedule.min_lr
        and old.schedule.kind == "constant"
    ):
        return "schedule.min_lr changes nothing on this run: a constant schedule has no floor to decay to; set optim.lr"
    return None


def _pin_cosine_horizon(old: RunConfig, new: RunConfig, asked: Mapping[str, Any]) -> RunConfig:
    """A cosine decay whose horizon was implicit (max_steps) keeps it when max_steps changes
    without schedule.decay_steps, as a resume keeps it: the LR goes on without a jump."""
    if (
        new.schedule.kind == "cosine"
        and "schedule.decay_steps" not in asked
        and new.decay_steps != old.decay_steps
    ):
        return dataclasses.replace(
            new, schedule=dataclasses.replace(new.schedule, decay_steps=old.decay_steps)
        )
    return new


def _pin_wsd_decay(
    old: RunConfig, new: RunConfig, asked: Mapping[str, Any], step: int
) -> RunConfig:
    """A WSD run already decaying keeps the step its decay started at when max_steps or the
    fraction changes (else the start would move ahead of the run and the LR jump back to its
    peak); the decay stretches or shrinks from where the LR is."""
    start = wsd_decay_start(old)
    if (
        new.schedule.kind == "wsd"
        and "schedule.decay_start" not in asked
        and step >= start
        and wsd_decay_start(new) != start
        and start < new.train.max_steps
    ):
        return dataclasses.replace(
            new, schedule=dataclasses.replace(new.schedule, decay_start=start)
        )
    return new


def describe(changes: Mapping[str, tuple[Any, Any]]) -> str:
    """A change as one line: "optim.weight_decay 0.1 -> 0, train.max_steps 2000 -> 5000"."""
    return ", ".join(f"{key} {_show(old)} -> {_show(new)}" for key, (old, new) in changes.items())


def _show(value: Any) -> str:
    if isinstance(value, float) and math.isfinite(value):
        return f"{value:g}"
    return repr(value) if isinstance(value, (str, list)) else str(value)
