"""`cockpit ablate` end to end on the tiny preset: a series of a baseline and two changes,
headless and steps-bounded, writes its runs (normal run directories) and its table; a SIGINT
mid-series (to a real process) stops it with the run on its way checkpointed, and the same
command again skips the finished run, resumes that one and completes; a bad spec is one line
and exit 2, before anything runs."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import warm_process
from command_here import cockpit_here

from engine.rundir import list_runs

REPO = Path(__file__).resolve().parents[2]
QUICK = ["--set", "sample.interval=0", "--set", "eval.batches=2", "--no-telemetry", "--headless"]


def ablate_argv(runs: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "cockpit", "ablate", "--runs", str(runs), *args]


def env() -> dict[str, str]:
    return {**os.environ, "TERM": "dumb", "PYTHONPATH": str(REPO)}


def ablate(runs: Path, *args: str) -> subprocess.CompletedProcess:
    return cockpit_here("ablate", "--runs", str(runs), *args, env=env(), cwd=runs.parent)


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow  # each run a real (tiny) one
def test_a_series_of_two_changes_runs_each_and_writes_its_table(tmp_path):
    runs = tmp_path / "runs"
    done = ablate(
        runs, "--preset", "tiny", "--change", "optim.name=lion", "--change", "model.norm=rmsnorm model.mlp=relu2",
        "--steps", "4", "--set", "eval.interval=2", "--name", "s", *QUICK,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    series = runs / "s"
    names = ["00-baseline", "01-optim.name=lion", "02-model.norm=rmsnorm+model.mlp=relu2"]
    record = json.loads((series / "series.json").read_text())
    assert [r["run_dir"] for r in record["runs"]] == names
    assert [r["status"] for r in record["runs"]] == ["finished"] * 3
    for name, changed in zip(names, ({}, {"optim": "lion"}, {"norm": "rmsnorm", "mlp": "relu2"}), strict=True):
        written = metrics(series / name)  # a normal run directory, with its own config
        config = json.loads((series / name / "config.json").read_text())
        assert config["train"]["max_steps"] == 4 and config["eval"]["interval"] == 2
        assert config["optim"]["name"] == changed.get("optim", "adamw")
        assert config["model"]["norm"] == changed.get("norm", "layernorm")
        assert written[-1]["state"] == "finished" and written[-1]["step"] == 4
        assert (series / name / "config.toml").is_file()
    rows = list(csv.DictReader((series / "results.csv").open()))
    assert [r["run"] for r in rows] == ["baseline", "optim.name=lion", "model.norm=rmsnorm model.mlp=relu2"]
    assert all(r["steps"] == "4" and r["status"] == "finished" for r in rows)
    assert float(rows[0]["d_time_s"]) == 0.0
    for r in rows:  # the final val is the last evaluation's, as recorded
        last = [e for e in metrics(Path(r["run_dir"])) if e["kind"] == "eval"][-1]
        assert float(r["final_val"]) == pytest.approx(last["val_loss"], rel=1e-5)
        assert float(r["tokens_per_s"]) > 0
    md = (series / "results.md").read_text()
    assert md.count("| finished |") == 3 and "| optim.name=lion " in md
    assert "| run " in done.stdout and "compare the runs: cockpit compare " in done.stdout
    # the runs are listed as any run is (`cockpit runs`)
    assert sorted(r.name for r in list_runs(runs)) == [f"s/{name}" for name in names]
    # the same series again, as a file and spelled otherwise: nothing is trained again
    same = tmp_path / "same.toml"
    same.write_text('preset = "tiny"\nsteps = 4\n[settings]\n"eval.interval" = 2\n[[change]]\nname = "lion"\noptim.name = "lion"\n')
    again = ablate(runs, str(same), "--change", "model.mlp=relu2 model.norm=rmsnorm", "--name", "s", *QUICK)
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("skipped") == 3 and "starting" not in again.stdout
    rows = list(csv.DictReader((series / "results.csv").open()))
    assert [r["run"] for r in rows] == ["baseline", "lion", "model.mlp=relu2 model.norm=rmsnorm"]  # the new labels


@pytest.mark.slow  # a real process to stop, each run a real (tiny) one
def test_a_stopped_series_continues_where_it_stopped(tmp_path):
    runs = tmp_path / "runs"
    args = [
        "--preset", "tiny", "--change", "optim.name=lion", "--change", "model.qk_norm=true",
        "--steps", "120", "--set", "eval.interval=40", "--set", "checkpoint.interval=0", "--name", "s", *QUICK,
    ]  # fmt: skip
    proc = warm_process.Popen(  # a real process to interrupt, forked warm
        ablate_argv(runs, *args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env(), cwd=tmp_path
    )
    lines: list[str] = []
    second_started = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "step" in line and any("ablate 2/3" in seen for seen in lines):
                second_started.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert second_started.wait(90), "".join(lines)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 1, "".join(lines)
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(5)
    out = "".join(lines)
    assert "ablate stopped: 1 of 3 runs done" in out and "run the same command again" in out
    series = runs / "s"
    stopped = metrics(series / "01-optim.name=lion")
    assert stopped[-1]["state"] == "stopped" and 0 < stopped[-1]["step"] < 120
    saved = [r for r in stopped if r["kind"] == "checkpoint"]
    assert saved and saved[-1]["step"] == stopped[-1]["step"]  # nothing trained is lost
    assert not (series / "02-model.qk_norm=true").exists()  # the third never started
    assert json.loads((series / "series.json").read_text())["runs"][1]["status"] == "stopped"

    t0 = time.monotonic()
    again = ablate(runs, *args)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "ablate 1/3: baseline: finished already" in again.stdout
    assert "ablate 2/3: optim.name=lion: resuming" in again.stdout
    resumed = metrics(series / "01-optim.name=lion")
    starts = [r for r in resumed if r["kind"] == "run_started"]
    assert len(starts) == 2 and starts[1]["start_step"] == stopped[-1]["step"]  # from its checkpoint
    assert resumed[-1]["state"] == "finished" and resumed[-1]["step"] == 120
    baseline = metrics(series / "00-baseline")
    assert len([r for r in baseline if r["kind"] == "run_started"]) == 1  # not run again
    rows = list(csv.DictReader((series / "results.csv").open()))
    assert [(r["run"], r["steps"], r["status"]) for r in rows] == [
        ("baseline", "120", "finished"), ("optim.name=lion", "120", "finished"), ("model.qk_norm=true", "120", "finished"),
    ]  # fmt: skip
    assert time.monotonic() - t0 < 120


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--preset", "tiny", "--change", "optim.nme=lion"], "--change 'optim.nme=lion': optim: unknown key 'nme' (did you mean 'name'?)"),
        (["--preset", "tiny", "--change", "optim.name=adamx"], "--change 'optim.name=adamx': optim.name: expected one of"),
        (["--preset", "tiny", "--change", "model.qk_norm"], "'model.qk_norm' is not KEY=VALUE"),
        (["--preset", "tiny", "--change", "optim.name=adamw"], "changes nothing, the baseline tiny has it already"),
        (["--preset", "tinyy", "--change", "optim.name=lion"], "--preset tinyy: unknown preset 'tinyy'"),
        (["--change", "optim.name=lion"], "no baseline: --preset NAME"),
        (["--preset", "tiny"], "no change to measure: add --change KEY=VALUE"),
        (["--preset", "tiny", "--change", "optim.name=lion", "--target", "0"], "--target 0: a val loss above 0"),
        (["--preset", "tiny", "--change", "optim.name=lion", "--set", "eval.intervl=3"], "--set 'eval.intervl=3': eval: unknown key 'intervl'"),
    ],
)
def test_a_bad_series_is_one_line_and_exit_2(tmp_path, args, says):
    done = ablate(tmp_path / "runs", *args, "--headless")
    assert done.returncode == 2
    assert done.stderr.startswith("cockpit ablate: ") and says in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert not (tmp_path / "runs").exists()  # nothing ran, nothing was written


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('preset = "tiny"\n[[change]]\nname = "x"\n"optim.name" = \n', "malformed TOML"),
        ('preset = "tiny"\n[[change]]\nname = "lion"\noptim.nme = "lion"\n', "change 'lion': optim: unknown key 'nme'"),
        ('[[change]]\n"optim.name" = "lion"\n', 'no baseline: add preset = "NAME"'),
        ('preset = "tiny"\ntargt = 1.9\n', "unknown key 'targt'"),
    ],
)
def test_a_bad_series_file_is_one_line_and_exit_2(tmp_path, text, says):
    spec = tmp_path / "series.toml"
    spec.write_text(text)
    done = ablate(tmp_path / "runs", str(spec), "--headless")
    assert done.returncode == 2
    assert says in done.stderr and done.stderr.count("\n") == 1, done.stderr


def test_an_unreadable_series_file_is_one_line_and_exit_2(tmp_path):
    missing = ablate(tmp_path / "runs", str(tmp_path / "nope.toml"), "--headless")
    assert missing.returncode == 2 and "nope.toml: no such file" in missing.stderr
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"\xff\xfe\x00 preset")
    done = ablate(tmp_path / "runs", str(binary), "--headless")
    assert done.returncode == 2 and "not UTF-8 text" in done.stderr and done.stderr.count("\n") == 1


@pytest.mark.slow  # each run a real (tiny) one
def test_a_target_is_found_within_the_fine_cadence_near_it(tmp_path):
    # tiny evaluates every 50 steps: near 2.9, every 5 (a tenth), so the time to it is
    # interpolated between evaluations 5 steps apart, not 50
    runs = tmp_path / "runs"
    done = ablate(runs, "--preset", "tiny", "--change", "optim.name=lion", "--target", "2.9", "--steps", "400", "--name", "s", *QUICK)
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader((runs / "s" / "results.csv").open()))
    for row in rows:
        config = json.loads((Path(row["run_dir"]) / "config.json").read_text())
        assert (config["eval"]["interval"], config["eval"]["fine_interval"]) == (50, 5)
        evals = [e for e in metrics(Path(row["run_dir"])) if e["kind"] == "eval"]
        steps = [e["step"] for e in evals]
        assert evals[-1]["val_loss"] <= 2.9 < evals[-2]["val_loss"]  # stopped at the first at or below
        assert int(row["target_step"]) == steps[-1] and int(row["before_step"]) == steps[-2]
        assert steps[-1] - steps[-2] == 5  # the crossing within 5 steps
        assert steps[0] == 50 and len(steps) < steps[-1] // 5  # coarse far from it
    assert "and the first at or below it (5 steps apart)." in done.stdout
