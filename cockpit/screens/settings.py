"""The dialog that asks what a new run changes: `--set` settings, and for a branch its checkpoint.

Used when the app resumes a finished run (to train on, it needs a higher `train.max_steps`) and
when it forks a run from one of its checkpoints. Each setting is checked as `--set` checks it
(`engine.config.loading.parse_override`), and by the caller's `check` (a branch's settings as its resume
checks them), before the dialog closes: a bad one is refused in one line, the dialog open.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Input, Label, Select

from cockpit.screens.dialogs import InputDialog, LiveMessage
from engine.config import ConfigError, parse_override


@dataclass(frozen=True)
class Settings:
    """What the user asked for: the checkpoint to start from (None: no choice offered) and the
    settings to change, each one `--set`'s KEY=VALUE."""

    checkpoint: str | None
    overrides: list[str]


def parse_settings(text: str) -> list[str]:
    """'optim.lr=1e-4 train.max_steps=5000' -> each KEY=VALUE, checked; ValueError says which
    one is wrong and why (quotes group a value with spaces, as in a shell)."""
    try:
        items = shlex.split(text)
    except ValueError as e:
        raise ValueError(f"{e}: close the quote") from None
    for item in items:
        try:
            parse_override(item)
        except ConfigError as e:
            raise ValueError(str(e).replace("--set ", "")) from None
    return items


class SettingsScreen(InputDialog):
    """Asks for settings (and a checkpoint when `checkpoints` are offered, newest first).
    Returns `Settings`, or None when cancelled."""

    ERROR_ID = "settings-error"

    def __init__(
        self,
        title: str,
        message: str,
        initial: str = "",
        checkpoints: Sequence[str] = (),
        required: bool = False,
        check: Callable[[Settings], str | None] | None = None,
        live: Callable[[], str] | None = None,
    ) -> None:
        super().__init__(classes="dialog-screen")
        self.title_text, self.initial = title, initial
        self.shown = LiveMessage(message, live)
        self.checkpoints = list(checkpoints)
        self.required = required  # enter with nothing to change is refused
        # why the run would refuse these settings (one line), or None: the dialog stays open
        self.check = check

    @property
    def message(self) -> str:
        """The message as it is shown now."""
        return self.shown.message

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="settings-dialog") as box:
            box.border_title = self.title_text
            box.border_subtitle = "enter start · esc cancel"
            yield self.shown
            if self.checkpoints:
                yield Select(
                    [(name, name) for name in self.checkpoints],
                    value=self.checkpoints[0],
                    allow_blank=False,
                    id="settings-checkpoint",
                )
            yield Input(
                self.initial,
                placeholder="optim.lr=1e-4 train.max_steps=5000",
                id="settings-input",
                select_on_focus=False,
            )
            yield Label("", id="settings-error")

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        try:
            overrides = parse_settings(event.value)
        except ValueError as e:
            self.show_error(str(e))
            return
        if self.required and not overrides:
            self.show_error("nothing to change: type a setting, e.g. optim.lr=1e-4")
            return
        checkpoint = None
        if self.checkpoints:
            checkpoint = str(self.query_one("#settings-checkpoint", Select).value)
        settings = Settings(checkpoint, overrides)
        refused = self.check(settings) if self.check is not None else None
        if refused:
            self.show_error(refused)
            return
        self.dismiss(settings)

    @on(Input.Changed)
    def _changed(self, _event: Input.Changed) -> None:
        if self.error:
            self.show_error("")  # half-typed input is normal: errors wait for enter
