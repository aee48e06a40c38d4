"""The "cool down now" dialog: the WSD decay started at the next step, its length typed in
steps (empty: the configured fraction), the new schedule previewed on the LR panel at once and
again as the run goes on while the dialog is open."""

from __future__ import annotations

from collections.abc import Callable

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import Input, Label, Static

from cockpit.figures.live_decisions import cooldown_span, decide_cooldown, shown_refusal
from cockpit.screens.dialogs import InputDialog
from cockpit.screens.live_settings import SchedulePreview
from engine.config import COOLDOWN, RunConfig, wsd_decay_start
from engine.optim import planned_curve


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
            self.show_error(shown_refusal(answer))
            return
        self.app.post_message(SchedulePreview(None))
        self.dismiss({COOLDOWN: answer[0]})

    def action_cancel(self) -> None:
        self.app.post_message(SchedulePreview(None))
        self.dismiss(None)
