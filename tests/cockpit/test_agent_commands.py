"""What a coding agent drives cockpit with (docs/guide/agents.md): every command the page says
takes --json takes it and prints JSON, `cockpit plan --json` and `cockpit start --json` as
documented, with their exit statuses."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

from command_here import cockpit_here
from tiny import set_args

from cockpit.ablation.research_log import COLUMNS
from engine.control.client import RemoteEngine

PAGE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "agents.md"


def json_commands() -> list[list[str]]:
    """The commands the page's table marks as taking --json, as argv lists (placeholders such as
    [DIR] or NAME dropped: each command has a default for them)."""
    commands = []
    for line in PAGE.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`cockpit "):
            continue
        if cells[1].startswith("yes"):
            words = cells[0].strip("`").split()[1:]
            commands.append([w for w in words if not re.fullmatch(r"\[?[A-Z_]+\]?|\.\.\.", w)])
    return commands


def test_the_page_lists_the_commands_with_json() -> None:
    names = [" ".join(c) for c in json_commands()]
    for expected in ("ps", "runs", "research log", "plan", "start", "data ls"):
        assert expected in names, names


def test_every_command_the_page_says_takes_json_prints_json(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    for argv in json_commands():
        if argv[0] == "start":  # starts a run: the test below
            continue
        if argv[0] == "research":  # reads a series' log: one must exist
            log = tmp_path / "runs" / "research" / "s1" / "log.tsv"
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text("\t".join(COLUMNS) + "\n")
        extra = ["--preset", "tiny", "--device-memory", "24GB"] if argv[0] == "plan" else []
        extra += ["--cache-dir", str(tmp_path / "cache")] if argv[:2] == ["data", "ls"] else []
        result = cockpit_here(*argv, *extra, "--json", cwd=tmp_path)
        assert result.returncode == 0, (argv, result.stderr)
        json.loads(result.stdout)  # one JSON document, nothing else on stdout


def test_plan_json_figures_and_exit_status(tmp_path: Path) -> None:
    fits = cockpit_here(
        "plan", "--preset", "tiny", "--device-memory", "24GB", "--json", cwd=tmp_path
    )
    assert fits.returncode == 0, fits.stderr
    plan = json.loads(fits.stdout)
    assert plan["fits"] is True and plan["capacity"] == 24 * 1024**3
    assert plan["total"] == sum(plan["memory"].values()) and plan["fixes"] == []
    assert plan["preset"] == "tiny" and plan["n_params"] > 0
    small = cockpit_here(
        "plan", "--preset", "tiny", "--device-memory", "100MB", "--json", cwd=tmp_path
    )
    assert small.returncode == 1, small.stderr  # does not fit: 1, as the table's
    plan = json.loads(small.stdout)
    assert plan["fits"] is False and plan["total"] > plan["capacity"]
    assert plan["fixes"] and all(f["set"] and "=" in f["set"][0] for f in plan["fixes"])
    bad = cockpit_here("plan", "--preset", "nope", "--json", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stdout == "" and len(bad.stderr.splitlines()) == 1


def test_start_json_names_the_run_and_its_pid(tmp_path: Path) -> None:
    sets = set_args(["train.max_steps=1000000"])
    result = cockpit_here(
        "start", "--preset", "tiny", *sets, "--no-telemetry", "--json", cwd=tmp_path
    )
    started = json.loads(result.stdout) if result.returncode == 0 else {}
    try:
        assert result.returncode == 0, result.stderr
        assert started["started"] is True and started["nproc"] == 1
        run_dir = Path(started["run_dir"])
        assert (
            run_dir.is_absolute()
            and run_dir.is_dir()
            and Path(started["log"]) == run_dir / "engine.log"
        )
        assert (run_dir / "control.sock").exists()
        engine = RemoteEngine(run_dir)  # the run serves: stopped through the wire
        engine.stop(checkpoint=False, reason="test over")
        assert engine.run() == "stopped"
    finally:
        if started.get("pid"):
            reap(started["pid"])


def reap(pid: int) -> None:
    """The engine (this process's child) gone and waited for, killed when it lingers."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0]:
                return
        except ChildProcessError:
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
