"""What proposes the next experiment of a research series: the Proposer interface the
keep-or-discard loop drives, and the Proposal it gets back. A changes file and an LLM are two
proposers; the loop does not know which it has."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

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
    # a person's note on a proposal they rejected: the search logs it rejected and asks again,
    # the note in the proposer's next context
    rejected: str = ""


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


@dataclass(frozen=True)
class Decision:
    """A person's answer to a proposal: accept it, try `change` instead, or reject it (`note`)."""

    action: Literal["accept", "edit", "reject"]
    change: dict[str, object] = field(default_factory=dict)  # the edited change
    note: str = ""  # why it was rejected, for the proposer


EDITED = " (edited by a person)"  # after the proposer's name in the log's `proposed_by`


class Approving:
    """Another proposer whose proposals a person decides on before they are tried: `ask`
    (proposal, context) -> Decision, blocking until they answer (it raises to stop the search).
    Proposals refused already, and the end (None), pass through unasked."""

    def __init__(
        self, inner: Proposer, ask: Callable[[Proposal, ResearchContext], Decision]
    ) -> None:
        self.inner = inner
        self.ask = ask

    def propose(self, context: ResearchContext) -> Proposal | None:
        proposal = self.inner.propose(context)
        if proposal is None or proposal.refused:
            return proposal
        decision = self.ask(proposal, context)
        if decision.action == "reject":
            note = " ".join(decision.note.split()) or "(no note)"
            return Proposal(proposal.change, proposal.reason, proposal.proposed_by, rejected=note)
        if decision.action == "edit" and decision.change != proposal.change:
            was = change_text(proposal.change)
            reason = f"{proposal.reason} (proposed {was}; a person changed it)".lstrip()
            return Proposal(dict(decision.change), reason, proposal.proposed_by + EDITED)
        return proposal


@dataclass(frozen=True)
class ChangeLine:
    """One setting of a proposed change as the approval dialog shows it."""

    key: str
    old: str  # its value in the best configuration, as --set spells it
    new: str
    help: str
    allowed: str  # what it may be: "number, > 0", "one of "a", "b""


def key_help(key: str) -> tuple[str, str]:
    """A config key's help text and what values it takes (("", "") for no such key)."""
    import dataclasses
    import typing

    from engine.config import RunConfig

    section, _, name = key.partition(".")
    hints = typing.get_type_hints(RunConfig)
    cls = hints.get(section)
    if cls is None or not dataclasses.is_dataclass(cls):
        return "", ""
    found = {f.name: f for f in dataclasses.fields(cls)}
    if name not in found:
        return "", ""
    meta = dict(found[name].metadata)
    kind = typing.get_type_hints(cls)[name]
    if "choices" in meta:
        return meta.get("help", ""), "one of " + ", ".join(str(c) for c in meta["choices"])
    parts = [
        {int: "integer", float: "number", bool: "true or false", str: "text"}.get(kind, "list")
    ]
    for bound, sign in (("min", ">="), ("min_excl", ">"), ("max", "<="), ("below", "<")):
        if bound in meta:
            parts.append(f"{sign} {meta[bound]:g}")
    return meta.get("help", ""), ", ".join(parts)


def change_lines(
    preset: str,
    change: dict[str, object],
    base: Sequence[str] = (),
    presets_dirs: Sequence[str] = (),
) -> list[ChangeLine]:
    """The change against the configuration `preset` with `base` --sets gives: each key's old
    and new value, its help text and range. ConfigError (one line) for a change no setting takes."""
    from cockpit.ablation.spec import shown_setting
    from engine.config import load_preset

    config = load_preset(preset, list(base), list(presets_dirs)).to_dict()
    lines = []
    for text in change_settings(change):
        key, _, new = shown_setting(text).partition("=")
        section, _, name = key.partition(".")
        old = config.get(section, {}).get(name)
        old_text = shown_setting(f"{key}={toml_value(old)}").partition("=")[2]
        lines.append(ChangeLine(key, old_text, new, *key_help(key)))
    return lines


def toml_value(value: object) -> str:
    """A config value as --set spells it (None: "none")."""
    from cockpit.ablation.spec import toml_text

    if value is None:
        return "none"
    try:
        return toml_text(value)
    except ConfigError:
        return str(value)


def parse_edit(text: str) -> dict[str, object]:
    """What a person typed to edit a change (`optim.lr=0.003 optim.weight_decay=0.1`, as
    --set spells each) as a change; ConfigError (one line) when it is no KEY=VALUE list."""
    import shlex

    from engine.config import parse_override

    try:
        words = shlex.split(text)
    except ValueError as e:
        raise ConfigError(f'{e}; quote a value with spaces as a="x y"') from None
    if not words:
        raise ConfigError("empty: type KEY=VALUE, e.g. optim.lr=0.002 (several: a=1 b=2)")
    change: dict[str, object] = {}
    for word in words:
        if "=" not in word or word.startswith("="):
            raise ConfigError(f"{word!r} is not KEY=VALUE, e.g. optim.lr=0.002")
        try:
            section, name, value = parse_override(word)
        except ConfigError as e:
            raise ConfigError(str(e).removeprefix("--set: ").removeprefix("--set ")) from None
        change[f"{section}.{name}"] = value
    return change
