"""`cockpit ablate --budget` and the research log, end to end on real tiny runs: every run trains
for the same training time and is compared on val bits per byte, tokens, peak memory and
tokens/s; each run is a row of RUNS/research/SERIES/log.tsv, which `cockpit research log`
prints (and as JSON); a rerun neither trains nor logs twice, and logs what a crash left out."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest
from command_here import cockpit_here

from cockpit.ablation.research_log import COLUMNS, LogRow, ResearchLog, read_log
from cockpit.ablation.results import RunResult
from cockpit.ablation.series_log import verdict
from cockpit.ablation.spec import AblationSpec

REPO = Path(__file__).resolve().parents[2]
QUICK = [
    "--set", "sample.interval=0", "--set", "eval.batches=2", "--set", "eval.interval=0",
    "--set", "checkpoint.interval=0", "--no-telemetry", "--headless",
]  # fmt: skip
BUDGET = 1.0


def cockpit(runs: Path, *args: str):
    env = {**os.environ, "TERM": "dumb", "PYTHONPATH": str(REPO)}
    return cockpit_here(*args, "--runs", str(runs), env=env, cwd=runs.parent)


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow  # two real (tiny) runs of a second of training each
def test_a_budget_series_compares_what_the_same_training_time_bought(tmp_path):
    runs = tmp_path / "runs"
    args = (
        "ablate",
        "--preset",
        "tiny",
        "--change",
        "optim.name=lion",
        "--budget",
        "1s",
        "--steps",
        "100000",
    )
    done = cockpit(runs, *args, "--name", "b", *QUICK)
    assert done.returncode == 0, done.stderr
    series = runs / "b"
    rows = list(csv.DictReader((series / "results.csv").open()))
    assert [r["run"] for r in rows] == ["baseline", "optim.name=lion"]
    for row in rows:
        written = records(Path(row["run_dir"]))
        final = written[-1]
        assert final["state"] == "finished" and "train.time_budget 1 s" in final["reason"]
        steps = [r for r in written if r["kind"] == "step"]
        # the budget is the steps' time alone: reached, and passed by at most the step crossing it
        assert (
            BUDGET
            <= float(row["train_time_s"])
            <= BUDGET + max(s["step_time_s"] for s in steps) + 0.1
        )
        last_eval = [r for r in written if r["kind"] == "eval"][-1]
        assert last_eval["full_split"] is True  # evaluated on the whole val split
        assert float(row["final_val_bpb"]) == pytest.approx(last_eval["val_bpb"], rel=1e-5)
        assert int(row["tokens"]) == steps[-1]["tokens"] > 0
        memory = [r for r in written if r["kind"] == "memory"]
        assert int(row["peak_memory_bytes"]) == max(
            sum(
                m[k] for k in ("weights", "gradients", "optimizer", "activations", "cache", "other")
            )
            for m in memory
        )
        assert float(row["tokens_per_s"]) == pytest.approx(
            int(row["tokens"]) / float(row["train_time_s"]), rel=1e-4
        )
    md = (series / "results.md").read_text()
    assert (
        "| run " in md and "| val bpb |" in md and "| peak memory |" in md and "| tokens/s |" in md
    )
    assert "Every run trained for 1.00 s of training time" in md
    assert "research log: " in done.stdout

    # the research log: a row per run, appended as each ended
    log_path = runs / "research" / "b" / "log.tsv"
    logged, damaged = read_log(log_path)
    assert damaged == 0
    assert [(r.id, r.change, r.parent, r.proposed_by) for r in logged] == [
        ("00-baseline", "", "preset tiny", "ablate"),
        ("01-optim.name=lion", "optim.name=lion", "00-baseline", "ablate --change"),
    ]
    assert logged[0].status == "kept"
    base_bpb, lion_bpb = (float(r["final_val_bpb"]) for r in rows)
    assert logged[1].status == ("kept" if lion_bpb < base_bpb else "discarded")
    for entry, row in zip(logged, rows, strict=True):
        assert entry.val_bpb == pytest.approx(float(row["final_val_bpb"]), rel=1e-5)
        assert entry.tokens == int(row["tokens"]) and entry.peak_memory_bytes == int(
            row["peak_memory_bytes"]
        )

    shown = cockpit(runs, "research", "log")  # the newest series' log
    assert shown.returncode == 0, shown.stderr
    assert "01-optim.name=lion  optim.name=lion  00-baseline" in shown.stdout
    assert "2 experiments: " in shown.stdout and "best kept: " in shown.stdout
    as_json = json.loads(cockpit(runs, "research", "log", "b", "--json").stdout)
    assert as_json["name"] == "b" and as_json["damaged_lines"] == 0
    assert [r["id"] for r in as_json["rows"]] == ["00-baseline", "01-optim.name=lion"]
    assert set(as_json["rows"][0]) == set(COLUMNS)

    # a crash after the last run ended and before its row was written: the rerun logs it, once
    text = log_path.read_text().splitlines(keepends=True)
    log_path.write_text("".join(text[:-1]) + text[-1][:10])  # the last row cut short
    again = cockpit(runs, *args, "--name", "b", *QUICK)
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("skipped") == 2 and "starting" not in again.stdout
    relogged, damaged = read_log(log_path)
    assert [r.id for r in relogged] == ["00-baseline", "01-optim.name=lion"] and damaged == 1
    assert relogged[1] == logged[1]
    # another budget is another series: refused under the same name
    other = cockpit(runs, *args[:-4], "--budget", "2s", "--steps", "100000", "--name", "b", *QUICK)
    assert (
        other.returncode == 2
        and "(preset tiny, a training time of 1s, 100000 steps, --set " in other.stderr
    )


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--budget", "5"], "--budget '5': a training time with its unit, e.g. 90s, 5m or 1h"),
        (["--budget", "5x"], "--budget '5x': a training time with its unit"),
        (["--budget", "0s"], "--budget '0s': a training time with its unit"),
        (
            ["--budget", "1m", "--target", "1.9"],
            "--budget 1m and --target 1.9: a series compares either",
        ),
        (
            ["--budget", "1m", "--set", "train.time_budget=3"],
            "train.time_budget is the series' --budget 60",
        ),
    ],
)
def test_a_bad_budget_is_one_line_and_exit_2(tmp_path, args, says):
    done = cockpit(
        tmp_path / "runs",
        "ablate",
        "--preset",
        "tiny",
        "--change",
        "optim.name=lion",
        *args,
        "--headless",
    )
    assert done.returncode == 2
    assert done.stderr.startswith("cockpit ablate: ") and says in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1 and not (tmp_path / "runs").exists()


def test_a_budget_file_key_and_its_bad_value(tmp_path):
    from cockpit.ablation.spec import spec_from_file

    good = tmp_path / "s.toml"
    good.write_text('preset = "tiny"\nbudget = "90s"\n[[change]]\noptim.name = "lion"\n')
    spec = spec_from_file(good)
    assert spec.budget == 90.0 and spec.measure() == "a training time of 90s"
    assert (
        "train.time_budget=90.0" in spec.common_settings()
        and "eval.full_val=true" in spec.common_settings()
    )
    bad = tmp_path / "bad.toml"
    bad.write_text('preset = "tiny"\nbudget = "soon"\n[[change]]\noptim.name = "lion"\n')
    done = cockpit(tmp_path / "runs", "ablate", str(bad), "--headless")
    assert done.returncode == 2 and "budget 'soon': a training time with its unit" in done.stderr
    assert done.stderr.count("\n") == 1


def row(id_: str, status: str = "kept", bpb: float | None = 1.5) -> LogRow:
    return LogRow(
        id_, "optim.lr=0.002", "00-baseline", bpb, 1000, 1.0, 2048, status, "", "ablate", "", ""
    )


def test_the_log_is_appended_to_and_read_back_with_its_damage_counted(tmp_path):
    log = ResearchLog(tmp_path / "runs" / "research" / "s")
    log.append([row("a"), row("b", "discarded", None)])
    with log.path.open("a") as f:
        f.write("c\thalf a row")  # a crash mid-write
    log.append([row("d", "crashed")])
    rows, damaged = read_log(log.path)
    assert [(r.id, r.status, r.val_bpb) for r in rows] == [
        ("a", "kept", 1.5),
        ("b", "discarded", None),
        ("d", "crashed", 1.5),
    ]
    assert damaged == 1 and log.logged_ids() == {"a", "b", "d"}
    shown = cockpit(tmp_path / "runs", "research", "log", "s")
    assert shown.returncode == 0 and "1 damaged line(s) skipped" in shown.stdout
    assert "3 experiments: 1 kept, 1 discarded, 1 crashed, 0 refused" in shown.stdout


def test_a_missing_or_foreign_log_is_one_line_and_exit_2(tmp_path):
    runs = tmp_path / "runs"
    missing = cockpit(runs, "research", "log")
    assert (
        missing.returncode == 2
        and "no research log under" in missing.stderr
        and missing.stderr.count("\n") == 1
    )
    (runs / "research" / "x").mkdir(parents=True)
    (runs / "research" / "x" / "log.tsv").write_text("not\ta log\n")
    foreign = cockpit(runs, "research", "log", "x")
    assert (
        foreign.returncode == 2
        and "not a research log" in foreign.stderr
        and foreign.stderr.count("\n") == 1
    )
    unknown = cockpit(runs, "research", "log", "y")
    assert (
        unknown.returncode == 2
        and "no research log 'y'" in unknown.stderr
        and "(there: x)" in unknown.stderr
    )


def result(bpb: float | None, baseline: bool = False, status: str = "finished") -> RunResult:
    return RunResult("r", "d", status, baseline, steps=10, final_val_bpb=bpb)


def test_a_change_is_kept_only_below_every_baseline_run():
    spec = AblationSpec(preset="tiny", budget=60.0)
    one = [result(1.50, True)]
    assert verdict(result(1.49), spec, one) == (
        "kept", "val bpb 1.4900 against the baseline's 1.5000: lower (no noise measured: --repeat-baseline K)",
    )  # fmt: skip
    assert verdict(result(1.50), spec, one)[0] == "discarded"
    three = [
        result(1.50, True),
        result(1.52, True),
        result(1.48, True),
    ]  # mean 1.50, spread 1.48 to 1.52
    status, note = verdict(result(1.49), spec, three)
    assert status == "discarded" and note.endswith(
        "(mean of 3, spread 1.4800 to 1.5200): within the baseline's spread"
    )
    assert verdict(result(1.47), spec, three)[0] == "kept"
    assert verdict(result(None), spec, three) == ("discarded", "no val bpb measured")


def test_a_link_in_the_logs_place_is_refused_not_followed(tmp_path):
    from engine.config import ConfigError

    log = ResearchLog(tmp_path / "runs" / "research" / "s")
    log.directory.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text("mine\n")
    log.path.symlink_to(elsewhere)
    with pytest.raises(ConfigError, match="is a symbolic link"):
        log.append([row("a")])
    assert elsewhere.read_text() == "mine\n"
