"""The live settings screen: every setting a run may change while it trains, with its value in
force, its help and a field to change it; and "cool down now" for a WSD schedule.

Each edited field is checked as `--set` checks it, by the function the engine decides a `set`
with (`engine.config.live.live_change`, on the app's view of the run's config at its step):
a refusal is one line under its field, the screen open, nothing sent. The screen returns the
settings to send; the app sends them as one `set_settings` through the engine contract, so an
attached viewer steers the same way as the app that trains. A read-only viewer sees the values
with every field disabled and a line saying why.

While a field's value would re-plan the schedule, the screen posts `SchedulePreview` with the
new curve (the LR panel draws it beside the planned one); `SchedulePreview(None)` clears it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, is_dataclass
from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.geometry import Region, Size
from textual.message import Message
from textual.widgets import Button, Input, Label, Static

from cockpit.screens.dialogs import InputDialog
from engine.config import (
    COOLDOWN,
    LIVE_SETTINGS,
    RunConfig,
    SettingsChange,
    config_from_dict,
    live_change,
    setting_value,
    wsd_decay_start,
)
from engine.events import RunStarted
from engine.model import planned_curve

Curve = tuple[tuple[int, float], ...]
# section name -> its dataclass, as the run's config has them
_SECTIONS = {name: type(value) for name, value in vars(RunConfig()).items() if is_dataclass(value)}


# ---------------------------------------------------------------------------------------------
# The pure part: the run's config as the app sees it, the texts, the decisions


def run_config(info: RunStarted | None) -> RunConfig | None:
    """The config the run trains with, as the app sees it: its RunStarted's (which the app
    keeps up to date with each SettingsChanged: `config_after`); None before the run started
    or for a config this version cannot read."""
    if info is None:
        return None
    try:
        return config_from_dict(dict(info.config), "the run's config")
    except (ValueError, TypeError, KeyError):  # ConfigError is a ValueError
        return None


def config_after(config: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """A RunStarted's config dict with a SettingsChanged's `changes` (key -> [old, new]) in force:
    the app's view of the run's settings after the acknowledgement."""
    raw = {
        section: dict(values) if isinstance(values, Mapping) else values
        for section, values in config.items()
    }
    for key, (_, new) in changes.items():
        section, _, name = key.partition(".")
        if section in _SECTIONS and name:
            raw.setdefault(section, {})[name] = new
    return raw


def field_help(key: str) -> str:
    """The config field's own help, then when a new value takes effect."""
    section, name = key.split(".", 1)
    meta = {f.name: f.metadata for f in fields(_SECTIONS[section])}.get(name, {})
    own = str(meta.get("help", ""))
    when = LIVE_SETTINGS.get(key, "")
    return f"{own} · {when}" if own and when else own or when


def shown_value(value: Any) -> str:
    """A value as `--set` writes it (what the field accepts back)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return json.dumps(list(value))
    return str(value)


def cooldown_refusal(cfg: RunConfig, step: int) -> str | None:
    """Why "cool down now" is not offered at `step` (not a WSD schedule, cooling down already),
    or None when it is."""
    answer = live_change(cfg, {COOLDOWN: 0}, step)
    return answer if isinstance(answer, str) else None


def cooldown_span(cfg: RunConfig) -> int:
    """The decay's length "cool down now" gives with no length: the configured fraction."""
    return max(1, round(cfg.train.max_steps * cfg.schedule.decay_fraction))


@dataclass(frozen=True)
class Decision:
    """What the fields ask for: each refused field's line, the refusal of them all together,
    and the change when everything is accepted."""

    refused: dict[str, str]
    refusal: str = ""
    change: SettingsChange | None = None
    asked: tuple[str, ...] = ()  # the edited keys, in the screen's order

    @property
    def settings(self) -> dict[str, Any]:
        """What to send: every edited key with its value as the config holds it."""
        if self.change is None:
            return {}
        return {key: setting_value(self.change.config, key) for key in self.asked}


def decide(cfg: RunConfig, step: int, edits: Mapping[str, str]) -> Decision:
    """Check each edited field alone (its own refusal line), then all of them together, as the
    engine will at the next step boundary."""
    refused = {}
    for key, text in edits.items():
        answer = live_change(cfg, {key: text}, step)
        if isinstance(answer, str):
            refused[key] = answer
    if refused:
        return Decision(refused)
    if not edits:
        return Decision({}, "nothing to change: type a new value in a field")
    answer = live_change(cfg, dict(edits), step)
    if isinstance(answer, str):
        return Decision({}, answer)
    if not answer.changes:
        return Decision({}, "nothing to change: every value typed is in force already")
    return Decision({}, change=answer, asked=tuple(edits))


def decide_cooldown(cfg: RunConfig, step: int, text: str) -> tuple[int, RunConfig] | str:
    """"Cool down now" with a length typed as `text` ("" = the configured fraction): the
    length to send and the config it gives, or the one-line refusal."""
    text = text.strip()
    try:
        length = int(text.replace("_", "")) if text else 0
    except ValueError:
        return f"'{text}': type the decay's length in steps, or nothing for the configured fraction"
    answer = live_change(cfg, {COOLDOWN: length}, step)
    if isinstance(answer, str):
        return answer
    return length, answer.config


def placement(avoid: Region | None, screen: Size) -> tuple[str, str, int, int]:
    """Where the screen's box goes so the LR panel (`avoid`) stays in view: (horizontal align,
    vertical align, width, height). Beside a panel on the left (the wide layout), above one on
    the right (compact); centred when the panel fills the screen or is not known."""
    full_w, full_h = screen.width, screen.height
    if avoid is None or avoid.width >= full_w or avoid.height >= full_h - 2:
        return "center", "middle", min(full_w, 96), full_h
    if avoid.x == 0 and full_w - avoid.right >= 40:
        return "right", "top", full_w - avoid.right, full_h
    if avoid.y >= 10:
        return "center", "top", full_w, avoid.y
    return "center", "middle", min(full_w, 96), full_h


class SchedulePreview(Message):
    """The schedule the fields would give, to draw before it is applied (None: no preview)."""

    def __init__(self, curve: Curve | None, max_steps: int = 0) -> None:
        super().__init__()
        self.curve, self.max_steps = curve, max_steps


# ---------------------------------------------------------------------------------------------
# The screens


def _said(refusal: str) -> str:
    """A refusal as the screen says it, under the field it is about."""
    return refusal.removeprefix("set refused: ").removeprefix("set: ")


def _field_id(key: str) -> str:
    return "set-" + key.replace(".", "--")


class LiveSettingsScreen(InputDialog):
    """Every live setting of the run at `step` of `config`. Returns the settings to send
    (`{key: value}`), `{COOLDOWN: length}` for "cool down now", or None when cancelled.
    `read_only` is why nothing can be changed here ("" = editable)."""

    ERROR_ID = "live-error"
    # priority: decided as the key arrives, so keys typed right after a tab go into the next
    # field and a key right after esc reaches the main screen (not the field being closed)
    BINDINGS = [
        Binding("escape", "cancel", "Cancel", show=False, priority=True),
        Binding("tab", "app.focus_next", show=False, priority=True),
        Binding("shift+tab", "app.focus_previous", show=False, priority=True),
    ]
    DEFAULT_CSS = """
    LiveSettingsScreen { background: $background 25%; }
    LiveSettingsScreen #live-dialog { max-width: 100%; max-height: 100%; padding: 0 1; }
    LiveSettingsScreen #live-rows { height: 1fr; scrollbar-size-vertical: 1; }
    LiveSettingsScreen .live-row { height: 1; }
    LiveSettingsScreen .live-key { width: 24; }
    LiveSettingsScreen .live-value {
        width: 12; color: $text-muted; text-wrap: nowrap; text-overflow: ellipsis;
    }
    LiveSettingsScreen .live-row Input { width: 1fr; }
    LiveSettingsScreen .live-help { color: $text-muted; padding-left: 2; }
    LiveSettingsScreen .live-refusal { height: auto; padding-left: 2; display: none; }
    LiveSettingsScreen #live-cooldown-row { height: 1; margin-top: 1; }
    LiveSettingsScreen #live-cooldown-row Input { width: 1fr; }
    LiveSettingsScreen #live-note, LiveSettingsScreen #live-read-only { height: auto; }
    LiveSettingsScreen #live-error { height: auto; }
    LiveSettingsScreen .dialog-buttons Button { margin-left: 1; min-width: 10; }
    """

    def __init__(
        self,
        config: RunConfig,
        step: int,
        read_only: str = "",
        avoid: Region | None = None,
        follow: Callable[[], int] | None = None,
    ) -> None:
        super().__init__(classes="dialog-screen")
        self.config, self.step, self.read_only = config, step, read_only
        self.avoid = avoid  # the LR panel's region: the box leaves it in view
        # the run's step now: the screen's note and its checks follow the run while it is open
        self.follow = follow
        self.planned = planned_curve(config)
        self.cooldown_refused = cooldown_refusal(config, step)
        self.refusals: dict[str, str] = {}  # key -> the line under its field
        self.previewing = False

    # layout -------------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        cfg = self.config
        with Vertical(classes="dialog", id="live-dialog") as box:
            box.border_title = "Live settings"
            box.border_subtitle = "enter apply · esc cancel" if not self.read_only else "esc close"
            yield Static(self._note(), id="live-note")
            if self.read_only:
                yield Static(
                    Content.styled(f"read-only: {self.read_only}", "$warning"), id="live-read-only"
                )
            with VerticalScroll(id="live-rows"):
                for key in LIVE_SETTINGS:
                    with Horizontal(classes="live-row"):
                        yield Label(key, classes="live-key")
                        yield Label(shown_value(setting_value(cfg, key)), classes="live-value")
                        yield Input(
                            placeholder=shown_value(setting_value(cfg, key)),
                            id=_field_id(key),
                            compact=True,
                            select_on_focus=False,
                            disabled=bool(self.read_only),
                        )
                    yield Static(field_help(key), classes="live-help")
                    yield Label("", id=_field_id(key) + "-refusal", classes="live-refusal")
                yield from self._cooldown_rows()
            yield Label("", id="live-error")
            with Horizontal(classes="dialog-buttons"):
                yield Button(
                    "Apply (enter)",
                    id="live-apply",
                    variant="primary",
                    compact=True,
                    disabled=bool(self.read_only),
                )
                yield Button("Cancel (esc)", id="live-cancel", compact=True)

    def _cooldown_rows(self) -> ComposeResult:
        cfg = self.config
        off = bool(self.read_only) or self.cooldown_refused is not None
        with Horizontal(id="live-cooldown-row"):
            yield Button(
                "Cool down now", id="live-cooldown", variant="warning", compact=True, disabled=off
            )
            yield Input(
                placeholder=f"steps (empty: {cooldown_span(cfg):,}, the configured fraction)",
                id="live-cooldown-steps",
                compact=True,
                select_on_focus=False,
                disabled=off,
            )
        if self.cooldown_refused is not None:
            why = _said(self.cooldown_refused)
            yield Static(
                Content.styled(why, "$warning"), id="live-cooldown-refusal", classes="live-help"
            )
        else:
            yield Static(
                f"WSD: the decay starts at the next step (planned from step "
                f"{wsd_decay_start(cfg):,}); the run ends when it does",
                classes="live-help",
            )

    def _note(self) -> Content:
        note = f"At step {self.step:,} of {self.config.train.max_steps:,}."
        if not self.read_only:
            note += " Edited values go to the run together and apply from the next step."
        return Content.styled(note, "$foreground-muted")

    def _follow_step(self) -> None:
        step = self.follow() if self.follow is not None else self.step
        if step != self.step:
            self.step = step
            self.query_one("#live-note", Static).update(self._note())

    def on_mount(self) -> None:
        if self.follow is not None:
            self.set_interval(1.0, self._follow_step)
        h, v, width, height = placement(self.avoid, self.app.size)
        self.styles.align_horizontal, self.styles.align_vertical = h, v  # type: ignore[assignment]
        box = self.query_one("#live-dialog")
        box.styles.width, box.styles.height = width, height
        for inp in self.query(Input):
            inp.cursor_blink = False
        first = self.query_one(f"#{_field_id(next(iter(LIVE_SETTINGS)))}", Input)
        if not first.disabled:
            first.focus()
        else:
            self.query_one("#live-cancel", Button).focus()

    # what the fields ask for ------------------------------------------------------------------
    def edits(self) -> dict[str, str]:
        """The edited fields: key -> the text typed."""
        out = {}
        for key in LIVE_SETTINGS:
            text = self.query_one(f"#{_field_id(key)}", Input).value.strip()
            if text:
                out[key] = text
        return out

    def refusal_of(self, key: str) -> str:
        """The refusal line under `key`'s field ("" when none)."""
        return self.refusals.get(key, "")

    def _show_refusals(self, refused: Mapping[str, str]) -> None:
        for key in {*self.refusals, *refused}:
            why = _said(refused.get(key, ""))
            label = self.query_one(f"#{_field_id(key)}-refusal", Label)
            label.update(Content.styled(f"✗ {why}", "bold $error") if why else "")
            label.display = bool(why)
        self.refusals = {key: _said(why) for key, why in refused.items()}

    def apply(self) -> None:
        """Check every edited field, then send them together (or say why not, the screen open)."""
        if self.read_only:
            return
        decision = decide(self.config, self.step, self.edits())
        self._show_refusals(decision.refused)
        if decision.refused:
            first = next(iter(decision.refused))
            self.query_one(f"#{_field_id(first)}", Input).focus()
            n = len(decision.refused)
            self.show_error(f"{n} value{'s' if n > 1 else ''} refused: see under the field")
            return
        if decision.change is None:
            self.show_error(_said(decision.refusal))
            return
        self._preview(None)
        self.dismiss(decision.settings)

    def cool_down(self) -> None:
        if self.read_only or self.cooldown_refused is not None:
            return
        typed = self.query_one("#live-cooldown-steps", Input).value
        answer = decide_cooldown(self.config, self.step, typed)
        if isinstance(answer, str):
            self.show_error(_said(answer))
            return
        self._preview(None)
        self.dismiss({COOLDOWN: answer[0]})

    # the preview -----------------------------------------------------------------------------
    def _preview(self, cfg: RunConfig | None) -> None:
        curve = planned_curve(cfg) if cfg is not None else None
        if curve == self.planned:
            curve = None  # nothing of the schedule changes
        if curve is None and not self.previewing:
            return
        self.previewing = curve is not None
        max_steps = cfg.train.max_steps if cfg is not None and curve is not None else 0
        self.app.post_message(SchedulePreview(curve, max_steps))

    # events --------------------------------------------------------------------------------
    @on(Input.Changed)
    def _changed(self, event: Input.Changed) -> None:
        """Preview what the fields would do; refusals wait for enter (half-typed is normal)."""
        event.stop()
        if self.error:
            self.show_error("")
        if event.input.id == "live-cooldown-steps":
            answer = decide_cooldown(self.config, self.step, event.value)
            self._preview(None if isinstance(answer, str) else answer[1])
            return
        # the fields that would be accepted alone: one half-typed field hides no other's preview
        edits = self.edits()
        fine = {
            key: text
            for key, text in edits.items()
            if not decide(self.config, self.step, {key: text}).refused
        }
        decision = decide(self.config, self.step, fine)
        self._preview(decision.change.config if decision.change is not None else None)

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if event.input.id == "live-cooldown-steps":
            self.cool_down()
        else:
            self.apply()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "live-apply":
            self.apply()
        elif event.button.id == "live-cooldown":
            self.cool_down()
        else:
            self.action_cancel()

    def action_cancel(self) -> None:
        self._preview(None)
        self.dismiss(None)


class CooldownScreen(InputDialog):
    """"Cool down now" on its own: the decay's length in steps (empty: the configured fraction).
    Returns `{COOLDOWN: length}`, or None when cancelled. The new schedule is previewed at once."""

    ERROR_ID = "cooldown-error"
    BINDINGS = [Binding("escape", "cancel", "Cancel", show=False, priority=True)]

    def __init__(
        self, config: RunConfig, step: int, follow: Callable[[], int] | None = None
    ) -> None:
        super().__init__(classes="dialog-screen")
        self.config, self.step = config, step
        self.follow = follow  # the run's step now: the text and the preview follow the run
        self.previewing = False

    def compose(self) -> ComposeResult:
        cfg = self.config
        with Vertical(classes="dialog", id="cooldown-dialog") as box:
            box.border_title = "Cool down now"
            box.border_subtitle = "enter cool down · esc cancel"
            yield Static(self._message(), classes="dialog-message", id="cooldown-message")
            yield Input(
                placeholder=f"{cooldown_span(cfg)}", id="cooldown-steps", select_on_focus=False
            )
            yield Label("", id="cooldown-error")

    def _message(self) -> str:
        cfg = self.config
        return (
            f"The WSD decay starts at the next step (step {self.step + 1:,}; planned from "
            f"{wsd_decay_start(cfg):,}) and the run ends when it does. Its length in steps, "
            f"or nothing for the configured fraction ({cooldown_span(cfg):,} steps):"
        )

    def _follow_step(self) -> None:
        step = self.follow() if self.follow is not None else self.step
        if step != self.step:
            self.step = step
            self.query_one("#cooldown-message", Static).update(self._message())
            self._preview(self.query_one(Input).value)

    def on_mount(self) -> None:
        super().on_mount()
        if self.follow is not None:
            self.set_interval(1.0, self._follow_step)
        self._preview("")

    def _preview(self, text: str) -> None:
        answer = decide_cooldown(self.config, self.step, text)
        if isinstance(answer, str):
            if self.previewing:
                self.previewing = False
                self.app.post_message(SchedulePreview(None))
            return
        self.previewing = True
        self.app.post_message(SchedulePreview(planned_curve(answer[1]), answer[1].train.max_steps))

    @on(Input.Changed)
    def _changed(self, event: Input.Changed) -> None:
        event.stop()
        if self.error:
            self.show_error("")
        self._preview(event.value)

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        answer = decide_cooldown(self.config, self.step, event.value)
        if isinstance(answer, str):
            self.show_error(_said(answer))
            return
        self.app.post_message(SchedulePreview(None))
        self.dismiss({COOLDOWN: answer[0]})

    def action_cancel(self) -> None:
        self.app.post_message(SchedulePreview(None))
        self.dismiss(None)

