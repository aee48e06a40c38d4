"""The help screen: every key that does something now, with what it does."""

from __future__ import annotations

from collections.abc import Sequence

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Static

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
