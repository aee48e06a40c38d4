"""The approval dialog of a research search on its own (no engine): the change shown as a diff
against the best configuration with each setting's help and range, the reason, and its keys:
accept, edit (a bad value refused in one line in the dialog, as the search's own check says
it; a good one taken), reject with a note."""

from __future__ import annotations

from typing import Any

from pilot import run_pilot, wait_for
from textual.app import App
from textual.pilot import Pilot
from textual.widgets import Input, Label, Static

from cockpit.research import Decision, change_lines, change_text, check_change
from cockpit.screens.proposal_dialog import ProposalDialog, ProposalView

BASE = ["optim.lr=0.003"]


def view(change: dict[str, Any]) -> ProposalView:
    return ProposalView(
        title="research s: exp 3, on top of the baseline",
        proposed_by="llm:scripted",
        reason="the loss fell fast at 0.003",
        lines=change_lines("tiny", change, BASE),
        change_text=change_text(change),
        check=lambda edited: check_change("tiny", edited, BASE),
    )


class Host(App[None]):
    def __init__(self, shown: ProposalView) -> None:
        super().__init__()
        self.shown = shown
        self.answers: list[Decision | None] = []

    def on_mount(self) -> None:
        self.push_screen(ProposalDialog(self.shown), self.answers.append)


def answer(keys: list[str], change: dict[str, Any], check: Any = None) -> Decision | None:
    app = Host(view(change))

    async def scenario(pilot: Pilot) -> None:
        await wait_for(pilot, lambda: isinstance(app.screen, ProposalDialog))
        for key in keys:
            if key.startswith("check:"):
                check(app.screen)
            elif len(key) > 1 and key not in ("enter", "escape", "backspace", "ctrl+u"):
                await pilot.press(*key)  # typed
            else:
                await pilot.press(key)
            await pilot.pause()
        await wait_for(pilot, lambda: app.answers)

    run_pilot(app, scenario, size=(100, 30))
    (decision,) = app.answers
    return decision


def text_of(screen: Any, selector: str) -> str:
    widget = screen.query_one(selector)
    if isinstance(widget, (Static, Label)):
        return str(widget.render())
    return str(widget.value)


def test_the_dialog_shows_the_diff_with_help_and_range_and_a_accepts():
    seen: dict[str, str] = {}

    def look(screen: Any) -> None:
        seen["diff"] = text_of(screen, "#proposal-diff")
        seen["reason"] = text_of(screen, "#proposal-reason")
        seen["keys"] = screen.query_one("#proposal-dialog").border_subtitle

    change = {"optim.lr": 0.004, "model.norm": "rmsnorm"}
    assert answer(["check:", "a"], change, look) == Decision("accept")
    assert "optim.lr    0.003 -> 0.004" in seen["diff"]
    assert "peak learning rate (number, > 0, <= 10)" in seen["diff"]
    assert "model.norm  layernorm -> rmsnorm" in seen["diff"]
    assert "one of layernorm, rmsnorm" in seen["diff"]
    assert seen["reason"] == "Reason: the loss fell fast at 0.003"
    assert seen["keys"] == "a accept · e edit · r reject · q stop the search"


def test_an_edit_with_a_bad_value_is_refused_in_one_line_then_a_good_one_is_taken():
    errors: list[str] = []

    def look(screen: Any) -> None:
        assert isinstance(screen, ProposalDialog)  # still open: the bad value was refused
        assert text_of(screen, "#proposal-input") == "optim.lr=-1"
        errors.append(screen.error)

    def started(screen: Any) -> None:
        assert text_of(screen, "#proposal-input") == "optim.lr=0.004"  # the proposal, to edit

    got = answer(
        ["e", "check:", "ctrl+u", "optim.lr=-1", "enter", "check:", "ctrl+u", "optim.lr=0.005",
         "enter"],
        {"optim.lr": 0.004},
        lambda screen: (started if not errors and screen.query_one(Input).value.endswith("0.004")
                        else look)(screen),
    )  # fmt: skip
    assert errors == ["optim.lr: expected a value > 0.0, got -1.0"]
    assert got == Decision("edit", change={"optim.lr": 0.005})


def test_an_edit_that_changes_nothing_or_is_no_setting_is_refused_there():
    said: list[str] = []

    def look(screen: Any) -> None:
        said.append(screen.error)

    got = answer(
        ["e", "ctrl+u", "optim.lr=0.003", "enter", "check:", "ctrl+u", "optim.lrr=1", "enter",
         "check:", "escape", "a"],
        {"optim.lr": 0.004},
        look,
    )  # fmt: skip
    assert said == [
        "optim.lr=0.003: changes nothing, the configuration has it already",
        "optim: unknown key 'lrr' (did you mean 'lr'?)",
    ]
    assert got == Decision("accept")  # esc went back to the three keys


def test_r_rejects_with_a_note():
    got = answer(["r", "keep the LR below 0.004", "enter"], {"optim.lr": 0.004})
    assert got == Decision("reject", note="keep the LR below 0.004")
