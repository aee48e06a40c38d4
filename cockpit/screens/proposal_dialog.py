"""The approval dialog of a research search: a proposal (an agent's, before its experiment
starts) as a diff against the best configuration so far (`setting: old -> new`, with the
setting's help text and range), the proposer's reason, and three keys: `a` accept, `e` edit
the values (checked as the search checks every change; a bad one refused in one line here),
`r` reject with a note the proposer reads in its next prompt. `q` stops the search, as on the
main screen. Dismissed with a `Decision`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Input, Label, Static

from cockpit.research.proposals import ChangeLine, Decision, parse_edit
from engine.config import ConfigError

CHOOSE_KEYS = "a accept · e edit · r reject · q stop the search"


@dataclass(frozen=True)
class ProposalView:
    """What the dialog shows of a proposal, and how it checks an edit."""

    title: str  # e.g. "research lr-search: exp 4, on top of 003-optim.lr=0.004 (val bpb 2.4100)"
    proposed_by: str
    reason: str
    lines: Sequence[ChangeLine]
    change_text: str  # the change as --set spells it: the edit starts from it
    check: Callable[[dict[str, object]], str | None]  # why an edited change cannot be tried


def diff_text(lines: Sequence[ChangeLine]) -> Text:
    """`key: old -> new`, then the setting's help and range, one setting after another."""
    out = Text()
    width = max((len(line.key) for line in lines), default=0)
    for i, line in enumerate(lines):
        if i:
            out.append("\n")
        out.append(f"{line.key:<{width}}  ", style="bold")
        out.append(line.old, style="red")
        out.append(" -> ")
        out.append(line.new, style="bold green")
        about = " ".join(p for p in (line.help, line.allowed and f"({line.allowed})") if p)
        if about:
            out.append(f"\n{'':<{width}}  {about}", style="dim")
    return out


class ProposalDialog(ModalScreen[Decision]):
    """Accept, edit or reject a proposal (see the module's docstring)."""

    DEFAULT_CSS = """
    #proposal-dialog { width: 84; }
    #proposal-input { width: 1fr; }
    #proposal-error { height: auto; width: 1fr; }
    #proposal-prompt { margin-top: 1; }
    """

    AUTO_FOCUS = None  # the three keys are the screen's: the input has the focus only when shown

    BINDINGS = [
        Binding("a", "accept", "Accept", show=False),
        Binding("e", "edit", "Edit", show=False),
        Binding("r", "reject", "Reject", show=False),
        Binding("q", "stop", "Stop the search", show=False),
        Binding("escape", "back", "Back", show=False),
    ]

    def __init__(self, view: ProposalView) -> None:
        super().__init__(classes="dialog-screen")
        self.view = view
        self.mode = "choose"  # or "edit", "reject": what the input line is for
        self.error = ""

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="proposal-dialog") as box:
            box.border_title = f"Proposal from {self.view.proposed_by}"
            box.border_subtitle = CHOOSE_KEYS
            yield Static(Text(self.view.title), id="proposal-title", classes="dialog-message")
            yield Static(diff_text(self.view.lines), id="proposal-diff", classes="dialog-message")
            reason = self.view.reason or "(no reason given)"
            yield Static(Text.assemble(("Reason: ", "bold"), reason), id="proposal-reason")
            yield Label("", id="proposal-prompt")
            yield Input(id="proposal-input", select_on_focus=False)
            yield Label("", id="proposal-error")

    def on_mount(self) -> None:
        self._show_mode("choose")

    def _show_mode(self, mode: str) -> None:
        if not self.query("#proposal-input"):  # a key before it is composed, or once it is gone
            return
        self.mode = mode
        box = self.query_one("#proposal-dialog", Vertical)
        prompt = self.query_one("#proposal-prompt", Label)
        entry = self.query_one("#proposal-input", Input)
        entry.cursor_blink = False
        self.show_error("")
        entry.display = prompt.display = mode != "choose"
        entry.disabled = mode == "choose"  # no focus for it, so the three keys reach the screen
        if mode == "choose":
            box.border_subtitle = CHOOSE_KEYS
            self.set_focus(None)
            return
        if mode == "edit":
            prompt.update("The change, as --set spells it (KEY=VALUE, several with spaces):")
            entry.value = self.view.change_text
            entry.placeholder = "optim.lr=0.002"
            box.border_subtitle = "enter try this instead · esc back"
        else:
            prompt.update("Why not? The agent reads this note in its next prompt:")
            entry.value = ""
            entry.placeholder = "e.g. keep the LR below 0.01"
            box.border_subtitle = "enter reject · esc back"
        entry.cursor_position = len(entry.value)
        entry.focus()

    def show_error(self, message: str) -> None:
        self.error = message
        label = self.query_one("#proposal-error", Label)
        label.update(Content.styled(f"✗ {message}", "bold $error") if message else "")

    def on_input_changed(self, _event: Input.Changed) -> None:
        if self.error:
            self.show_error("")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if self.mode == "reject":
            self.dismiss(Decision("reject", note=event.value.strip()))
            return
        try:
            change = parse_edit(event.value)
        except ConfigError as e:
            self.show_error(str(e))
            return
        why = self.view.check(change)
        if why is not None:
            self.show_error(why)
            return
        self.dismiss(Decision("edit", change=change))

    def action_accept(self) -> None:
        if self.mode == "choose":
            self.dismiss(Decision("accept"))

    def action_edit(self) -> None:
        if self.mode == "choose":
            self._show_mode("edit")

    def action_reject(self) -> None:
        if self.mode == "choose":
            self._show_mode("reject")

    def action_back(self) -> None:
        if self.mode != "choose":
            self._show_mode("choose")

    async def action_stop(self) -> None:
        if self.mode == "choose":
            await self.app.run_action("request_quit")
