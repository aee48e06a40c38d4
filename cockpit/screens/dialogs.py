"""The app's plain dialogs: a yes/no question, a question with several answers, a dialog around
one input; and a dialog's message that stays true while it is open (`LiveMessage`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.reactive import reactive
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

LIVE_REFRESH_S = 0.25  # how often a dialog's live text (LiveMessage, the LR dialog) is asked again


class LiveMessage(Static):
    """A dialog's message that stays true while the dialog is open: `live()`, when given, is
    the message as it stands now (it names the run's step, which moves), asked a few times a
    second; the text is redrawn only when it changed."""

    DEFAULT_CLASSES = "dialog-message"

    message: reactive[str] = reactive("", init=False)

    def __init__(self, message: str, live: Callable[[], str] | None = None) -> None:
        super().__init__(message)
        self.set_reactive(LiveMessage.message, message)
        self.live = live

    def on_mount(self) -> None:
        if self.live is not None:
            self.set_interval(LIVE_REFRESH_S, self.ask_live)

    def ask_live(self) -> None:
        if self.live is not None:
            self.message = self.live()

    def watch_message(self, message: str) -> None:
        self.update(message)


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
        self.title_text, self.yes, self.no = title, yes, no
        self.shown = LiveMessage(message, live)
        self.purpose = purpose
        self.danger = danger

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="confirm-dialog") as box:
            box.border_title = self.title_text
            yield self.shown
            with Horizontal(classes="dialog-buttons"):
                yield Button(
                    f"{self.yes} (y)", id="yes", variant="error" if self.danger else "primary"
                )
                yield Button(f"{self.no} (n)", id="no")

    @property
    def message(self) -> str:
        """The question as it is shown now."""
        return self.shown.message

    def on_mount(self) -> None:
        self.query_one("#yes", Button).focus()

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

    def __init__(
        self, title: str, message: str, choices: Sequence[Choice], purpose: str = ""
    ) -> None:
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
