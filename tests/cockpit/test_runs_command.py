"""`cockpit runs` as a user runs it (`python -m cockpit runs DIR`): a real live run beside a crashed
one, one whose metrics end mid-line, a failed one and a finished one a level down; a real run
killed (crashed) and stopped; --json against the table; the rebuilt summaries; its refusals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import warm_process
from live_process import REPO, LiveRun

from cockpit.figures.run_table import fmt_ago, table
from engine.rundir import ListedRun
from engine.rundir.summary_facts import RunSummary

TIMEOUT = 30.0
NOW = time.time()


def runs(*args: str) -> subprocess.CompletedProcess[str]:
    """`cockpit runs ARGS` in a process of its own (forked warm), its output piped."""
    return warm_process.run([sys.executable, "-m", "cockpit", "runs", *args], cwd=REPO, text=True,
                          capture_output=True, timeout=TIMEOUT, env={**os.environ, "COLUMNS": "80"})  # fmt: skip


def listing(root: Path) -> list[dict[str, Any]]:
    done = runs(str(root), "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def hand_built(run_dir: Path, hours_ago: float, steps: int, final: str | None = None,
               tail: str = "") -> None:  # fmt: skip
    """A run's metrics.jsonl as the engine writes it: evals every 100 steps, checkpoints every 200."""
    run_dir.mkdir(parents=True)
    t = NOW - hours_ago * 3600
    lines: list[dict[str, Any]] = [
        {"kind": "state", "time": t, "state": "starting", "step": 0, "reason": ""},
        {"kind": "run_started", "time": t + 1, "preset": "shakespeare-char", "start_step": 0,
         "max_steps": 1000, "tokens_per_step": 512, "resumed_from": None, "train_time_s": 0.0},
    ]  # fmt: skip
    for n in range(1, steps + 1):
        lines.append({"kind": "step", "time": t + 1 + n, "step": n, "loss": 4.0 - n / 1000,
                      "lr": 1e-3, "grad_norm": 1.0, "tokens_per_s": 1e4, "step_time_s": 0.05,
                      "tokens": 512 * n, "mfu": 0.1, "data_time_s": 0.0, "update_ratio": None})  # fmt: skip
        if n % 100 == 0:
            lines.append({"kind": "eval", "time": t + 1.5 + n, "step": n, "train_loss": 3.0,
                          "val_loss": 3.0 + abs(n - 300) / 1000, "train_time_s": n * 0.05,
                          "full_split": False})  # fmt: skip
        if n % 200 == 0:
            lines.append({"kind": "checkpoint", "time": t + 1.7 + n, "step": n,
                          "path": str(run_dir / f"ckpt-{n:08d}.pt"), "reason": "interval"})  # fmt: skip
            (run_dir / f"ckpt-{n:08d}.pt").write_bytes(b"\0" * 10_000)
    if final:
        lines.append({"kind": "state", "time": t + 2 + steps, "state": final, "step": steps, "reason": ""})
    text = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in lines)
    (run_dir / "metrics.jsonl").write_text(text + tail)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """runs/: live (a real headless run, started last: the newest), crashed (a stale lock file,
    no final state), cut (ends mid-line), failed, sweep/finished; notes/ (not a run)."""
    base = tmp_path_factory.mktemp("runs") / "runs"
    hand_built(base / "crashed", hours_ago=2, steps=250)
    (base / "crashed" / ".run.lock").write_text("pid 1\nhost gone\n")  # nobody holds it
    hand_built(base / "cut", hours_ago=5, steps=120, tail='{"kind":"step","time":1.0,"st')
    hand_built(base / "failed", hours_ago=30, steps=50, final="failed")
    hand_built(base / "sweep" / "finished", hours_ago=1, steps=1000, final="finished")
    (base / "notes").mkdir()
    (base / "notes" / "todo.txt").write_text("not a run")
    with pytest.MonkeyPatch.context() as env:  # as tests/conftest.py's autouse fixture does
        env.setenv("COCKPIT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cockpit-cache"))
        live = LiveRun(base / "live")
        try:
            live.start()
            yield base
        finally:
            live.close()


def test_the_table_lists_every_run_newest_first_in_80_columns(root: Path) -> None:
    started = time.monotonic()
    done = runs(str(root))
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert time.monotonic() - started < 10
    header, *rows = done.stdout.splitlines()
    assert header.split()[:3] == ["RUN", "PRESET", "STATE"]
    assert all(len(line) <= 80 for line in done.stdout.splitlines()), done.stdout
    cells = {row.split()[0]: row.split() for row in rows}
    assert [row.split()[0] for row in rows] == ["live", "sweep/finished", "crashed", "cut", "failed"]
    assert {name: c[2] for name, c in cells.items()} == {
        "live": "live", "sweep/finished": "finished", "crashed": "crashed", "cut": "crashed",
        "failed": "failed",
    }  # fmt: skip
    assert cells["sweep/finished"][1:5] == ["shakespeare-char", "finished", "1,000/1k", "3.0000@300"]
    assert cells["cut"][3] == "120/1k"  # the whole lines only
    assert cells["crashed"][3:5] == ["250/1k", "3.1000@200"]
    assert "2h ago" in rows[2] and "1d ago" in rows[4]


def test_json_agrees_with_the_table(root: Path) -> None:
    table_rows = runs(str(root)).stdout.splitlines()[1:]
    listed = listing(root)
    assert [r["name"] for r in listed] == [row.split()[0] for row in table_rows]
    by_name = {r["name"]: r for r in listed}
    finished = by_name["sweep/finished"]
    assert finished == {
        **finished,
        "preset": "shakespeare-char", "state": "finished", "last_state": "finished",
        "step": 1000, "max_steps": 1000, "best_val_loss": 3.0, "best_val_step": 300,
        "last_val_loss": 3.7, "last_val_step": 1000, "tokens": 512_000, "train_time_s": 50.0,
        "last_checkpoint": str(root / "sweep" / "finished" / "ckpt-00001000.pt"),
        "last_checkpoint_step": 1000, "parent": None, "world_size": 1,
        "run_dir": str((root / "sweep" / "finished").resolve()),
    }  # fmt: skip
    assert finished["size_bytes"] >= 5 * 10_000
    assert by_name["live"]["state"] == "live"
    assert by_name["live"]["last_state"] in ("running", "saving")  # tiny saves every 50 steps
    assert by_name["live"]["step"] >= 2 and by_name["live"]["preset"] == "tiny"
    assert by_name["crashed"]["state"] == "crashed" and by_name["crashed"]["last_state"] == "starting"
    assert by_name["cut"]["step"] == 120 and by_name["failed"]["state"] == "failed"
    for row in table_rows:
        name, _preset, state, steps = row.split()[:4]
        assert by_name[name]["state"] == state
        assert steps.split("/")[0].replace(",", "") == str(by_name[name]["step"]) or name == "live"


def test_the_summaries_rebuilt_after_deletion_list_the_same(root: Path) -> None:
    before = [r for r in listing(root) if r["state"] != "live"]
    for summary in root.rglob("summary.json"):
        if summary.parent.name != "live":
            summary.unlink()
    after = [r for r in listing(root) if r["state"] != "live"]
    assert after == [{**b, "size_bytes": a["size_bytes"]} for a, b in zip(after, before, strict=True)]
    assert (root / "cut" / "summary.json").exists()  # written back by the listing


def test_a_killed_run_is_crashed_and_a_stopped_one_stopped(tmp_path: Path) -> None:
    killed, stopped = LiveRun(tmp_path / "killed"), LiveRun(tmp_path / "stopped")
    try:
        with ThreadPoolExecutor(2) as pool:  # both start at once: neither waits on the other
            list(pool.map(LiveRun.start, (killed, stopped)))
        assert {r["name"]: r["state"] for r in listing(tmp_path)} == {"killed": "live", "stopped": "live"}
        killed.kill()
        stopped.close()  # SIGTERM: it checkpoints and records its final state
        states = {r["name"]: r for r in listing(tmp_path)}
        assert states["killed"]["state"] == "crashed"
        assert states["stopped"]["state"] == "stopped"
        assert states["stopped"]["last_checkpoint_step"] == states["stopped"]["step"]
    finally:
        killed.close()
        stopped.close()


def test_no_runs_is_one_line_and_a_missing_directory_a_refusal(tmp_path: Path) -> None:
    empty = runs(str(tmp_path))
    assert empty.returncode == 0
    assert empty.stdout == f"no runs under {tmp_path} (start one with `cockpit train` or `cockpit start`)\n"
    assert runs(str(tmp_path), "--json").stdout.strip() == "[]"
    missing = runs(str(tmp_path / "nope"))
    assert missing.returncode == 2 and missing.stdout == ""
    assert missing.stderr.strip().splitlines() == [
        f"cockpit runs: {tmp_path / 'nope'}: no such directory; name the folder your runs are in: "
        "cockpit runs DIR"
    ]
    (tmp_path / "file").write_text("x")
    a_file = runs(str(tmp_path / "file"))
    assert a_file.returncode == 2 and len(a_file.stderr.strip().splitlines()) == 1
    assert "is a file, not a directory" in a_file.stderr and "Traceback" not in a_file.stderr


def test_the_table_gives_way_to_the_width_and_sanitises_names() -> None:
    summary = RunSummary().to_json()
    summary.update(preset="tiny\x1b[31m", step=12_345, max_steps=100_000, started=NOW - 90,
                   best_val={"value": 2.5, "step": 12_000}, tokens=6_300_000,
                   last_checkpoint={"path": "/r/ckpt-00012000.pt", "step": 12_000})  # fmt: skip
    run = ListedRun(Path("/r"), "a-very-long-project-name/" + "x" * 60, summary, "live", 3 << 30, NOW)
    name = "a-very-long-project-name/" + "x" * 60
    for width in (200, 80, 60):
        lines = table([run], NOW, width)
        assert all(line.isprintable() for line in lines)
        assert lines[1].split()[0] == name  # never cut: it is another command's argument
    wide, narrow = table([run], NOW, 200), table([run], NOW, 80)
    assert all(len(line) <= 200 for line in wide)
    assert "CKPT" in wide[0] and "ckpt-00012000.pt" in wide[1] and "3.0G" in wide[1]
    # at 80 columns every optional column gave way to the name; the row is as wide as it needs
    assert narrow[0].split() == ["RUN", "STATE", "STEP", "BEST", "VAL", "WHEN"]
    assert "1m ago" in narrow[1]
    assert [fmt_ago(s) for s in (None, 0.4, 42, 3600 * 5, 86_400 * 3)] == ["-", "just now", "42s ago", "5h ago", "3d ago"]


def test_a_reader_that_goes_away_gets_no_traceback(tmp_path: Path) -> None:
    """`cockpit presets | head -1`: the pipe closes under it; no traceback."""
    (tmp_path / "runs").mkdir()
    process = warm_process.Popen(
        [sys.executable, "-m", "cockpit", "presets"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path,
    )  # fmt: skip
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # before it writes a line
    err = process.stderr.read().decode()
    assert process.wait(timeout=60) in (0, 141)
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_piped_at_80_columns_every_run_name_is_whole_and_works_as_an_argument(
    tmp_path: Path,
) -> None:
    """`cockpit runs | ...` at 80 columns cut long names in the middle ('shakespear...0-213600'),
    so they could not be copied into the next command; now each one is whole."""
    root = tmp_path / "runs"
    names = [
        "sweeps/learning-rate-and-weight-decay-grid/lr-3e-4-wd-0.1-20261205-004500",
        "shakespeare-char-20261205-004501",
    ]
    for i, name in enumerate(names):
        hand_built(root / name, hours_ago=i + 1, steps=300, final="finished")
    done = runs(str(root))  # COLUMNS=80, stdout a pipe
    assert done.returncode == 0, done.stderr
    _header, *rows = done.stdout.splitlines()
    listed = [line.split()[0] for line in rows]
    assert listed == names, done.stdout
    for name in listed:  # what a user copies from the table is a run directory
        assert (root / name / "metrics.jsonl").is_file()

