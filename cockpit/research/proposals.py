"""What proposes the next experiment of a research series: the Proposer interface the
keep-or-discard loop drives, and the Proposal it gets back. A changes file and an LLM are two
proposers; the loop does not know which it has."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from engine.config import ConfigError


@dataclass(frozen=True)
class Proposal:
    """One change to try on top of the best configuration so far."""

    change: dict[str, object]  # keys as --set spells them, e.g. {"optim.lr": 0.002}
    reason: str
    proposed_by: str  # e.g. "changes file", "llm:MODEL"
    # what was wrong with it when its proposer refused it itself (an LLM's reply that is not
    # valid JSON, names a key it may not change): the search logs it refused and asks again
    refused: str = ""


@dataclass(frozen=True)
class ResearchContext:
    """What a proposer may look at to choose the next change."""

    preset: str
    best: dict[str, object]  # the best configuration's overrides: key -> value, as --set spells it
    log_rows: list[dict] = field(default_factory=list)  # the research log so far, oldest first
    settable: list[str] = field(default_factory=list)  # the keys a proposer may change
    notes: list[str] = field(default_factory=list)  # a person's notes on rejected proposals


class Proposer(Protocol):
    def propose(self, context: ResearchContext) -> Proposal | None:
        """The next change to try, or None when there is nothing more to try."""
        ...


# what the search itself sets for every experiment: a proposal may not change how it is measured
FIXED_KEYS = ("train.time_budget", "train.max_steps", "train.stop_at_val", "eval.full_val")


def change_settings(change: dict[str, object], where: str = "change") -> list[str]:
    """A change as `--set` texts, each in one spelling (`optim.lr=0.002`); ConfigError (one
    line) for an unknown key or a value no setting takes."""
    from cockpit.ablation.spec import canonical_setting, toml_text

    made = []
    for key, value in change.items():
        try:
            text = f"{key}={toml_text(value)}"
        except ConfigError as e:
            raise ConfigError(f"{where}: {key}: {e}") from None
        made.append(canonical_setting(text, where))
    return made


def change_text(change: dict[str, object]) -> str:
    """A change as the research log shows it: `--set` spelling, `optim.name=adamw lr=...`."""
    from cockpit.ablation.spec import shown_setting

    return " ".join(shown_setting(t) for t in change_settings(change))


def check_change(
    preset: str,
    change: dict[str, object],
    base: Sequence[str] = (),
    presets_dirs: Sequence[str] = (),
) -> str | None:
    """Why `change` cannot be tried on `preset` with the `--set`s `base` (the search's own and
    the best configuration's), in one line, or None when it can: every key a setting the search
    does not fix, every value one the config takes, and the change changes something."""
    from engine.config import load_preset

    if not isinstance(change, dict) or not change:
        return "an empty change; give at least one KEY: VALUE"
    for key in change:
        if not isinstance(key, str):
            return f"{key!r}: a key is a setting's name, e.g. optim.lr"
        if key in FIXED_KEYS:
            return f"{key}: the search sets it for every experiment (how each is measured); change another key"
    try:
        settings = change_settings(change, "change")
        before = load_preset(preset, list(base), list(presets_dirs)).to_dict()
        after = load_preset(preset, [*base, *settings], list(presets_dirs)).to_dict()
    except ConfigError as e:
        text = str(e).removeprefix("change: ")
        head, sep, rest = text.partition(": ")  # "/path/tiny.toml: optim.lr: ..." is the value's
        return rest if sep and head.endswith(".toml") else text
    if before == after:
        return f"{change_text(change)}: changes nothing, the configuration has it already"
    return None


def settable_keys(preset: str, presets_dirs: Sequence[str] = ()) -> list[str]:
    """Every key a proposal may change: the config's `section.key`s less the fixed ones."""
    from engine.config import load_preset

    config = load_preset(preset, [], list(presets_dirs)).to_dict()
    return [
        f"{section}.{name}"
        for section, values in config.items()
        if isinstance(values, dict)
        for name in values
        if f"{section}.{name}" not in FIXED_KEYS
    ]
