"""Modal screens: confirmation, choices, an input dialog, the preset menu, help; and a dialog's
message that stays true while it is open (`LiveMessage`). The LR dialog is lr_dialog.py."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.reactive import reactive
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, OptionList, Static
from textual.widgets.option_list import Option

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
