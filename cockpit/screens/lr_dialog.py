"""The learning-rate dialog (`l`): the pure parser of what is typed (`parse_lr_input`), the rule
that says what enter will do (`lr_decision`, the engine's own), and the screen that follows the
run's LR while it is open."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.widgets import Input, Label, Static

from cockpit.figures.numbers import fmt_lr
from cockpit.screens.dialogs import LIVE_REFRESH_S, InputDialog
from engine.config import MAX_LR, config_from_dict
from engine.events import RunStarted
from engine.optim import LrChange, LrPlan, lr_change, lr_plan

MAX_FACTOR = 100.0
LR_HINT = "an LR (3e-4, 0.0003) or a factor (x2, *2, /2)"


def parse_lr_input(text: str) -> tuple[str, float]:
    """What the user typed in the LR dialog: ("set", lr), or ("scale", factor) for `x2`, `*2`,
    `2x`, `/2`. Anything else (not a finite number > 0, an LR above MAX_LR, a factor outside
    /100..x100) raises ValueError with a message for the user; whether the LR stays within
    MAX_LR at the run's step is the plan's to say (engine.optim.schedule.lr_change)."""
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
