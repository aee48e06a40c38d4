"""The app of `cockpit research run`: the keep-or-discard search's experiments' runs trained on
the usual panels, titled with the search and the experiment ("research lr-search: exp 4/6
optim.lr=0.002"), and an agent's proposals put to a person in the approval dialog before their
experiment starts.

The search (cockpit.research.Search) runs as it runs headless, on a thread of its own
(cockpit.app.search_runner); what differs is how it trains a run (the app starts it and the
search's thread waits for it to end) and, when a person approves, its proposer (`Approving`,
asking through the dialog). `q` checkpoints and stops the run on its way (or ends the search
between experiments); what is done is in the log, and the same command again continues.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual import on
from textual.binding import Binding

from cockpit.app.cockpit_app import CockpitApp
from cockpit.app.notifications import Notice
from cockpit.app.search_runner import (
    Answer,
    AskPerson,
    SearchEnded,
    SearchRunner,
    SearchSaid,
    StartExperiment,
)
from cockpit.research.proposals import Decision
from cockpit.research.search import BASELINE
from cockpit.screens.dialogs import ConfirmScreen
from cockpit.screens.proposal_dialog import ProposalDialog
from engine.contract import EngineHandle
from engine.events import RunStarted, RunState


class ResearchApp(CockpitApp):
    """CockpitApp driving a research search (see the module's docstring)."""

    BINDINGS = [Binding("R", "research_log", "Research log")]

    def help_extras(self) -> list[tuple[str, str]]:
        return [("R", "this search's research log: every experiment, the best val bpb so far")]

    def __init__(
        self, *args: Any, runner: SearchRunner, runs_root: str = "runs", **kwargs: Any
    ) -> None:
        super().__init__(*args, runs_root=runs_root, **kwargs)
        self.runner = runner
        self.runner_started = False
        self.experiment: tuple[str, EngineHandle, Answer] | None = None  # the run on its way
        self.search_label = runner.title
        self.dialog: ProposalDialog | None = None
        self.last_word = ""  # the proposer's last line (an agent out of reach, a guard reached)

    # the search's runs ---------------------------------------------------------------------
    def start_run(self, preset: str, make: Callable[[], EngineHandle] | None = None) -> None:
        if not self.runner_started:  # the app's first run is the search's, once it has one
            self.runner_started = True
            self.session.preset = self.search_label
            self.session.status_note = f"{self.search_label}: starting..."
            self.main_screen.show_no_run(
                f"{self.search_label}: its first experiment is on its way",
                f"{self.search_label}: its first experiment is on its way; R: the research log",
            )
            self.refresh_status()
            self.runner.start(self)
            return
        self.leave_search()  # another run (p, n, f, r, open): the search's go through super()
        super().start_run(preset, make)

    def _ours(self) -> bool:
        trainer = self.session.trainer
        return self.experiment is not None and trainer is self.experiment[1]

    @on(StartExperiment)
    def start_experiment(self, message: StartExperiment) -> None:
        if self.session.quitting or self.runner.left or self.session.engine_running:
            message.ended.give(RunState.STOPPED)  # the search is over here: it stops
            return
        self.search_label = message.title
        self.experiment = (message.title, message.engine, message.ended)
        engine = message.engine
        super().start_run(message.title, lambda: engine)
        if self.session.trainer is not engine:  # it could not start: the search records it
            message.ended.give(RunState.FAILED)

    def retitle(self, ev: RunStarted) -> None:
        super().retitle(ev)
        if self._ours():
            self.session.preset = self.search_label  # the status line's first words
            self.sub_title = self.search_label
            self.refresh_status()

    def engine_finished(self) -> None:
        if self._ours() and self.experiment is not None:
            ended = self.experiment[2]
            if self.session.pending_preset is not None and not self.session.quitting:
                self.leave_search()  # another run picked: the one on its way is stopped for it
            ended.give(self.session.state)
        super().engine_finished()

    def leave_search(self) -> None:
        """Another run takes the screen: the search stops here (a rerun continues it)."""
        runner = self.runner
        if runner.left or runner.outcome is not None or not self.runner_started:
            return
        runner.left = True
        runner.close()
        self.notify(
            f"{self.stopped_note()} · the run picked is not part of it",
            title="Research stopped",
            severity="warning",
            timeout=15,
        )

    def leaving_series_note(self) -> str:
        if self.runner.outcome is not None or self.runner.left:
            return ""
        return (
            "This stops the research search here; the same `cockpit research run` command "
            "continues it later (every experiment done is in its log)."
        )

    def stopped_note(self) -> str:
        return (
            f"{self.runner.title} stopped: every experiment done is in its log; the same command "
            "continues it (the run on its way resumes)"
        )

    # the search's messages ----------------------------------------------------------------
    @on(AskPerson)
    def ask_person(self, message: AskPerson) -> None:
        if self.session.quitting:
            message.answer.give(None)
            return
        self.dialog = ProposalDialog(message.view)

        def answered(decision: Decision | None) -> None:
            self.dialog = None
            message.answer.give(decision)

        self.push_screen(self.dialog, answered)
        # a desktop notification (and the bell, if asked for): the search waits for a person
        self.notifier.notify(Notice("cockpit research", f"{message.view.title}: a proposal waits"))

    @on(SearchSaid)
    def search_said(self, message: SearchSaid) -> None:
        if message.line.startswith(("agent:", "research:")):  # the proposer's own: why it stops
            self.last_word = message.line
            self.notify(message.line, title="Research", severity="warning", timeout=15)
        if not self.session.engine_running:
            self.session.status_note = f"{self.runner.title}: {message.line}"
            self.refresh_status()
        if any(
            f": {s}" in message.line
            for s in ("kept", "discarded", "crashed", "refused", "rejected")
        ):
            self.notify(message.line, title="Research", timeout=6)
        self.reread_research()

    @on(SearchEnded)
    def search_ended(self) -> None:
        runner = self.runner
        self.reread_research()
        if runner.outcome == "done" and runner.state is not None:
            state = runner.state
            kept = [
                r for r in state.rows if r.status == "kept" and not r.id.startswith(BASELINE + "-")
            ]
            note = (
                f"{runner.title} done: {len(state.rows)} experiments, {len(kept)} kept; best val "
                f"bpb {state.best_bpb:.4f} ({state.best_id})"
            )
            self.session.status_note = f"✓ {note} · R: the research log · q: quit"
            self.notify(note, title="Research done", timeout=10)
        elif runner.outcome == "stopped":
            if not self.session.quitting and not runner.left:
                why = f"{self.last_word} · " if self.last_word else ""
                self.session.status_note = f"{why}{self.stopped_note()} · q: quit"
        else:
            self.session.status_note = f"✗ {runner.title}: {runner.message} · q: quit"
            self.notify(runner.message, title="Research stopped", severity="error", timeout=15)
        self.refresh_status()

    def reread_research(self) -> None:
        """The research screen, when open, shows the rows landed since."""
        from cockpit.screens.research_screen import ResearchScreen

        for screen in self.screen_stack:
            if isinstance(screen, ResearchScreen):
                screen.reread()

    def runs_chosen(self, choice: Any) -> None:
        """The runs (or research) screen's choice; opening another run while the search goes on
        stops it, so it is asked first (the other ways to another run ask already)."""
        note = self.leaving_series_note()
        if choice is None or choice.action != "open" or not note or not choice.run_dirs:
            super().runs_chosen(choice)
            return
        name = Path(choice.run_dirs[0]).name
        self.push_screen(
            ConfirmScreen(
                "Open run", f"Open {name}?\n\n{note}", yes="Open", no="Cancel", purpose="switch"
            ),
            lambda yes: super(ResearchApp, self).runs_chosen(choice) if yes else None,
        )

    def action_research_log(self) -> None:
        """`R`: this search's research log (its table and running best), live as rows land."""
        from cockpit.screens.research_screen import ResearchScreen

        self.push_screen(
            ResearchScreen(Path(self.runs_root), self.runner.search.name), self.runs_chosen
        )

    def exit(self, *args: Any, **kwargs: Any) -> None:
        self.runner.close()
        super().exit(*args, **kwargs)
