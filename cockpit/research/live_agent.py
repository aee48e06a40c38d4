"""An LLM's proposals for one live run: what `cockpit autopilot RUN_DIR --llm URL --model NAME`
asks and checks. The run is not restarted, so the agent may only act as a person at the run's
control socket would: a `set` of live settings, a `checkpoint`, a `rollback`, or nothing.

`RunWatch` follows the run's events into the state the agent is shown (the step, the loss and
val loss histories summarised, the LR schedule and its hand-set factor, recent alerts, whether
there is a checkpoint). `live_prompt` makes the chat messages; `check_reply` turns a reply
into a `LiveAction`, or the one line that says what was wrong with it (not JSON, not an action,
a key it may not change, a value the run would refuse). `consult` asks, and asks again with
the refusal (a bounded number of times): what it returns is checked against the run's
configuration at that step, so the run takes it unless it moved on meanwhile.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cockpit.research.llm_proposer import (
    AGENT_REFUSED_WHY,
    AgentError,
    agent_refused,
    read_keys,
    reply_json,
    settings_text,
    unknown_key,
)
from engine.config import (
    COOLDOWN,
    LIVE_SETTINGS,
    ConfigError,
    RunConfig,
    canonical_key,
    config_from_dict,
    live_change,
    refusal,
    setting_value,
)
from engine.events import (
    Alert,
    CheckpointSaved,
    Eval,
    Event,
    LrChanged,
    RunStarted,
    SettingsChanged,
    Step,
)

ACTIONS = ("set", "checkpoint", "rollback", "none")
# Live keys left to the person unless --keys names them: the run's length and budget (an agent
# must not make a night's run a week's), besides those the research agent leaves alone.
LIVE_REFUSED_KEYS = frozenset({"train.max_steps", "train.time_budget", "train.stop_at_val"})
LIVE_REFUSED_WHY = "the run's length and budget are the person's; --keys may name it"
TRIES = 3  # replies per round: a refused one is asked again with why, this many in all
EVALS_SHOWN = 12
ALERTS_SHOWN = 5
JOURNAL_SHOWN = 8
LOSS_SPANS = 8  # the train loss history, summarised as this many spans of steps
REPLY_SHOWN = 200

DEFAULT_LIVE_PROGRAM = """\
# Watching a training run

You watch one language model's training run while it trains, as a careful person would overnight.
At each look you see its state and may take one action; the run is not restarted, so you may only
change its live settings (they take effect from the next step), save a checkpoint, roll back to
its newest checkpoint with a lower learning rate, or do nothing.

- Do nothing unless the figures call for an action: most of the time that is the right answer.
- When the validation loss has stopped improving for several evaluations, lower the learning rate
  or, on a WSD schedule, cool down (schedule.cooldown).
- After a loss spike or a divergence, roll back; checkpoint before a risky change.
- Change the learning rate by at most a factor of 2 at once, and let a change show its effect
  over a few evaluations before the next.
- Respect the person's notes on proposals they rejected.
"""

REPLY_FORMAT = """\
Reply with one action as a JSON object and nothing else, one of:
{"action": "set", "settings": {"optim.lr": 0.0015}, "reason": "why"}
{"action": "checkpoint", "reason": "why"}
{"action": "rollback", "lr_factor": 0.5, "reason": "why"}
{"action": "none", "reason": "why"}"""

COOLDOWN_HELP = (
    "cool down now: a WSD decay from the next step, this many steps long (0: the configured "
    "fraction of the run); the run ends with it"
)


def live_keys() -> list[str]:
    """The settings the agent may change by default: the live ones, less those it leaves to
    the person (how the run is measured or logged, its process, its length)."""
    keys = [k for k in LIVE_SETTINGS if not agent_refused(k) and k not in LIVE_REFUSED_KEYS]
    return [*keys, COOLDOWN]


def parse_live_keys(text: str) -> list[str]:
    """`--keys k1,k2` as canonical live keys; ConfigError (one line) for an unknown key or one
    that cannot change while the run trains."""
    known = [*LIVE_SETTINGS, COOLDOWN]
    return read_keys(text, lambda: known, refusal, "optim.lr,schedule.cooldown")


@dataclass(frozen=True)
class LiveAction:
    """One action on the run: `set` (settings, keys canonical), `checkpoint`, `rollback` (to
    the newest checkpoint, the LR times lr_factor) or `none`; why, as the agent said it."""

    action: str
    reason: str = ""
    settings: dict[str, Any] = field(default_factory=dict)
    lr_factor: float = 0.5
    changes: str = ""  # a set's "key old -> new, ...", as the run would make it

    @property
    def text(self) -> str:
        """The action as a rules file spells it: `set optim.lr=0.0015`, `rollback 0.5`."""
        if self.action == "set":
            return "set " + " ".join(f"{k}={_value(v)}" for k, v in self.settings.items())
        if self.action == "rollback":
            return f"rollback {self.lr_factor:g}"
        return self.action


def _value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


class RunWatch:
    """The run's state, from its events (the replay included)."""

    def __init__(self) -> None:
        self.preset = ""
        self.raw: dict[str, Any] = {}  # the configuration as the run trains with it now
        self.config: RunConfig | None = None
        self.step = 0
        self.max_steps = 0
        self.tokens = 0
        self.lr = math.nan
        self.lr_scale = 1.0
        self.planned_lr: tuple[tuple[int, float], ...] = ()
        self.losses: list[tuple[int, float]] = []
        self.evals: list[Eval] = []
        self.alerts: list[Alert] = []
        self.checkpoint_step: int | None = None

    def observe(self, event: Event) -> None:
        if isinstance(event, RunStarted):
            self.preset = event.preset
            self.raw = json.loads(json.dumps(event.config))
            self._configure()
            self.max_steps = event.max_steps
            self.planned_lr = tuple(event.planned_lr)
        elif isinstance(event, Step):
            self.step = max(self.step, event.step)
            self.tokens = event.tokens
            self.lr = event.lr
            if math.isfinite(event.loss):
                self.losses.append((event.step, event.loss))
        elif isinstance(event, Eval):
            self.evals.append(event)
        elif isinstance(event, LrChanged):
            self.lr_scale = event.scale
        elif isinstance(event, SettingsChanged):
            for key, (_, new) in event.changes.items():
                section, _, name = key.partition(".")
                if isinstance(self.raw.get(section), dict):
                    self.raw[section][name] = new
            self._configure()
            self.max_steps = event.max_steps or self.max_steps
            self.planned_lr = tuple(event.planned_lr) or self.planned_lr
        elif isinstance(event, CheckpointSaved):
            self.checkpoint_step = event.step
        elif isinstance(event, Alert) and event.code not in ("socket", ""):
            self.alerts.append(event)
            del self.alerts[:-ALERTS_SHOWN]

    def _configure(self) -> None:
        try:
            self.config = config_from_dict(json.loads(json.dumps(self.raw)), source="the run")
        except ConfigError:
            pass  # keep the last one that read: the run itself checks every set

    def state_text(self, journal: Sequence[str] = ()) -> str:
        """The run's state as the agent reads it."""
        cfg = self.config
        parts = [f"Preset: {self.preset or '?'}"]
        progress = (
            f"Step {self.step:,} of {self.max_steps:,}" if self.max_steps else f"Step {self.step:,}"
        )
        parts.append(f"{progress}; {self.tokens:,} tokens trained")
        if cfg is not None:
            parts.append(_schedule_text(cfg, self))
        parts.append("Train loss (mean over spans of steps):\n" + self._loss_text())
        parts.append("Evaluations, oldest first:\n" + self._evals_text())
        newest = (
            f"at step {self.checkpoint_step}" if self.checkpoint_step is not None else "none yet"
        )
        parts.append(f"Newest checkpoint: {newest} (a rollback goes back to it)")
        alerts = [f"- step {a.step}: {a.level} {a.code}: {_shown(a.message)}" for a in self.alerts]
        parts.append("Recent alerts:\n" + ("\n".join(alerts) or "(none)"))
        parts.append(
            "Recent actions on the run (its journal):\n" + ("\n".join(journal) or "(none)")
        )
        return "\n\n".join(parts)

    def _loss_text(self) -> str:
        if not self.losses:
            return "(no steps yet)"
        n = len(self.losses)
        spans = min(LOSS_SPANS, n)
        lines = []
        for i in range(spans):
            part = self.losses[i * n // spans : (i + 1) * n // spans]
            mean = sum(loss for _, loss in part) / len(part)
            steps = f"steps {part[0][0]}-{part[-1][0]}" if len(part) > 1 else f"step {part[0][0]}"
            lines.append(f"- {steps}: {mean:.4f}")
        recent = [loss for _, loss in self.losses[-20:]]
        lines.append(
            f"- the last {len(recent)} steps: mean {sum(recent) / len(recent):.4f}, "
            f"min {min(recent):.4f}, max {max(recent):.4f}"
        )
        return "\n".join(lines)

    def _evals_text(self) -> str:
        if not self.evals:
            return "(none yet)"
        best = min(self.evals, key=lambda e: e.val_loss if math.isfinite(e.val_loss) else math.inf)
        since = sum(1 for e in self.evals if e.time > best.time)
        lines = []
        if len(self.evals) > EVALS_SHOWN:
            lines.append(f"({len(self.evals) - EVALS_SHOWN} earlier evaluations left out)")
        for e in self.evals[-EVALS_SHOWN:]:
            bpb = f", val bpb {e.val_bpb:.4f}" if e.val_bpb is not None else ""
            lines.append(f"- step {e.step}: train {e.train_loss:.4f}, val {e.val_loss:.4f}{bpb}")
        lines.append(
            f"Best val loss {best.val_loss:.4f} at step {best.step}; {since} evaluations since"
        )
        return "\n".join(lines)


def _schedule_text(cfg: RunConfig, watch: RunWatch) -> str:
    s = cfg.schedule
    lines = [
        f"LR schedule: {s.kind}, peak optim.lr {cfg.optim.lr:g}, warmup {s.warmup_steps} steps, "
        f"floor schedule.min_lr {s.min_lr:g}"
    ]
    if s.kind == "wsd":
        start = s.decay_start or watch.max_steps - round(watch.max_steps * s.decay_fraction)
        lines.append(f"WSD decay from step {start} to step {watch.max_steps}")
    if watch.planned_lr:
        points = watch.planned_lr[:: max(1, len(watch.planned_lr) // 8)]
        lines.append("planned LR (step: lr): " + ", ".join(f"{st}: {lr:.3g}" for st, lr in points))
    scale = (
        f", a hand-set factor x{watch.lr_scale:g} on the schedule" if watch.lr_scale != 1 else ""
    )
    lines.append(f"LR now {watch.lr:.3g}{scale}")
    return "\n".join(lines)


def settable_now(cfg: RunConfig, keys: Sequence[str], step: int) -> list[str]:
    """`keys` less those that would change nothing on this run (Muon's LR on an AdamW run, a
    cosine horizon on a WSD schedule, a warmup already over), as the run itself decides."""
    shown = []
    for key in keys:
        if key == COOLDOWN:
            if cfg.schedule.kind == "wsd":
                shown.append(key)
            continue
        if key == "schedule.warmup_steps" and step >= cfg.schedule.warmup_steps:
            continue
        value = setting_value(cfg, key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            shown.append(key)
            continue
        probe = value + 1 if isinstance(value, int) else (value / 2 if value else 1e-3)
        decided = live_change(cfg, {key: probe}, step)
        if not (isinstance(decided, str) and "changes nothing on this run" in decided):
            shown.append(key)
    return shown


def live_settings_text(cfg: RunConfig, keys: Sequence[str]) -> str:
    """One line per key the agent may set: its value now, what it may be, its help, and when
    a new value takes effect."""
    fields = [k for k in keys if k != COOLDOWN]
    lines = [
        f"{line}; {LIVE_SETTINGS[key]}" if key in LIVE_SETTINGS else line
        for key, line in zip(fields, settings_text(cfg, fields).splitlines(), strict=True)
    ]
    if COOLDOWN in keys:
        lines.append(f"- {COOLDOWN} (integer, >= 0): {COOLDOWN_HELP}")
    return "\n".join(lines)


def live_prompt(
    program: str,
    watch: RunWatch,
    keys: Sequence[str],
    journal: Sequence[str] = (),
    notes: Sequence[str] = (),
) -> list[dict[str, str]]:
    """The chat messages of a round: the program as the system message, the run's state, the
    settings the agent may change and the reply's format as the user's."""
    assert watch.config is not None
    parts = [
        watch.state_text(journal),
        "Live settings you may change (key = value now (allowed): what it sets; when it takes "
        f"effect):\n{live_settings_text(watch.config, settable_now(watch.config, keys, watch.step))}",
    ]
    if notes:
        parts.append("A person's notes on proposals they rejected:\n" + "\n".join(
            f"- {note}" for note in notes
        ))  # fmt: skip
    parts.append(REPLY_FORMAT)
    return [
        {"role": "system", "content": program},
        {"role": "user", "content": "\n\n".join(parts)},
    ]


def check_reply(
    text: str, cfg: RunConfig, step: int, keys: Sequence[str], checkpoint: bool
) -> LiveAction | str:
    """The action a reply asks for, checked against the run's configuration `cfg` at `step`,
    or what is wrong with it (one line)."""
    reply, problem = reply_json(text)
    if problem:
        return problem.replace("send one change", "send one action")
    if not isinstance(reply, dict):
        return 'not a JSON object with an "action" in it'
    reason = reply.get("reason", "")
    if not isinstance(reason, str):
        return '"reason" is not text'
    reason = _shown(reason, 300)
    settings = reply.get("settings", reply.get("change"))
    action = reply.get("action", "set" if isinstance(settings, dict) else None)
    if action not in ACTIONS:
        return f'"action": {json.dumps(action)}: expected one of {", ".join(ACTIONS)}'
    if action == "none":
        return LiveAction("none", reason)
    if action == "checkpoint":
        return LiveAction("checkpoint", reason)
    if action == "rollback":
        factor = reply.get("lr_factor", 0.5)
        if isinstance(factor, bool) or not isinstance(factor, int | float) or not 0 < factor <= 1:
            return f"rollback: lr_factor {json.dumps(factor)}: expected a number in (0, 1]"
        if not checkpoint:
            return "rollback: the run has no checkpoint yet to go back to; checkpoint first"
        return LiveAction("rollback", reason, lr_factor=float(factor))
    if not isinstance(settings, dict) or not settings:
        return 'set: "settings" is no object of settings, e.g. {"optim.lr": 0.0015}'
    return _check_set(settings, reason, cfg, step, keys)


def _check_set(
    settings: Mapping[str, Any], reason: str, cfg: RunConfig, step: int, keys: Sequence[str]
) -> LiveAction | str:
    canonical: dict[str, Any] = {}
    for key, value in settings.items():
        try:
            name = canonical_key(str(key))
        except ConfigError:
            return unknown_key(str(key), keys)
        if name not in keys:
            why = refusal(name)
            if why is None:
                why = f"{name} is not a setting it may change ("
                if agent_refused(name):
                    why += f"{AGENT_REFUSED_WHY})"
                elif name in LIVE_REFUSED_KEYS:
                    why += f"{LIVE_REFUSED_WHY})"
                else:
                    why += f"--keys names {','.join(keys)})"
            return why
        if isinstance(value, dict | list) or value is None:
            return f"{name}: {json.dumps(value)} is no setting's value"
        canonical[name] = value
    decided = live_change(cfg, canonical, step)
    if isinstance(decided, str):
        return decided.removeprefix("set refused: ")
    if not decided.changes:
        return f"{' '.join(f'{k}={_value(v)}' for k, v in canonical.items())}: changes nothing, the run has it already"
    changes = ", ".join(f"{k} {old} -> {new}" for k, (old, new) in decided.changes.items())
    return LiveAction("set", reason, settings=canonical, changes=changes)


def _shown(text: str, limit: int = REPLY_SHOWN) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


@dataclass(frozen=True)
class Outcome:
    """A round's result: the action (None when none valid came within the tries, or the
    endpoint failed: `failure` says how), the step it was checked at."""

    action: LiveAction | None
    step: int
    failure: str = ""


def consult(
    ask: Callable[[list[dict[str, str]]], str],
    messages: list[dict[str, str]],
    cfg: RunConfig,
    step: int,
    keys: Sequence[str],
    checkpoint: bool,
    say: Callable[[str], None],
    tries: int = TRIES,
) -> Outcome:
    """One round: ask, check the reply, and ask again with what was wrong (each refusal said in
    one line), up to `tries` replies. An endpoint that fails ends the round (`failure`)."""
    for attempt in range(1, tries + 1):
        try:
            text = ask(messages)
        except TimeoutError:
            return Outcome(None, step, "gave no answer in time")
        except AgentError as e:
            return Outcome(None, step, str(e))
        checked = check_reply(text, cfg, step, keys, checkpoint)
        if isinstance(checked, LiveAction):
            return Outcome(checked, step)
        shown = (
            f" (the reply: {_shown(text)})" if text.strip() and "not valid JSON" in checked else ""
        )
        again = "asking again" if attempt < tries else "no action this time"
        say(f"step {step}: the reply was refused ({attempt} of {tries}): {checked}{shown}; {again}")
        messages = [
            *messages,
            {"role": "assistant", "content": text},
            {"role": "user", "content": f"That was refused: {checked}. {REPLY_FORMAT}"},
        ]
    return Outcome(None, step)


class Rounds:
    """At most one round at a time, in a thread of its own, so that the rules and the run's
    events go on while the endpoint thinks: `start(...)`, then `result()` until it is not None."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._result: Outcome | None = None
        self._lock = threading.Lock()

    @property
    def busy(self) -> bool:
        return self._thread is not None

    def start(self, job: Callable[[], Outcome]) -> None:
        def work() -> None:
            try:
                outcome = job()
            except Exception as e:  # the thread's boundary: the round fails, the autopilot goes on
                outcome = Outcome(
                    None, 0, f"the round failed: {type(e).__name__}: {_shown(str(e))}"
                )
            with self._lock:
                self._result = outcome

        self._thread = threading.Thread(target=work, name="live-agent", daemon=True)
        self._thread.start()

    def result(self) -> Outcome | None:
        with self._lock:
            outcome, self._result = self._result, None
        if outcome is not None:
            self._thread = None
        return outcome
