"""`cockpit research run` in the app, with the real engine on a tiny model and a real chat
completions server on 127.0.0.1: an agent's proposal waits in the approval dialog before its
experiment starts; a rejection is logged with its note and the note is in the agent's next
prompt; an edit is checked (a bad value refused in the dialog) and trained; each experiment's run
is on the panels titled with the search and the experiment. `q` mid-experiment checkpoints the
run and the same command again (headless here) continues it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from command_here import cockpit_here
from pilot import REAL_SIZE, Toasts, run_pilot, status_text, wait_for_engine
from test_llm_proposer import ChatServer, baselines_logged
from textual.pilot import Pilot
from tiny import TINY_MODEL, set_args

from cockpit.ablation.research_log import log_dir, read_log
from cockpit.app.researching import ResearchApp
from cockpit.cli import build_parser
from cockpit.cli.launch import make_trainer, train_arguments
from cockpit.cli.research import make_search
from cockpit.cli.stop_signals import StopSignals
from cockpit.screens.help_screen import HelpScreen
from cockpit.screens.proposal_dialog import ProposalDialog
from cockpit.screens.research_screen import ResearchScreen

QUICK = [
    "--set", "sample.interval=0", "--set", "eval.interval=0", "--set", "checkpoint.interval=0",
    "--no-telemetry", *set_args(TINY_MODEL),
]  # fmt: skip


def corpus(tmp_path: Path) -> Path:
    path = tmp_path / "corpus.txt"  # small: the whole val split is evaluated at each end
    path.write_text(
        "".join(f"line {i}: the quick brown fox jumps over the lazy dog\n" for i in range(400))
    )
    return path


def research_app(tmp_path: Path, *args: str) -> tuple[ResearchApp, Any]:
    runs = tmp_path / "runs"
    argv = [
        "research",
        "run",
        "--runs",
        str(runs),
        "--preset",
        "tiny",
        "--data",
        str(corpus(tmp_path)),
        *args,
        *QUICK,
    ]
    parsed = build_parser().parse_args(argv)
    _, runner, _ = make_search(parsed, StopSignals(), in_app=True)

    def factory(preset: str) -> Any:  # a run picked in the app (p): not the search's
        return make_trainer(
            train_arguments(no_telemetry=True), preset, first=False, runs_root=str(runs)
        )

    return ResearchApp(factory, "tiny", runner=runner, runs_root=str(runs)), runner


async def dialog_open(pilot: Pilot, app: ResearchApp, before: Any = None) -> ProposalDialog:
    """The dialog of the next proposal, once it is up (not `before`, the one answered)."""

    def up() -> bool:
        screen = app.screen
        return (
            isinstance(screen, ProposalDialog)
            and screen is not before
            and screen.mode == "choose"
            and bool(screen.query("#proposal-error"))
        )

    await wait_for_engine(pilot, up, timeout=60)
    await pilot.pause()
    assert isinstance(app.screen, ProposalDialog)
    return app.screen


async def typed(pilot: Pilot, text: str) -> None:
    await pilot.press("ctrl+u", *text, "enter")
    await pilot.pause()


@pytest.mark.slow  # one real tiny run of a second of training
def test_an_agents_proposals_wait_for_a_person_who_rejects_edits_and_the_agent_reads_the_note(
    tmp_path,
):
    server = ChatServer([
        '{"change": {"optim.lr": 0.03}, "reason": "much faster"}',
        '{"change": {"optim.lr": 0.004}, "reason": "a little faster"}',
    ])  # then it answers 404: the search stops there, in one line  # fmt: skip
    baselines_logged(tmp_path / "runs", "agent")  # only the agent's experiments are left
    app, runner = research_app(
        tmp_path, "--budget", "1s", "--steps", "100000", "--name", "agent", "--llm", server.url, "--model", "scripted",
    )  # fmt: skip
    toasts = Toasts()
    seen: dict[str, Any] = {}

    async def scenario(pilot: Pilot) -> None:
        dialog = await dialog_open(pilot, app)
        seen["title"] = str(dialog.query_one("#proposal-title").render())
        seen["diff"] = str(dialog.query_one("#proposal-diff").render())
        await pilot.press("r")
        await typed(pilot, "never above 0.01 for this model")
        dialog = await dialog_open(pilot, app, before=dialog)
        await pilot.press("e")
        await typed(pilot, "optim.lr=0")
        seen["refused"] = dialog.error
        await typed(pilot, "optim.lr=0.005")
        await wait_for_engine(pilot, lambda: "exp 2 optim.lr=0.005" in status_text(app), timeout=60)
        seen["status"] = status_text(app)
        await pilot.press("R")  # the research log, live as the experiment's row lands
        await wait_for_engine(pilot, lambda: isinstance(app.screen, ResearchScreen))
        await wait_for_engine(pilot, lambda: runner.outcome is not None, timeout=90)
        await wait_for_engine(pilot, lambda: len(app.screen.rows) == 4)
        seen["screen"] = len(app.screen.rows)
        await pilot.press("escape")
        await pilot.press("question_mark")  # the help lists the search's own key too
        await wait_for_engine(pilot, lambda: isinstance(app.screen, HelpScreen))
        seen["help"] = [key for key, _ in app.screen.rows]
        await pilot.press("escape")
        await pilot.press("q")

    try:
        run_pilot(app, scenario, size=REAL_SIZE, toasts=toasts)
    finally:
        server.close()
    assert (
        seen["title"]
        == "research agent: exp 1, on top of the baseline (the preset as the search sets it)"
    )
    assert "optim.lr  0.003 -> 0.03" in seen["diff"] and "peak learning rate" in seen["diff"]
    assert seen["refused"] == "optim.lr: expected a value > 0.0, got 0.0"
    assert seen["status"].startswith("research agent: exp 2 optim.lr=0.005")
    rows, _ = read_log(log_dir(tmp_path / "runs", "agent") / "log.tsv")
    assert [(r.id, r.status) for r in rows[2:3]] == [("001-rejected", "rejected")]
    assert (rows[2].change, rows[2].note, rows[2].proposed_by) == (
        "optim.lr=0.03", "never above 0.01 for this model", "llm:scripted",
    )  # fmt: skip
    tried = rows[3]
    assert tried.id == "002-optim.lr=0.005" and tried.status in ("kept", "discarded")
    assert tried.proposed_by == "llm:scripted (edited by a person)"
    assert tried.reason == "a little faster (proposed optim.lr=0.004; a person changed it)"
    assert json.loads((Path(tried.run_dir) / "config.json").read_text())["optim"]["lr"] == 0.005
    # the agent heard the note in its next prompt (and the log's row of it)
    second = server.requests[1]["messages"][1]["content"]
    assert (
        "A person's notes on proposals they rejected:\n- optim.lr=0.03: never above 0.01 for this model"
        in second
    )
    assert "never above 0.01" not in json.dumps(server.requests[0])
    assert runner.outcome == "stopped" and seen["screen"] == 4
    assert seen["help"].count("R") == 1
    said = [t.message for t in toasts]
    assert any("agent: " in m and "answered HTTP 404" in m for m in said), said


@pytest.mark.slow  # real tiny runs: one stopped in the app, resumed by the same command
def test_q_mid_experiment_checkpoints_its_run_and_the_same_command_continues(tmp_path):
    changes = tmp_path / "changes.toml"
    changes.write_text("optim.lr = [6e-3]\n")
    args = ["--budget", "5s", "--steps", "100000", "--changes", str(changes), "--name", "s"]
    baselines_logged(tmp_path / "runs", "s")
    app, runner = research_app(tmp_path, *args)

    async def scenario(pilot: Pilot) -> None:
        await wait_for_engine(
            pilot, lambda: status_text(app).startswith("research s: exp 1/1 optim.lr=0.006") and app.session.view.step >= 3,
            timeout=60,
        )  # fmt: skip
        await pilot.press("q")
        await wait_for_engine(pilot, lambda: app.screen.query("#confirm-dialog"))
        await pilot.press("y")
        await wait_for_engine(pilot, lambda: not app.session.engine_running, timeout=30)

    run_pilot(app, scenario, size=REAL_SIZE)
    runner.join(10)
    assert runner.outcome == "stopped"
    log = log_dir(tmp_path / "runs", "s") / "log.tsv"
    assert [r.id for r in read_log(log)[0]] == [
        "baseline-1",
        "baseline-2",
    ]  # nothing lost, none half
    run_dir = tmp_path / "runs" / "s" / "001-optim.lr=0.006"
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["state"] == "stopped"
    assert [r for r in records if r["kind"] == "checkpoint"][-1]["step"] == records[-1]["step"]

    again = cockpit_here(
        "research", "run", "--runs", str(tmp_path / "runs"), "--preset", "tiny", "--data", str(tmp_path / "corpus.txt"),
        *args, *QUICK, cwd=tmp_path,
    )  # fmt: skip
    assert again.returncode == 0, again.stdout + again.stderr
    assert "001-optim.lr=0.006: resuming" in again.stdout
    rows, damaged = read_log(log)
    assert damaged == 0 and [r.id for r in rows] == [
        "baseline-1",
        "baseline-2",
        "001-optim.lr=0.006",
    ]


def test_q_in_the_dialog_stops_the_search_with_nothing_trained_or_logged(tmp_path):
    server = ChatServer(['{"change": {"optim.lr": 0.004}, "reason": "faster"}'])
    baselines_logged(tmp_path / "runs", "wait")
    app, runner = research_app(
        tmp_path, "--budget", "1s", "--name", "wait", "--llm", server.url, "--model", "scripted"
    )

    async def scenario(pilot: Pilot) -> None:
        await dialog_open(pilot, app)
        assert "waits" in app.notifier.sent[-1].body  # a desktop notification: a person is needed
        await pilot.press("q")
        await wait_for_engine(pilot, lambda: app.screen.query("#confirm-dialog"))
        await pilot.press("y")
        await wait_for_engine(pilot, lambda: runner.outcome is not None)

    try:
        run_pilot(app, scenario, size=REAL_SIZE)
    finally:
        server.close()
    assert runner.outcome == "stopped"
    assert len(read_log(log_dir(tmp_path / "runs", "wait") / "log.tsv")[0]) == 2
    assert not (tmp_path / "runs" / "wait").exists()  # no experiment's run was made


def test_a_rejection_is_a_row_whose_note_every_later_proposal_is_given_a_rerun_too(tmp_path):
    """The loop without the app: Approving asks; a rejected proposal trains nothing, is a
    `rejected` row, and its note is in the context of every proposal after it (read back from
    the log, so a rerun's proposer has it too); `cockpit research log` counts it."""
    from cockpit.research import Approving, Decision, Proposal, Search, SearchSpec
    from cockpit.research.llm_proposer import Guarded

    runs = tmp_path / "runs"
    baselines_logged(runs, "p")
    contexts: list[Any] = []

    class Agent:
        def propose(self, context: Any) -> Proposal | None:
            contexts.append(context)
            return (
                Proposal({"optim.lr": 0.03}, "faster", "llm:test") if len(contexts) == 1 else None
            )

    said: list[str] = []

    def search() -> Search:
        ask = lambda proposal, context: Decision("reject", note="  too   high\n")  # noqa: E731
        spec = SearchSpec(preset="tiny", budget=1.0, name="p")
        trains = lambda d, o, r: pytest.fail("a rejected proposal trains nothing")  # noqa: E731
        # --experiments 1: a rejected proposal is no experiment, the agent is asked again
        proposer = Guarded(Approving(Agent(), ask), experiments=1, say=said.append)
        return Search(spec, runs, proposer, trains, lambda: False, lambda s: None)

    state = search().run()
    row = state.rows[-1]
    assert (row.id, row.status, row.change, row.note, row.proposed_by, row.reason) == (
        "001-rejected", "rejected", "optim.lr=0.03", "too high", "llm:test", "faster",
    )  # fmt: skip
    assert contexts[0].notes == [] and contexts[1].notes == ["optim.lr=0.03: too high"]
    assert said == []  # the agent itself had nothing more: no guard stopped it
    search().run()  # a rerun: the note comes from the log
    assert contexts[2].notes == ["optim.lr=0.03: too high"]
    shown = cockpit_here("research", "log", "p", "--runs", str(runs))
    assert "3 experiments: 2 kept, 0 discarded, 0 crashed, 0 refused, 1 rejected" in shown.stdout
