"""The autopilot's rules: read from TOML (each mistake one line naming the rule and the fix) and
evaluated against a run's events (pure: events and times in, the rules that fire out).

    [[rule]]
    when = "plateau"       # val loss not improved (by more than min_delta) for `evals` evaluations
    evals = 3
    min_delta = 0.0        # optional
    do = "cooldown"        # or "cooldown 200": a decay of 200 steps

    [[rule]]
    when = "spike"         # the run's loss-spike alert
    do = ["checkpoint", "scale_lr 0.5"]

    [[rule]]
    when = "at"            # one of: time = "02:00" (wall clock), after = "2h", step = 5000
    time = "02:00"
    do = "set optim.lr=1e-4"

Each rule fires once per occurrence of its condition: a plateau fires once, and again only after
a new best val loss and another `evals` evaluations without one; a spike once per spike alert; an
`at` rule once.
"""

from __future__ import annotations

import datetime
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.config import COOLDOWN, ConfigError, canonical_key, refusal
from engine.events import Alert, Eval, Event, Step

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

CONDITIONS = ("plateau", "spike", "at")
ACTION_WORDS = (
    "cooldown",
    "checkpoint",
    "scale_lr",
    "set_lr",
    "set",
    "rollback",
    "pause",
    "resume",
)
ACTION_HELP = (
    "cooldown [STEPS], checkpoint, scale_lr FACTOR, set_lr LR, set KEY=VALUE [KEY=VALUE...], "
    "rollback [LR_FACTOR], pause or resume"
)
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smh])")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0}
_CLOCK = re.compile(r"([01]?\d|2[0-3]):([0-5]\d)")
_KEYS = {
    "plateau": {"when", "do", "evals", "min_delta"},
    "spike": {"when", "do"},
    "at": {"when", "do", "time", "after", "step"},
}


@dataclass(frozen=True)
class Action:
    """One command to the run: `command` is the wire's (`set`, `scale_lr`, ...), `arguments` its
    arguments; `text` is how the rules file spells it."""

    command: str
    arguments: dict[str, Any]
    text: str


@dataclass(frozen=True)
class Rule:
    """A rule as read: its number in the file (from 1), condition, parameters and actions."""

    number: int
    when: str
    actions: tuple[Action, ...]
    evals: int = 0
    min_delta: float = 0.0
    time: str = ""  # "HH:MM"
    after_s: float = 0.0
    step: int = 0

    @property
    def name(self) -> str:
        return f"rule {self.number} ({self.when})"


@dataclass(frozen=True)
class Firing:
    """A rule that fired: why (one line) and at which step."""

    rule: Rule
    why: str
    step: int


def load_rules(path: Path) -> list[Rule]:
    """The rules in the TOML file at `path`; ConfigError (one line) for any mistake."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise ConfigError(f"{path}: cannot read the rules file ({why})") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML ({e}); see docs/guide/autopilot.md") from None
    return parse_rules(data, str(path))


def parse_rules(data: dict[str, Any], where: str = "the rules file") -> list[Rule]:
    """The rules of a parsed TOML document (`[[rule]]` tables); ConfigError (one line)."""
    unknown = sorted(set(data) - {"rule"})
    if unknown:
        raise ConfigError(
            f"{where}: unknown table or key {unknown[0]!r}; rules are [[rule]] tables"
        )
    tables = data.get("rule")
    if not isinstance(tables, list) or not tables:
        raise ConfigError(
            f'{where}: no rules; add one, e.g. [[rule]] when = "plateau" evals = 3 do = "cooldown"'
        )
    return [_rule(number, table, where) for number, table in enumerate(tables, start=1)]


def _rule(number: int, table: Any, where: str) -> Rule:
    at = f"{where}: rule {number}"
    if not isinstance(table, dict):
        raise ConfigError(f"{at}: not a table; write it as [[rule]] with when = ... and do = ...")
    when = table.get("when")
    if when not in CONDITIONS:
        raise ConfigError(f"{at}: when = {when!r}: set when to one of {', '.join(CONDITIONS)}")
    extra = sorted(set(table) - _KEYS[when])
    if extra:
        allowed = ", ".join(sorted(_KEYS[when]))
        raise ConfigError(f"{at} ({when}): unknown key {extra[0]!r}; a {when} rule takes {allowed}")
    at = f"{at} ({when})"
    actions = _actions(table.get("do"), at)
    if when == "plateau":
        evals = table.get("evals")
        if isinstance(evals, bool) or not isinstance(evals, int) or evals < 1:
            raise ConfigError(
                f"{at}: evals = {evals!r}: set evals to a whole number of evaluations, 1 or more"
            )
        min_delta = table.get("min_delta", 0.0)
        if (
            isinstance(min_delta, bool)
            or not isinstance(min_delta, int | float)
            or not min_delta >= 0
        ):
            raise ConfigError(
                f"{at}: min_delta = {min_delta!r}: set it to a val loss margin, 0 or more"
            )
        return Rule(number, when, actions, evals=evals, min_delta=float(min_delta))
    if when == "at":
        given = [key for key in ("time", "after", "step") if key in table]
        if len(given) != 1:
            raise ConfigError(
                f'{at}: give exactly one of time = "02:00", after = "2h" or step = 5000 '
                f"(got {', '.join(given) or 'none'})"
            )
        value = table[given[0]]
        if given[0] == "time":
            if not isinstance(value, str) or not _CLOCK.fullmatch(value.strip()):
                raise ConfigError(
                    f'{at}: time = {value!r}: a wall-clock time as HH:MM, e.g. "02:00"'
                )
            return Rule(number, when, actions, time=value.strip())
        if given[0] == "after":
            match = _DURATION.fullmatch(value.strip()) if isinstance(value, str) else None
            seconds = float(match.group(1)) * _UNIT_S[match.group(2)] if match else 0.0
            if not seconds > 0:
                raise ConfigError(
                    f'{at}: after = {value!r}: a duration with its unit, e.g. "90s", "30m", "2h"'
                )
            return Rule(number, when, actions, after_s=seconds)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{at}: step = {value!r}: a step number, 1 or more")
        return Rule(number, when, actions, step=value)
    return Rule(number, when, actions)


def _actions(do: Any, at: str) -> tuple[Action, ...]:
    texts = [do] if isinstance(do, str) else do
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        raise ConfigError(
            f'{at}: do = {do!r}: give an action or a list of them, e.g. do = "cooldown"'
        )
    return tuple(parse_action(text, at) for text in texts)


def parse_action(text: str, at: str = "the action") -> Action:
    """One action as a rules file spells it ('scale_lr 0.5'); ConfigError (one line)."""
    words = text.split()
    word, rest = (words[0], words[1:]) if words else ("", [])
    if word not in ACTION_WORDS:
        raise ConfigError(f"{at}: unknown action {text!r}; the actions are {ACTION_HELP}")
    spelled = " ".join(words)
    if word in ("checkpoint", "pause", "resume"):
        if rest:
            raise ConfigError(f"{at}: {word} takes nothing; write {word!r}")
        return Action(word, {}, spelled)
    if word == "set":
        pairs = [r.partition("=") for r in rest]
        if not pairs or any(not key or not sep or not value for key, sep, value in pairs):
            raise ConfigError(f"{at}: {text!r}: write set KEY=VALUE, e.g. set optim.lr=1e-4")
        for key, _, _ in pairs:  # what no run takes live is refused now, not at 02:00
            try:
                why = refusal(canonical_key(key))
            except ConfigError as e:
                why = str(e)
            if why:
                raise ConfigError(f"{at}: {text!r}: {why}")
        return Action("set", {"settings": {key: value for key, _, value in pairs}}, spelled)
    if word == "cooldown":
        steps = _number(
            rest,
            at,
            word,
            "STEPS, a whole number of steps (none: the configured fraction)",
            optional=True,
        )
        if steps is not None and (steps != int(steps) or steps < 1):
            raise ConfigError(
                f"{at}: {text!r}: the decay's length is a whole number of steps, 1 or more"
            )
        return Action("set", {"settings": {COOLDOWN: int(steps or 0)}}, spelled)
    if word == "rollback":
        factor = _number(rest, at, word, "LR_FACTOR, above 0 (default 0.5)", optional=True)
        factor = 0.5 if factor is None else factor
        if not factor > 0:
            raise ConfigError(
                f"{at}: {text!r}: the LR factor of a rollback is above 0, e.g. rollback 0.5"
            )
        return Action("rollback", {"lr_factor": factor}, spelled)
    value = _number(rest, at, word, "FACTOR above 0" if word == "scale_lr" else "LR in (0, 10]")
    assert value is not None
    if word == "scale_lr" and not value > 0:
        raise ConfigError(f"{at}: {text!r}: the factor is above 0, e.g. scale_lr 0.5")
    if word == "set_lr" and not 0 < value <= 10:
        raise ConfigError(f"{at}: {text!r}: the LR is in (0, 10], e.g. set_lr 1e-4")
    return Action(word, {"factor" if word == "scale_lr" else "lr": value}, spelled)


def _number(rest: list[str], at: str, word: str, what: str, optional: bool = False) -> float | None:
    if not rest and optional:
        return None
    try:
        if len(rest) != 1:
            raise ValueError
        value = float(rest[0])
    except ValueError:
        raise ConfigError(f"{at}: {word} {' '.join(rest)!r}: write {word} {what}") from None
    if not math.isfinite(value):
        raise ConfigError(f"{at}: {word} {rest[0]!r}: write {word} {what}")
    return value


def clock_deadline(hhmm: str, start: float) -> float:
    """The Unix time of the first `hhmm` (local time) after `start`."""
    hours, minutes = (int(part) for part in hhmm.split(":"))
    begun = datetime.datetime.fromtimestamp(start)
    due = begun.replace(hour=hours, minute=minutes, second=0, microsecond=0)
    if due.timestamp() <= start:
        due += datetime.timedelta(days=1)
    return due.timestamp()


@dataclass
class Autopilot:
    """The rules' state over a run's events. `observe(event, live)` and `tick(now)` return the
    rules that fire; the replay (live False) only informs (each plateau rule's best val loss, the
    step), it never fires a rule."""

    rules: list[Rule]
    start: float  # Unix time the autopilot started: `after` counts from here, `time` is after it
    step: int = 0
    _fired: set[int] = field(default_factory=set)  # rules whose occurrence is over or spent
    _deadlines: dict[int, float] = field(default_factory=dict)
    _plateaus: dict[int, tuple[float, int]] = field(default_factory=dict)  # best val, evals since

    def __post_init__(self) -> None:
        for rule in self.rules:
            if rule.time:
                self._deadlines[rule.number] = clock_deadline(rule.time, self.start)
            elif rule.after_s:
                self._deadlines[rule.number] = self.start + rule.after_s

    def observe(self, event: Event, live: bool = True) -> list[Firing]:
        fired: list[Firing] = []
        step = getattr(event, "step", None)
        if isinstance(step, int):
            self.step = max(self.step, step)
        if isinstance(event, Eval) and not math.isnan(event.val_loss):
            fired += self._eval(event, live)
        elif isinstance(event, Alert) and event.code == "spike" and live:
            fired += [
                Firing(rule, f"loss spike: {event.message}", event.step)
                for rule in self.rules
                if rule.when == "spike"
            ]
        elif isinstance(event, Step) and live:
            for rule in self.rules:
                if rule.when == "at" and rule.step and event.step >= rule.step:
                    fired += self._once(
                        rule, f"step {event.step} reached (step = {rule.step})", event.step
                    )
        return fired

    def _eval(self, event: Eval, live: bool) -> list[Firing]:
        fired: list[Firing] = []
        for rule in self.rules:
            if rule.when != "plateau":
                continue
            best, since = self._plateaus.get(rule.number, (math.inf, 0))
            if event.val_loss < best - rule.min_delta:
                self._plateaus[rule.number] = (event.val_loss, 0)
                self._fired.discard(rule.number)  # a new plateau may come
                continue
            since += 1
            self._plateaus[rule.number] = (best, since)
            if live and since >= rule.evals:
                margin = f" by more than {rule.min_delta:g}" if rule.min_delta else ""
                why = (
                    f"plateau: {since} evaluations without a val loss below the best "
                    f"{best:.4g}{margin} (evals = {rule.evals}); the newest {event.val_loss:.4g}"
                )
                fired += self._once(rule, why, event.step)
        return fired

    def tick(self, now: float) -> list[Firing]:
        """The `at` rules whose time or duration has come by `now`."""
        fired: list[Firing] = []
        for rule in self.rules:
            deadline = self._deadlines.get(rule.number)
            if deadline is not None and now >= deadline:
                what = f"it is {rule.time}" if rule.time else f"{rule.after_s:g} s passed"
                fired += self._once(rule, f"{what} (rule {rule.number})", self.step)
        return fired

    def _once(self, rule: Rule, why: str, step: int) -> list[Firing]:
        if rule.number in self._fired:
            return []
        self._fired.add(rule.number)
        return [Firing(rule, why, step)]
