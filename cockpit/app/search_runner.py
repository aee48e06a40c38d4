"""A research search run for the app: the search (cockpit.research.Search) on a thread of its
own, wired so that the app trains each of its experiments' runs and its person answers an agent's
proposals (`open_search`), and the messages that thread posts to the app (cockpit.app.researching).
The thread never touches the screen: it posts messages, and waits for the app's answers.
Proposers (an LLM's HTTP calls too) run on it, never on the UI thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from textual.message import Message

from cockpit.app.cockpit_app import CockpitApp
from cockpit.research.proposals import (
    Decision,
    Proposal,
    ResearchContext,
    change_lines,
    change_text,
    check_change,
)
from cockpit.research.search import BASELINE, Search, SearchSpec, Stopped
from cockpit.screens.proposal_dialog import ProposalView
from engine.config import ConfigError
from engine.contract import EngineHandle
from engine.events import RunState

WAIT_S = 0.2  # how often the search's thread looks whether the app has closed while it waits

# What the search's thread is told to build an experiment's engine with: (run_dir, overrides,
# resume) -> the engine, not started, or None when the run has nothing left to train.
BuildRun = Callable[[Path, list[str], bool], "EngineHandle | None"]


@dataclass
class Answer:
    """A reply the search's thread waits for from the app."""

    ready: threading.Event = field(default_factory=threading.Event)
    value: Any = None

    def give(self, value: Any) -> None:
        self.value = value
        self.ready.set()


class StartExperiment(Message):
    """From the search's thread: train this engine on the main screen, say when it has ended."""

    def __init__(self, title: str, engine: EngineHandle, ended: Answer) -> None:
        super().__init__()
        self.title, self.engine, self.ended = title, engine, ended


class AskPerson(Message):
    """From the search's thread: put this proposal to the person, answer with a Decision."""

    def __init__(self, view: ProposalView, answer: Answer) -> None:
        super().__init__()
        self.view, self.answer = view, answer


class SearchSaid(Message):
    """From the search's thread: one line of progress (an experiment started, its row logged)."""

    def __init__(self, line: str) -> None:
        super().__init__()
        self.line = line


class SearchEnded(Message):
    """From the search's thread: the search has ended (see `SearchRunner.outcome`)."""


class SearchRunner:
    """A Search on its own thread, training its runs in the app (`train_run`) and asking the
    app's person about proposals (`ask`). `outcome` once it has ended: "done", "stopped",
    "refused" (a ConfigError: `message` says why) or "failed" (the baseline, or the thread)."""

    def __init__(self, search: Search, build: BuildRun, planned: int | None = None) -> None:
        self.search = search
        self.build = build
        self.planned = planned  # the experiments a changes file holds (the title's /N), if known
        self.app: CockpitApp | None = None
        self.closed = threading.Event()  # the app has gone (or the search was left)
        self.left = False  # another run was started in the app: the search stopped for it
        self.thread: threading.Thread | None = None
        self.outcome: str | None = None
        self.message = ""
        self.state: Any = None  # the search's State at its end
        self.current_engine: EngineHandle | None = None
        self.title = f"research {search.name}"

    # the app's side -----------------------------------------------------------------------
    def start(self, app: CockpitApp) -> None:
        self.app = app
        # a daemon: an agent's HTTP call cannot be interrupted, and must not keep the process
        # alive after the app closed (the search checks for a stop before it uses the answer)
        self.thread = threading.Thread(target=self._run, name="research-search", daemon=True)
        self.thread.start()

    def close(self) -> None:
        """The app is closing: whatever the thread waits for will not come."""
        self.closed.set()

    def stop_requested(self) -> bool:
        app = self.app
        return self.closed.is_set() or (app is not None and app.session.quitting)

    def join(self, timeout: float) -> None:
        """Wait (at most `timeout` s) for the thread to end: a row it is writing is written."""
        if self.thread is not None:
            self.thread.join(timeout)

    # the search's thread ------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self.state = self.search.run()
            self.outcome = "done"
        except Stopped:
            self.outcome = "stopped"
        except ConfigError as e:
            self.outcome = "failed" if "baseline measured" in str(e) else "refused"
            self.message = str(e)
        except Exception as e:  # noqa: BLE001 - the thread's boundary: said in the app, not lost
            self.outcome = "failed"
            self.message = f"{type(e).__name__}: {e}"
        self._post(SearchEnded())

    def _post(self, message: Message) -> bool:
        app = self.app
        if app is None or self.closed.is_set():
            return False
        try:
            return bool(app.post_message(message))  # thread-safe, never blocks
        except RuntimeError:  # the app's loop has closed
            return False

    def _wait(self, answer: Answer) -> Any:
        """The app's answer; Stopped when the app closes first."""
        while not answer.ready.wait(WAIT_S):
            if self.closed.is_set():
                raise Stopped
        return answer.value

    def say(self, line: str) -> None:
        self._post(SearchSaid(line))

    def experiment_title(self) -> str:
        rid, change = self.search.on_way or ("", "")
        if rid.startswith(BASELINE + "-"):
            number = rid.removeprefix(BASELINE + "-").split("-")[0]
            return f"{self.title}: baseline {number}/{self.search.spec.repeats}"
        number = rid.split("-", 1)[0].lstrip("0") or "0"
        total = f"/{self.planned}" if self.planned else ""
        return f"{self.title}: exp {number}{total} {change}".rstrip()

    def train_run(self, run_dir: Path, overrides: list[str], resume: bool) -> str:
        """Search.train_run: build the run here, train it in the app, return its final state
        (stopped when the app closed or another run took its place)."""
        if self.stop_requested():
            return RunState.STOPPED
        engine = self.build(run_dir, overrides, resume)
        if engine is None:
            return RunState.FINISHED  # stopped at its last step: nothing left to train
        ended = Answer()
        self.current_engine = engine
        if not self._post(StartExperiment(self.experiment_title(), engine, ended)):
            return RunState.STOPPED
        try:
            return str(self._wait(ended))
        except Stopped:
            return RunState.STOPPED

    def ask(self, proposal: Proposal, context: ResearchContext) -> Decision:
        """Approving's question: the proposal put to the person in the app's dialog."""
        spec = self.search.spec
        base = [*spec.common_settings(), *(f"{k}={v}" for k, v in context.best.items())]
        best = self._best_line(context)
        number = sum(not str(r.get("id", "")).startswith(BASELINE + "-") for r in context.log_rows)
        view = ProposalView(
            title=f"{self.title}: exp {number + 1}, on top of {best}",
            proposed_by=proposal.proposed_by,
            reason=proposal.reason,
            lines=change_lines(spec.preset, proposal.change, base, spec.presets_dirs),
            change_text=change_text(proposal.change),
            check=lambda change: check_change(spec.preset, change, base, spec.presets_dirs),
        )
        answer = Answer()
        if not self._post(AskPerson(view, answer)):
            raise Stopped
        self.say(f"{proposal.proposed_by} proposes {change_text(proposal.change)}: waiting for you")
        decision = self._wait(answer)
        if decision is None:
            raise Stopped
        return decision

    @staticmethod
    def _best_line(context: ResearchContext) -> str:
        kept = [
            r
            for r in context.log_rows
            if r.get("status") == "kept" and not str(r.get("id", "")).startswith(BASELINE + "-")
        ]
        if kept:
            return f"the best so far, {kept[-1]['id']} (val bpb {kept[-1]['val_bpb']:.4f})"
        return "the baseline (the preset as the search sets it)"


# What the search's proposer is made with: (ask, say) -> (the proposer, what it is in words);
# `ask(proposal, context) -> Decision` puts a proposal to the app's person, `say(line)` shows
# the proposer's lines in the app.
ProposerFor = Callable[
    [Callable[[Proposal, ResearchContext], Decision], Callable[[str], None]], tuple[Any, str]
]


def open_search(
    spec: SearchSpec,
    root: Path,
    proposer_for: ProposerFor,
    build: BuildRun,
    experiments: int | None,
) -> tuple[SearchRunner, str]:
    """The search `spec` describes, under the runs root `root`, for the app: opened (its log
    read back), its runs built by `build` and trained in the app, its proposer asking the app's
    person and saying its lines there; with what its proposer is, in words. `experiments`: the
    --experiments bound, if any. ConfigError (one line) or OSError when it cannot start."""
    runner: Any = None  # made once the search is: the search's calls go to it
    proposer, proposing = proposer_for(lambda p, c: runner.ask(p, c), lambda line: runner.say(line))
    search = Search(
        spec,
        root,
        proposer,
        train_run=lambda run_dir, overrides, resume: runner.train_run(run_dir, overrides, resume),
        stop_requested=lambda: runner.stop_requested(),
        say=lambda line: runner.say(line),
    )
    search.open()
    runner = SearchRunner(search, build=build, planned=planned_experiments(proposer, experiments))
    return runner, proposing


def planned_experiments(proposer: Any, experiments: int | None) -> int | None:
    """How many experiments the search will try, when known (a changes file's candidates, the
    --experiments bound): the app's titles say "exp 3/6"."""
    from cockpit.research import ChangesFileProposer
    from cockpit.research.llm_proposer import Guarded

    inner = proposer.inner if isinstance(proposer, Guarded) else proposer
    planned = len(inner.proposals) if isinstance(inner, ChangesFileProposer) else None
    if experiments is not None:
        planned = min(planned, experiments) if planned is not None else experiments
    return planned
