"""The live settings screen: every setting a run may change while it trains, with its value, its
help and a field to change it; and "cool down now" for a WSD schedule.

It returns the settings to send (one `set_settings`); a read-only viewer sees them disabled. A
field that would re-plan the schedule posts `SchedulePreview` for the LR panel to draw.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.geometry import Region, Size
from textual.message import Message
from textual.widgets import Button, Input, Label, Static

from cockpit.figures.live_decisions import (
    Curve,
    cooldown_refusal,
    cooldown_span,
    decide,
    decide_cooldown,
    field_help,
    shown_refusal,
    shown_value,
)
from cockpit.figures.numbers import fmt_lr
from cockpit.screens.dialogs import InputDialog
from engine.config import COOLDOWN, LIVE_SETTINGS, RunConfig, setting_value, wsd_decay_start
from engine.optim import planned_curve


def placement(avoid: Region | None, screen: Size, top: int = 0) -> tuple[str, str, int, int]:
    """Where the screen's box goes so the LR panel (`avoid`) and the `top` rows (the status
    line) stay in view: (horizontal align, vertical align, width, height), the box starting
    below the `top` rows. Beside a panel on the left (the wide layout), above one on the right
    (compact); centred when the panel fills the screen or is not known."""
    full_w, full_h = screen.width, screen.height - top
    if avoid is None or avoid.width >= full_w or avoid.height >= full_h - 2:
        return "center", "middle", min(full_w, 96), full_h
    if avoid.x == 0 and full_w - avoid.right >= 40:
        return "right", "top", full_w - avoid.right, full_h
    if avoid.y - top >= 10:
        return "center", "top", full_w, avoid.y - top
    return "center", "middle", min(full_w, 96), full_h


class SchedulePreview(Message):
    """The schedule the fields would give, to draw before it is applied (None: no preview)."""

    def __init__(self, curve: Curve | None, max_steps: int = 0) -> None:
        super().__init__()
        self.curve, self.max_steps = curve, max_steps


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
        lr_scale: float = 1.0,
        top: int = 0,
    ) -> None:
        super().__init__(classes="dialog-screen")
        # rows left in view above the box: the status line, which follows the run meanwhile
        # (covered, its cut end showed beside the box's corner)
        self.top = top
        self.config, self.step, self.read_only = config, step, read_only
        # the multiplier on the schedule set with l, + and - (or a rollback): optim.lr alone
        # is not the peak in force while it is not 1
        self.lr_scale = lr_scale
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
                        yield Label(self._value_shown(key), classes="live-value")
                        yield Input(
                            placeholder=shown_value(setting_value(cfg, key)),
                            id=_field_id(key),
                            compact=True,
                            select_on_focus=False,
                            disabled=bool(self.read_only),
                        )
                    yield Static(field_help(key), classes="live-help")
                    if key == "optim.lr" and self._scaled():
                        yield Static(
                            Content.styled(self._multiplier_note(), "$warning"),
                            id="live-lr-scale",
                            classes="live-help",
                        )
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

    def _scaled(self) -> bool:
        return abs(self.lr_scale - 1.0) > 1e-9

    def _value_shown(self, key: str) -> str:
        """The value in force as the config holds it; optim.lr with the multiplier on it."""
        value = shown_value(setting_value(self.config, key))
        if key == "optim.lr" and self._scaled():
            return f"{value} ×{self.lr_scale:.3g}"
        return value

    def _multiplier_note(self) -> str:
        peak = self.config.optim.lr * self.lr_scale
        return (
            f"×{self.lr_scale:.3g} on the schedule (l, + or -): the peak in force is "
            f"{fmt_lr(peak)}; a new optim.lr is multiplied too"
        )

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
            why = shown_refusal(self.cooldown_refused)
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
        h, v, width, height = placement(self.avoid, self.app.size, self.top)
        self.styles.align_horizontal, self.styles.align_vertical = h, v  # type: ignore[assignment]
        box = self.query_one("#live-dialog")
        box.styles.width, box.styles.height = width, height
        box.styles.margin = (self.top, 0, 0, 0)
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
            why = shown_refusal(refused.get(key, ""))
            label = self.query_one(f"#{_field_id(key)}-refusal", Label)
            label.update(Content.styled(f"✗ {why}", "bold $error") if why else "")
            label.display = bool(why)
        self.refusals = {key: shown_refusal(why) for key, why in refused.items()}

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
            self.show_error(shown_refusal(decision.refusal))
            return
        self._preview(None)
        self.dismiss(decision.settings)

    def cool_down(self) -> None:
        if self.read_only or self.cooldown_refused is not None:
            return
        typed = self.query_one("#live-cooldown-steps", Input).value
        answer = decide_cooldown(self.config, self.step, typed)
        if isinstance(answer, str):
            self.show_error(shown_refusal(answer))
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
