"""Modal screens: confirmation, learning-rate dialog, preset menu, help.

`parse_lr_input` is the pure parser behind the LR dialog, tested on its own.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, OptionList, Static
from textual.widgets.option_list import Option

from cockpit.figures.numbers import fmt_lr
from engine.config import LIVE_SETTINGS, MAX_LR, config_from_dict, setting_value
from engine.events import RunStarted
from engine.optim import LrChange, LrPlan, lr_change, lr_plan

MAX_FACTOR = 100.0
LIVE_REFRESH_S = 0.25  # how often a live question (ConfirmScreen(live=...)) is asked again
LR_HINT = "an LR (3e-4, 0.0003) or a factor (x2, *2, /2)"


def parse_lr_input(text: str) -> tuple[str, float]:
    """Parse what the user typed in the LR dialog.

    Returns ("set", lr) for an absolute LR or ("scale", factor) for `x2`, `*2`, `2x`, `/2`.
    Raises ValueError with a message meant for the user for anything else: not a number, not
    finite, zero or negative, an LR above MAX_LR or a factor outside /100..x100. Whether the
    result keeps the LR within MAX_LR at the run's step is the plan's to say
    (engine.optim.schedule.lr_change, as the engine decides it).
    """
    typed = text.strip()
    s = typed.lower().replace(" ", "")
    if not s:
        raise ValueError("type an LR (3e-4, 0.0003) or a factor (x2, /2)")
    op = ""
    if s[0] in "x*×":
        op, s = "mul", s[1:]
    elif s[0] in "/÷":
        op, s = "div", s[1:]
    elif len(s) > 1 and s[-1] in "x×":
        op, s = "mul", s[:-1]
    try:
        value = float(s)
    except ValueError:
        raise ValueError(f"'{typed}' is not a number (try 3e-4, 0.0003, x2 or /2)") from None
    what = "a factor" if op else "an LR"
    if not math.isfinite(value):
        raise ValueError(f"'{typed}': {what} must be a finite number")
    if value <= 0:
        raise ValueError(f"'{typed}': {what} must be greater than 0")
    if op:
        factor = value if op == "mul" else 1.0 / value
        if not 1.0 / MAX_FACTOR <= factor <= MAX_FACTOR:
            # `1e-3x` reads as the factor x0.001: say so, and how to type that LR instead
            as_lr = f"; for the LR {value:g}, type {s} alone" if value <= MAX_LR else ""
            raise ValueError(
                f"'{typed}' is the factor ×{factor:.3g}: a factor must be between "
                f"/{MAX_FACTOR:g} and x{MAX_FACTOR:g}{as_lr}"
            )
        return ("scale", factor)
    if value > MAX_LR:
        raise ValueError(f"'{typed}': {value:g} is too large: the LR must be at most {MAX_LR:g}")
    return ("set", value)


def lr_decision(text: str, plan: LrPlan | None) -> tuple[str, float, LrChange | None]:
    """What enter on `text` does at `plan`: (op, value, the engine's change when the plan is
    known). ValueError with the user's message when it is refused, by the parser or by the
    rule the engine applies (the same function: what the dialog says is what the run gets)."""
    op, value = parse_lr_input(text)
    if plan is None:
        return op, value, None
    change = lr_change("set_lr" if op == "set" else "scale_lr", value, plan)
    if isinstance(change, str):
        raise ValueError(change.removeprefix("LR change refused: "))
    return op, value, change


@dataclass(frozen=True)
class LrNow:
    """What the LR dialog shows of the run: its LR now, its multiplier, its plan at its step."""

    lr: float | None
    scale: float
    plan: LrPlan | None


class LrFollow:
    """The LR dialog's `follow`: what `read()` says of the run now (its RunStarted, step,
    multiplier and LR) as an `LrNow`, the plan made again only when the step, the multiplier or
    the config moved (it parses the config; the dialog asks a few times a second)."""

    def __init__(self, read: Callable[[], tuple[RunStarted | None, int, float, float | None]]) -> None:
        self.read = read
        self._planned: tuple[RunStarted | None, int, float] | None = None
        self._plan: LrPlan | None = None

    def __call__(self) -> LrNow:
        info, step, scale, lr = self.read()
        planned = self._planned
        if planned is None or planned[0] is not info or planned[1:] != (step, scale):
            self._planned, self._plan = (info, step, scale), run_lr_plan(info, step, scale)
        return LrNow(lr, scale, self._plan)


def run_lr_plan(info: RunStarted | None, step: int, scale: float) -> LrPlan | None:
    """The LR plan at `step` of the run `info` started (its resolved config), as the engine
    builds it; None before the run started or for a config this version cannot read."""
    if info is None:
        return None
    try:
        cfg = config_from_dict(dict(info.config), "the run's config")
    except (ValueError, TypeError, KeyError):  # ConfigError is a ValueError
        return None
    return lr_plan(step, cfg, scale)


def settings_put_back(
    now: Mapping[str, Any] | None, saved: Mapping[str, Any] | None
) -> dict[str, tuple[Any, Any]]:
    """The live settings a rollback puts back (the engine restores those its checkpoint was
    saved with): each one that differs between the run's config `now` and the config in force
    when the checkpoint was `saved`, as (now, then). {} when either is not known here."""
    if now is None or saved is None:
        return {}
    try:
        current = config_from_dict(dict(now), "the run's config")
        then = config_from_dict(dict(saved), "the checkpoint's config")
    except (ValueError, TypeError, KeyError):  # ConfigError is a ValueError
        return {}
    pairs = {key: (setting_value(current, key), setting_value(then, key)) for key in LIVE_SETTINGS}
    return {key: pair for key, pair in pairs.items() if pair[0] != pair[1]}


class PutBack:
    """`settings_put_back`, asked again only when either config changed (the rollback question
    is asked a few times a second; a config is a new object at each change)."""

    def __init__(self) -> None:
        self._asked: tuple[object, object] | None = None
        self._answer: dict[str, tuple[Any, Any]] = {}

    def __call__(
        self, now: Mapping[str, Any] | None, saved: Mapping[str, Any] | None
    ) -> dict[str, tuple[Any, Any]]:
        if self._asked is None or self._asked[0] is not now or self._asked[1] is not saved:
            self._asked, self._answer = (now, saved), settings_put_back(now, saved)
        return self._answer


class ConfirmScreen(ModalScreen[bool]):
    """A yes/no question. y/enter = yes, n/escape = no. `live()`, when given, is the question
    again as it stands now: asked a few times a second, the text kept true while it is open."""

    BINDINGS = [
        Binding("y", "answer(True)", "Yes", show=False),
        Binding("n,escape", "answer(False)", "No", show=False),
    ]

    def __init__(
        self,
        title: str,
        message: str,
        yes: str = "Yes",
        no: str = "No",
        purpose: str = "",
        danger: bool = False,
        live: Callable[[], str] | None = None,
    ) -> None:
        super().__init__(classes="dialog-screen")
        self.title_text, self.message, self.yes, self.no = title, message, yes, no
        self.purpose = purpose
        self.danger = danger
        self.live = live

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="confirm-dialog") as box:
            box.border_title = self.title_text
            yield Static(self.message, classes="dialog-message")
            with Horizontal(classes="dialog-buttons"):
                yield Button(
                    f"{self.yes} (y)", id="yes", variant="error" if self.danger else "primary"
                )
                yield Button(f"{self.no} (n)", id="no")

    def on_mount(self) -> None:
        self.query_one("#yes", Button).focus()
        if self.live is not None:
            self.set_interval(LIVE_REFRESH_S, self.refresh_message)

    def refresh_message(self) -> None:
        """The question as it stands now (`live`), redrawn only when it changed."""
        if self.live is None:
            return
        message = self.live()
        if message != self.message:
            self.message = message
            self.query_one(".dialog-message", Static).update(message)

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


@dataclass(frozen=True)
class Choice:
    """One answer of a `ChoiceScreen`: its key, its button's label and what it returns."""

    key: str
    label: str
    value: str
    variant: str = ""  # the button's variant ("primary", "error"...); "" = Textual's plain one


class ChoiceScreen(ModalScreen["str | None"]):
    """A question with several answers, each a button with its own key; escape = None."""

    BINDINGS = [Binding("escape", "choose('')", "Cancel", show=False)]

    def __init__(self, title: str, message: str, choices: Sequence[Choice], purpose: str = "") -> None:
        super().__init__(classes="dialog-screen")
        self.title_text, self.message, self.choices = title, message, tuple(choices)
        self.purpose = purpose

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="choice-dialog") as box:
            box.border_title = self.title_text
            yield Static(self.message, classes="dialog-message")
            with Horizontal(classes="dialog-buttons"):
                for choice in self.choices:
                    style = {"variant": choice.variant} if choice.variant else {}
                    yield Button(
                        f"{choice.label} ({choice.key})", id=f"choice-{choice.value}", **style
                    )

    def on_mount(self) -> None:
        self.query_one(Button).focus()

    def on_key(self, event: Any) -> None:
        for choice in self.choices:
            if event.key == choice.key:
                event.stop()
                self.dismiss(choice.value)
                return

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss((event.button.id or "").removeprefix("choice-") or None)

    def action_choose(self, value: str) -> None:
        self.dismiss(value or None)


class InputDialog(ModalScreen[Any]):
    """A dialog around one Input: focused at once (no blinking cursor: snapshots stay still),
    an error line under it (`ERROR_ID`) that enter fills and typing clears, esc cancels."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", show=False)]
    ERROR_ID = "dialog-error"

    error = ""  # the message shown after enter on invalid input

    def on_mount(self) -> None:
        inp = self.query_one(Input)
        inp.cursor_blink = False
        inp.focus()

    def show_error(self, message: str) -> None:
        label = self.query_one(f"#{self.ERROR_ID}", Label)
        label.update(Content.styled(f"✗ {message}", "bold $error") if message else "")
        self.error = message

    def action_cancel(self) -> None:
        self.dismiss(None)


class LrScreen(InputDialog):
    """Set or scale the learning rate. Returns ("set", lr), ("scale", factor) or None.

    A typed LR is the LR once warmup is over; the preview says what enter will do at the run's
    step (`plan`, engine.optim.schedule.lr_plan: None when the run's config is not known here)."""

    ERROR_ID = "lr-error"

    def __init__(
        self,
        current_lr: float | None,
        scale: float,
        plan: LrPlan | None,
        follow: Callable[[], LrNow] | None = None,
    ) -> None:
        super().__init__(classes="dialog-screen")
        self.current_lr, self.scale, self.plan = current_lr, scale, plan
        # the run's LR, multiplier and plan as they are now: asked a few times a second, so the
        # figures shown (and what enter would do) stay the run's while the dialog is open
        self.follow = follow

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="lr-dialog") as box:
            box.border_title = "Learning rate"
            box.border_subtitle = "enter apply · esc cancel"
            yield Static(self._current_line(), id="lr-current")
            warmup = Static(self._warmup_line(), id="lr-warmup")
            warmup.display = self.plan is not None and self.plan.in_warmup
            yield warmup
            yield Input(placeholder=LR_HINT, id="lr-input", select_on_focus=False)
            yield Label("", id="lr-error")
            yield Static(
                Content.styled(
                    "A new LR is the LR after warmup, kept as a multiplier on the planned "
                    "schedule; x2 or /2 scales the current multiplier. The LR never goes above "
                    f"{MAX_LR:g}.",
                    "$foreground-muted",
                ),
                id="lr-help",
            )

    def _current_line(self) -> Content:
        parts = [("now ", "$foreground-muted"), (fmt_lr(self.current_lr), "bold")]
        mult_style = "bold $warning" if abs(self.scale - 1.0) > 1e-9 else ""
        parts += [("   multiplier ", "$foreground-muted"), (f"×{self.scale:.3g}", mult_style)]
        if self.plan is not None:
            parts += [("   planned ", "$foreground-muted"), fmt_lr(self.plan.scheduled)]
        return Content.assemble(*parts)

    def _warmup_line(self) -> Content:
        plan = self.plan
        if plan is None or not plan.in_warmup:
            return Content("")
        return Content.styled(
            f"Warming up until step {plan.settled_step:,}: the LR you type is the LR "
            f"from there on (set to reach {fmt_lr(plan.settled * self.scale)} now); "
            "the ramp leads up to it.",
            "$warning",
        )

    def on_mount(self) -> None:
        super().on_mount()
        if self.follow is not None:
            self.set_interval(LIVE_REFRESH_S, self.refresh_figures)

    def refresh_figures(self) -> None:
        """The run's LR, multiplier and plan as they are now (`follow`), redrawn when changed,
        and the preview of what is typed recomputed with them."""
        if self.follow is None:
            return
        now = self.follow()
        if (now.lr, now.scale, now.plan) == (self.current_lr, self.scale, self.plan):
            return
        self.current_lr, self.scale, self.plan = now.lr, now.scale, now.plan
        self.query_one("#lr-current", Static).update(self._current_line())
        warmup = self.query_one("#lr-warmup", Static)
        warmup.update(self._warmup_line())
        warmup.display = self.plan is not None and self.plan.in_warmup
        if not self.error:  # an error shown after enter stays until typing clears it
            self._show_preview(self.query_one(Input).value)

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        try:
            op, value, change = lr_decision(event.value, self.plan)
        except ValueError as e:
            self.show_error(str(e))
            return
        if change is not None and change.unchanged:
            self.show_error(f"the LR is {fmt_lr(change.new_lr)} already: nothing to change")
            return
        self.dismiss((op, value))

    @on(Input.Changed)
    def _changed(self, event: Input.Changed) -> None:
        """Preview what enter would do; errors wait for enter (half-typed input is normal)."""
        self.error = ""
        self._show_preview(event.value)

    def _show_preview(self, text: str) -> None:
        label = self.query_one("#lr-error", Label)
        try:
            op, value, change = lr_decision(text, self.plan)
        except ValueError:
            label.update("")
            return
        label.update(Content.styled(self.preview(op, value, change), "$foreground-muted"))

    def preview(self, op: str, value: float, change: LrChange | None) -> str:
        """What enter does, in the figures the engine will apply."""
        if change is None:  # no plan here: the engine decides what the value means
            if op == "scale":
                return f"enter: LR ×{value:.3g}, multiplier ×{self.scale * value:.3g}"
            return f"enter: LR {fmt_lr(value)}"
        if change.unchanged:
            return f"enter: nothing changes (the LR is {fmt_lr(change.new_lr)} already)"
        mult = f"multiplier ×{change.scale:.3g}"
        typed = f"LR ×{value:.3g} →" if op == "scale" else "LR"
        if self.plan is not None and self.plan.in_warmup:
            return (
                f"enter: {typed} {fmt_lr(change.settled_lr)} from step {change.settled_step:,} "
                f"(warmup's end), the ramp leading there from {fmt_lr(change.new_lr)} at the "
                f"next step; {mult}"
            )
        return f"enter: {typed} {fmt_lr(change.new_lr)} from the next step, {mult}"


@dataclass(frozen=True)
class PresetRow:
    name: str
    description: str
    origin: str
    data_ok: bool
    data_note: str
    current: bool = False
    data_stand_in: bool = False  # usable, but only a stand-in for the corpus the preset wants


class PresetScreen(ModalScreen["str | None"]):
    """Every preset with its description, origin and data availability; enter chooses."""

    BINDINGS = [Binding("escape,q", "cancel", "Cancel", show=False)]

    def __init__(self, rows: Sequence[PresetRow]) -> None:
        super().__init__(classes="dialog-screen")
        self.rows = list(rows)

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="preset-dialog") as box:
            box.border_title = "Switch preset"
            box.border_subtitle = "↑↓ choose · enter select · esc cancel"
            options: list[Option | None] = []
            for r in self.rows:
                if options:
                    options.append(None)  # a separator line
                options.append(Option(self._prompt(r), id=r.name))
            if not options:
                yield Static("no presets found", classes="dialog-message")
            yield OptionList(*options, id="preset-list")

    def _prompt(self, r: PresetRow) -> Content:
        name_w = max(len(x.name) for x in self.rows)
        origin_w = max(len(x.origin) for x in self.rows)
        head: list[tuple[str, str] | str] = [(r.name.ljust(name_w), "bold")]
        head.append((f"  {r.origin.ljust(origin_w)}  ", "$foreground-muted"))
        if r.data_ok and r.data_stand_in:
            head.append((f"⚠ {r.data_note or 'stand-in corpus'}", "$warning"))
        elif r.data_ok:
            head.append(("✓ data ready", "$success"))
        else:
            head.append((f"✗ {r.data_note or 'data missing'}", "$warning"))
        if r.current:
            head.append(("  ● current", "bold $accent"))
        desc = r.description or "(no description)"
        return Content.assemble(*head, "\n", (desc, "$foreground-muted"))

    def on_mount(self) -> None:
        ol = self.query_one(OptionList)
        ol.focus()
        for r in self.rows:
            if r.current:
                ol.highlighted = ol.get_option_index(r.name)
                break

    @on(OptionList.OptionSelected)
    def _selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        self.dismiss(None)


HELP_NOTE = (
    "Commands apply at the next step. Notifications confirm them; the status line shows pause "
    "and resume."
)


class HelpScreen(ModalScreen[None]):
    """Every key in two columns (a long description wraps in its own column), then a note."""

    BINDINGS = [Binding("escape,q,question_mark,enter", "close", "Close", show=False)]

    def __init__(self, rows: Sequence[tuple[str, str]]) -> None:
        super().__init__(classes="dialog-screen")
        self.rows = rows  # (key, what it does): the app's key table, the keys that work now

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog", id="help-dialog") as box:
            box.border_title = "Keys"
            box.border_subtitle = "esc close"
            with Grid(id="help-keys"):
                for key, description in self.rows:
                    yield Static(key, classes="help-key")
                    yield Static(description, classes="help-description")
            yield Static(Content.styled(HELP_NOTE, "$foreground-muted"), id="help-note")

    def action_close(self) -> None:
        self.dismiss(None)
