"""`cockpit research run`, the keep-or-discard search: the noise margin and the decision against
hand-computed values, the changes file's candidates and its refusals (one line each), the check
of a proposal an LLM proposer reuses, and a real search of tiny runs stopped within an
experiment, continued by the same command, its best configuration written as a preset that
`cockpit train --preset` runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import warm_process
from command_here import cockpit_here

from cockpit.ablation.research_log import read_log
from cockpit.research import (
    ChangesFileProposer,
    Proposal,
    ResearchContext,
    check_change,
    decide,
    noise_margin,
    read_changes,
)
from engine.config import ConfigError, load_preset

REPO = Path(__file__).resolve().parents[2]
QUICK = [
    "--set", "sample.interval=0", "--set", "eval.batches=2", "--set", "eval.interval=0",
    "--set", "checkpoint.interval=0", "--no-telemetry",
]  # fmt: skip


def env() -> dict[str, str]:
    return {**os.environ, "TERM": "dumb", "PYTHONPATH": str(REPO)}


def research(runs: Path, *args: str) -> subprocess.CompletedProcess:
    return cockpit_here("research", "run", "--runs", str(runs), *args, env=env(), cwd=runs.parent)


def test_the_margin_is_the_baseline_spread_at_least_the_floor():
    assert noise_margin([1.2000, 1.2300]) == pytest.approx(0.03)
    assert noise_margin([1.05, 1.00, 1.10]) == pytest.approx(0.10)
    assert noise_margin([1.2000, 1.2004]) == pytest.approx(0.001)  # the floor
    assert noise_margin([1.2000, 1.2004], floor=0.0) == pytest.approx(0.0004)
    with pytest.raises(ValueError):
        noise_margin([1.2])


def test_kept_only_when_better_than_the_best_by_more_than_the_margin():
    # best 1.2500, margin 0.0300: kept below 1.2200
    status, note = decide(1.2100, 1.25, 0.03, "003-x")
    assert status == "kept"
    assert note == "val bpb 1.2100 against the best 1.2500 (003-x), margin 0.0300: better by 0.0400"
    assert decide(1.2300, 1.25, 0.03, "b")[0] == "discarded"
    assert "within the noise" in decide(1.2300, 1.25, 0.03, "b")[1]
    assert decide(1.2200, 1.25, 0.03, "b")[0] == "discarded"  # by exactly the margin: not more
    assert decide(1.2600, 1.25, 0.03, "b") == (
        "discarded",
        "val bpb 1.2600 against the best 1.2500 (b), margin 0.0300: not better",
    )
    assert decide(None, 1.25, 0.03, "b") == ("discarded", "no val bpb measured")


def test_a_changes_file_gives_ranges_single_changes_and_tables_in_order(tmp_path):
    path = tmp_path / "changes.toml"
    path.write_text(
        'optim.lr = [1e-3, 2e-3]\n"model.mlp" = "relu2"\n'
        '[[change]]\nreason = "RMSNorm, no QK norm"\n"model.norm" = "rmsnorm"\nmodel.qk_norm = false\n'
    )
    found = read_changes(path, "tiny")
    assert [p.change for p in found] == [
        {"optim.lr": 1e-3},
        {"optim.lr": 2e-3},
        {"model.mlp": "relu2"},
        {"model.norm": "rmsnorm", "model.qk_norm": False},
    ]
    assert {p.proposed_by for p in found} == {"changes file"}
    assert found[0].reason == "from changes.toml" and found[3].reason == "RMSNorm, no QK norm"
    # each once: what the log has tried already is passed over (a rerun continues)
    proposer = ChangesFileProposer(found)
    rows = [{"change": "optim.lr=0.001"}, {"change": "optim.lr=0.002"}]
    assert proposer.propose(ResearchContext("tiny", {}, rows)) == found[2]
    rows += [{"change": "model.mlp=relu2"}, {"change": "model.norm=rmsnorm model.qk_norm=false"}]
    assert proposer.propose(ResearchContext("tiny", {}, rows)) is None


@pytest.mark.parametrize(
    "text, says",
    [
        ("optim.lrr = 1e-3\n", "unknown key 'lrr' (did you mean 'lr'?)"),
        ("optim.lr = [1e-3, -1.0]\n", "optim.lr: expected a value > 0.0, got -1.0"),
        ('optim.lr = "fast"\n', "optim.lr: expected a number, got 'fast'"),
        ("optim.lr = []\n", "an empty range"),
        ("train.time_budget = 5\n", "train.time_budget: the search sets it"),
        ("[[change]]\noptim.lr = [1e-3]\noptim.weight_decay = [0.1]\n", "both ranges"),
        ("[[change]]\nreason = 'x'\n", "change 1: no settings"),
        ("optim.lr = \n", "malformed TOML"),
        ("", "no candidate"),
    ],
)
def test_a_bad_changes_file_is_refused_in_one_line(tmp_path, text, says):
    path = tmp_path / "c.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as refused:
        read_changes(path, "tiny")
    assert says in str(refused.value) and "\n" not in str(refused.value)
    assert str(refused.value).startswith(f"--changes {path}")


def test_check_change_is_the_validation_a_proposer_reuses():
    assert check_change("tiny", {"optim.lr": 0.002}) is None
    assert check_change("tiny", {}) == "an empty change; give at least one KEY: VALUE"
    assert "unknown key" in check_change("tiny", {"optim.lrr": 0.002})
    assert check_change("tiny", {"optim.lr": "x"}) == "optim.lr: expected a number, got 'x'"
    assert "the search sets it" in check_change("tiny", {"eval.full_val": False})
    assert check_change("tiny", {"optim.lr": 0.002}, ["optim.lr=0.002"]) == (
        "optim.lr=0.002: changes nothing, the configuration has it already"
    )


def test_bad_command_lines_are_one_line_and_exit_2(tmp_path):
    runs = tmp_path / "runs"
    changes = tmp_path / "c.toml"
    changes.write_text("optim.lr = [2e-3]\n")
    for args, says in [
        (["--repeats", "1"], "--repeats 1: at least 2"),
        (["--changes", str(tmp_path / "none.toml")], "no such file"),
        (["--budget", "soon"], "--budget 'soon': a training time"),
        (["--set", "train.time_budget=3"], "the search sets it"),
    ]:
        base = {"--preset": "tiny", "--budget": "1s", "--changes": str(changes)}
        for i in range(0, len(args), 2):
            base[args[i]] = args[i + 1]
        extra = [a for k, v in base.items() if k != "--set" for a in (k, v)]
        if "--set" in base:
            extra += ["--set", base["--set"]]
        done = research(runs, *extra)
        assert done.returncode == 2, done.stdout + done.stderr
        assert says in done.stderr and len(done.stderr.splitlines()) == 1
    assert not (runs / "research").exists()


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow  # a real process to stop; each experiment a real (tiny) run of 1 s of training
def test_a_search_stopped_within_an_experiment_continues_and_writes_a_runnable_best(tmp_path):
    runs = tmp_path / "runs"
    changes = tmp_path / "changes.toml"
    changes.write_text(
        'optim.lr = [6e-3]\n[[change]]\nreason = "far too low"\noptim.lr = 1e-7\nschedule.min_lr = 0.0\n'
    )
    args = [
        "--preset", "tiny", "--budget", "1s", "--steps", "100000", "--changes", str(changes),
        "--repeats", "2", "--name", "s", *QUICK,
    ]  # fmt: skip
    argv = [sys.executable, "-m", "cockpit", "research", "run", "--runs", str(runs), *args]
    proc = warm_process.Popen(  # a real process to stop, forked warm
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env(), cwd=tmp_path
    )
    lines: list[str] = []
    in_first = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("step") and any("001-optim.lr=0.006: starting" in s for s in lines):
                in_first.set()
        in_first.set()  # the process ended: the assertion below says how

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert in_first.wait(120) and proc.poll() is None, "".join(lines)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 1, "".join(lines)
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(5)
    out = "".join(lines)
    assert "research stopped: every experiment done is in the log" in out
    log = runs / "research" / "s" / "log.tsv"
    rows, _ = read_log(log)
    assert [r.id for r in rows] == ["baseline-1", "baseline-2"]  # the stopped one is not logged
    stopped = metrics(runs / "s" / "001-optim.lr=0.006")
    assert stopped[-1]["state"] == "stopped"
    assert [r for r in stopped if r["kind"] == "checkpoint"][-1]["step"] == stopped[-1]["step"]

    again = research(runs, *args)
    assert again.returncode == 0, again.stdout + again.stderr
    assert (
        "001-optim.lr=0.006: resuming" in again.stdout
        and "baseline-1: starting" not in again.stdout
    )
    resumed = metrics(runs / "s" / "001-optim.lr=0.006")
    assert [r["start_step"] for r in resumed if r["kind"] == "run_started"][1] == stopped[-1][
        "step"
    ]
    rows, damaged = read_log(log)
    assert damaged == 0
    assert [r.id for r in rows] == [
        "baseline-1",
        "baseline-2",
        "001-optim.lr=0.006",
        "002-optim.lr=1e-07+schedule.min_lr=0.0",
    ]
    base = [rows[0].val_bpb, rows[1].val_bpb]
    margin = max(max(base) - min(base), 0.001)
    best, best_id = sum(base) / 2, "baseline"
    for row in rows[2:]:  # the decision, recomputed by hand from the logged figures
        assert row.parent == best_id and row.proposed_by == "changes file"
        assert f"margin {margin:.4f}" in row.note and f"the best {best:.4f}" in row.note
        assert row.status == ("kept" if row.val_bpb < best - margin else "discarded"), row.note
        if row.status == "kept":
            best, best_id = row.val_bpb, row.id
    assert rows[3].status == "discarded" and rows[3].reason == "far too low"

    best_toml = runs / "research" / "s" / "best.toml"
    config = load_preset(str(best_toml))
    assert config.optim.lr == (6e-3 if rows[2].status == "kept" else load_preset("tiny").optim.lr)
    assert config.train.time_budget == 0  # the search's measure is not the preset's
    trained = cockpit_here(
        "train", "--preset", str(best_toml), "--headless", "--run-dir", str(tmp_path / "best-run"),
        "--set", "train.max_steps=2", *QUICK, env=env(), cwd=tmp_path,
    )  # fmt: skip
    assert trained.returncode == 0, trained.stdout + trained.stderr
    assert metrics(tmp_path / "best-run")[-1]["state"] == "finished"

    once_more = research(runs, *args)  # all done: nothing trains, nothing is logged twice
    assert once_more.returncode == 0 and "starting" not in once_more.stdout
    assert len(read_log(log)[0]) == 4


def test_any_proposer_plugs_in(tmp_path):
    """The loop takes any Proposer: one whose proposal is invalid gets a refused row, no run."""
    from cockpit.research import Search, SearchSpec

    class Bad:
        def __init__(self) -> None:
            self.asked = 0

        def propose(self, context: ResearchContext) -> Proposal | None:
            self.asked += 1
            if self.asked > 1:
                return None
            return Proposal({"optim.lrr": 1.0}, "a typo", "llm:test")

    from cockpit.ablation.research_log import LogRow, ResearchLog, log_dir

    spec = SearchSpec(preset="tiny", budget=1.0, name="p")
    runs = tmp_path / "runs"
    # the baselines as logged already (a continued search): only the proposal is left
    ResearchLog(log_dir(runs, "p")).append(
        [
            LogRow(
                f"baseline-{i}", "", "preset tiny", bpb, 10, 1.0, 1, "kept", proposed_by="search"
            )
            for i, bpb in ((1, 2.50), (2, 2.52))
        ]
    )
    trained: list[Path] = []
    search = Search(
        spec,
        runs,
        Bad(),
        lambda d, o, r: trained.append(d) or "finished",
        lambda: False,
        lambda s: None,
    )
    state = search.run()
    assert trained == []
    refused = state.rows[-1]
    assert (refused.status, refused.proposed_by, refused.reason) == (
        "refused",
        "llm:test",
        "a typo",
    )
    assert "unknown key 'lrr'" in refused.note and refused.parent == "baseline"
    assert load_preset(str(search.best_path)).optim.lr == load_preset("tiny").optim.lr


def logged_baselines(runs: Path, name: str) -> None:
    from cockpit.ablation.research_log import LogRow, ResearchLog, log_dir

    ResearchLog(log_dir(runs, name)).append(
        [
            LogRow(
                f"baseline-{i}", "", "preset tiny", bpb, 10, 1.0, 1, "kept", proposed_by="search"
            )
            for i, bpb in ((1, 2.50), (2, 2.52))
        ]
    )


def test_a_stop_between_experiments_trains_and_logs_nothing_more(tmp_path):
    from cockpit.research import Search, SearchSpec, Stopped

    runs = tmp_path / "runs"
    logged_baselines(runs, "p")
    proposals = [Proposal({"optim.lr": 0.002}, "", "changes file")]
    trained: list[Path] = []
    search = Search(
        SearchSpec(preset="tiny", budget=1.0, name="p"), runs, ChangesFileProposer(proposals),
        lambda d, o, r: trained.append(d) or "finished", lambda: True, lambda s: None,
    )  # fmt: skip
    with pytest.raises(Stopped):
        search.run()
    assert trained == [] and len(read_log(search.log.path)[0]) == 2
    assert search.best_path.is_file()  # the baseline is the best so far, runnable already


def test_a_name_holding_a_search_of_other_settings_is_refused(tmp_path):
    from cockpit.research import Search, SearchSpec

    runs = tmp_path / "runs"

    def search(budget: float) -> Search:
        spec = SearchSpec(preset="tiny", budget=budget, name="p")
        return Search(spec, runs, ChangesFileProposer([]), lambda *a: "finished", lambda: False)

    search(1.0).open()
    with pytest.raises(ConfigError) as refused:
        search(2.0).open()
    said = str(refused.value)
    assert (
        "holds a search of other settings" in said and "budget 1s" in said and "budget 2s" in said
    )
    assert "\n" not in said


def test_a_candidate_no_run_could_start_with_here_is_a_refused_row_and_the_search_goes_on(tmp_path):
    runs = tmp_path / "runs"
    logged_baselines(runs, "p")  # a continued search: the candidates are left
    changes = tmp_path / "c.toml"
    changes.write_text('train.device = "cuda"\n')  # a valid setting; no CUDA on this machine
    done = research(
        runs, "--preset", "tiny", "--budget", "1s", "--changes", str(changes), "--name", "p"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    row = read_log(runs / "research" / "p" / "log.tsv")[0][-1]
    assert (row.id, row.status, row.proposed_by) == (
        "001-train.device=cuda",
        "refused",
        "changes file",
    )
    assert "CUDA" in row.note and "research done: 3 experiments, 0 kept" in done.stdout
