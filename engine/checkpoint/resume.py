"""What a resume may change, and what it must say: the checkpoint's config plus --set overrides.

`plan_resume` is the one place that decides, shared by the CLI (which refuses before anything
starts) and the Trainer (which applies it); the rules are in docs/guide/checkpoints.md.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from engine.checkpoint.init_source import same_source
from engine.config.loading import apply_overrides, config_from_dict, parse_override, recorded_config
from engine.config.run_config import SECTIONS, ConfigError, OptimConfig, RunConfig
from engine.optim.schedule import lr_at

if TYPE_CHECKING:  # torch is imported by the Trainer, not by the CLI's resume check
    import torch

# Keys whose change would make the checkpoint's weights mean something else.
# memory/regularisation only: the same weights
ALLOWED_MODEL_KEYS = ("grad_checkpoint", "recompute_blocks", "dropout")


class ResumeFinished(ConfigError):
    """A resume of a run already at its max_steps: nothing to train; the text says how to extend
    it (raised where a finished run is an error, e.g. a resume asked for from inside the app)."""


@dataclass(frozen=True)
class ResumePlan:
    config: RunConfig  # what the resumed run trains with (and records)
    notes: tuple[str, ...]  # one line per change, for RunStarted.notes
    optimizer_switched: bool  # True: the new optimizer starts fresh
    finished: str | None  # set when the run is already at max_steps: the message to show


def _flat(cfg: RunConfig) -> dict[str, Any]:
    return {
        f"{section}.{f.name}": getattr(getattr(cfg, section), f.name)
        for section in SECTIONS
        for f in fields(SECTIONS[section])
    }


def _refusal(key: str, old: Any, new: Any, source: str) -> ConfigError:
    if key.startswith("data."):
        why = "a resumed run keeps the corpus and tokenizer its weights were trained on"
    elif key == "train.seed":
        why = "a resumed run continues its own random streams"
    elif key == "model.vocab_multiple":
        why = "the padded vocabulary is the row count of the embedding and head weights"
    elif key == "model.init_from":
        why = (
            "a resumed run's weights come from its checkpoint; the weights a run starts from "
            "are chosen when it starts (drop --init-from to resume)"
        )
    else:
        why = "the checkpoint's weights belong to the model they were trained as"
    advice = (
        "drop that --set, or start a new run with --preset/--set instead of --resume"
        if source.startswith("--resume")
        else "drop that setting; a new run from the config (n) may change it"
    )
    return ConfigError(f"{source}: cannot change {key} on resume ({old!r} -> {new!r}): {why}; {advice}")


def plan_resume(
    saved: dict[str, Any],
    overrides: list[str],
    source: str,
    label: str | None = None,
    where: str | None = None,
) -> ResumePlan:
    """Decide what resuming the checkpoint `saved` (its "config", "step" and "lr_scale") with
    `overrides` does. Raises ConfigError (one line) for a bad or refused override, starting
    with `where` (default: "--resume LABEL"; the app's fork dialog names the branch instead).
    `label` is how the user named the run (for the "extend it with" hint)."""
    recorded = recorded_config(saved["config"])  # a config.json from before a setting existed
    old = config_from_dict(recorded, source=source)
    user_keys = set()
    for text in overrides:
        section, name, _ = parse_override(text)
        user_keys.add(f"{section}.{name}")
    where = where or f"--resume {label or source}"
    raw = apply_overrides(recorded, overrides)
    new = config_from_dict(raw, source=where)
    if new.model.init_from != old.model.init_from and same_source(
        old.model.init_from, new.model.init_from
    ):  # the source the run started from, named again (a relative path, a cache name)
        raw["model"]["init_from"] = old.model.init_from
        new = config_from_dict(raw, source=where)
    step = int(saved.get("step", 0))
    notes: list[str] = []

    before, after = _flat(old), _flat(new)
    for key, value in after.items():
        if before[key] == value:
            continue
        section, name = key.split(".", 1)
        if (section == "model" and name not in ALLOWED_MODEL_KEYS) or section == "data":
            raise _refusal(key, before[key], value, where)
        if key == "train.seed":
            raise _refusal(key, before[key], value, where)

    # Extending a run must not stretch a cosine decay under the weights already trained.
    pinned = (
        new.schedule.kind == "cosine"
        and "schedule.decay_steps" not in user_keys
        and new.decay_steps != old.decay_steps
    )
    if pinned:
        raw.setdefault("schedule", {})["decay_steps"] = old.decay_steps
        new = config_from_dict(raw, source=where)
        after = _flat(new)

    switched = old.optim.name != new.optim.name
    for key, value in after.items():
        if before[key] == value or (pinned and key == "schedule.decay_steps"):
            continue
        change = f"{key}: {before[key]!r} -> {value!r}"
        if key == "optim.name":
            change += (
                f" ({value} starts fresh from the checkpoint's weights; "
                f"{before[key]}'s optimizer state is dropped)"
            )
        elif key == "optim.muon_variant" and new.optim.name == "muon" and not switched:
            # the momentum buffer is the same in both; only NorMuon keeps a second moment
            change += (
                " (Muon's momentum carries over; NorMuon's per-neuron second moment starts at zero)"
                if value == "normuon"
                else " (Muon's momentum carries over; NorMuon's second moment is no longer used)"
            )
        elif key.startswith("optim.") and not switched:
            change += " (applied from the first resumed step)"
        notes.append(change)
    if pinned:
        notes.append(
            f"schedule.decay_steps: kept at {old.decay_steps}, the run's decay horizon, so the LR "
            "goes on without a jump (--set schedule.decay_steps=N re-plans the decay)"
        )

    if step >= new.train.max_steps:
        name = label or source
        finished = (
            f"{name} is finished at step {step}/{new.train.max_steps}; extend it with "
            f"--resume {name} --set train.max_steps={max(2 * new.train.max_steps, step + 1)}"
        )
        return ResumePlan(new, tuple(notes), switched, finished)

    old_lr, new_lr = lr_at(step, old), lr_at(step, new)
    if abs(new_lr - old_lr) > 1e-9 * max(abs(old_lr), abs(new_lr)):
        scale = float(saved.get("lr_scale", 1.0))
        by_hand = f", times the x{scale:.3g} set by hand" if scale != 1.0 else ""
        notes.append(
            f"LR at step {step}: {old_lr * scale:.3g} -> {new_lr * scale:.3g} "
            f"(the new planned schedule{by_hand})"
        )
    return ResumePlan(new, tuple(notes), switched, None)


def restore_optimizer(
    optimizer: torch.optim.Optimizer,
    model: torch.nn.Module,
    state: dict[str, Any],
    cfg: OptimConfig,
    device_type: str,
) -> torch.optim.Optimizer:
    """The optimizer a resumed run trains with: `optimizer` (just built from `cfg`) with the
    checkpoint's state loaded, under this run's settings.

    The config is the truth: its hyperparameters (peak LRs, weight decay, betas, eps,
    momentum) are written back into the parameter groups after loading, since
    `load_state_dict` would restore the old ones. Another optimizer than the checkpoint's
    starts fresh (its state would not fit: Lion's moments are not AdamW's)."""
    from engine.checkpoint.checkpoint_error import CheckpointError
    from engine.optim.optimizers import build_optimizer

    saved_name = state["config"].get("optim", {}).get("name", "adamw")
    if saved_name != cfg.name:
        return build_optimizer(model, cfg, device_type)
    settings = optimizer_settings(optimizer)
    try:
        optimizer.load_state_dict(state["optimizer"])
    except (ValueError, KeyError, TypeError, RuntimeError) as e:
        raise CheckpointError(
            f"{state['_path']}: the checkpoint's optimizer state does not fit "
            f"{cfg.name} ({type(e).__name__}: {e}); resume from another checkpoint"
        ) from None
    put_settings(optimizer, settings)
    return optimizer


def optimizer_settings(optimizer: torch.optim.Optimizer) -> list[dict[str, Any]]:
    """Each parameter group's hyperparameters (the config's, before a checkpoint is loaded)."""
    return [{k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups]


def put_settings(optimizer: torch.optim.Optimizer, settings: list[dict[str, Any]]) -> None:
    """Write `settings` back after loading: the config is the truth, not the checkpoint."""
    for group, values in zip(optimizer.param_groups, settings, strict=True):
        group.update(values)
