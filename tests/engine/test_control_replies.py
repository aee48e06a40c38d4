"""What the control socket tells a viewer is true: a value no run takes is refused in the reply
(not acknowledged, then refused by an alert), a viewer's LR change is credited to it in
config.toml and the journal, and `cockpit ps` says the length in force after a live change.
Against a real headless run in its own process (tests/live_process.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tomllib
from raw_viewer import RawViewer as Viewer
from raw_viewer import kind

from engine.control.live_runs import probe
from engine.rundir.journal import read_journal

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 60.0  # `cockpit ps` in a fresh interpreter on a loaded machine
WHO = "bob@box (pts/9)"


# (command line, what its refusal says): values no run could take, whatever its state
REFUSED_ON_RECEIPT = [
    ("rollback", {"lr_factor": -2}, "rollback: lr_factor must be a factor greater than 0"),
    ("rollback", {"lr_factor": 0}, "rollback: lr_factor must be a factor greater than 0"),
    ("rollback", {"checkpoint": "../../etc/passwd"}, "checkpoint's file name"),
    ("rollback", {"checkpoint": "best.pt"}, "checkpoint's file name"),
    ("set_lr", {"lr": 0}, "set_lr: lr must be an LR in (0, 10]"),
    ("set_lr", {"lr": -1e-3}, "set_lr: lr must be an LR in (0, 10]"),
    ("set_lr", {"lr": 11}, "set_lr: lr must be an LR in (0, 10]"),
    ("scale_lr", {"factor": 0}, "scale_lr: factor must be a factor greater than 0"),
    ("scale_lr", {"factor": -0.5}, "scale_lr: factor must be a factor greater than 0"),
    ("stop", {"reason": "bye\n\x1b[2J"}, "stop: reason must be printable text"),
    ("stop", {"reason": "x" * 201}, "stop: reason must be at most 200 characters"),
    ("set", {"settings": {"model.n_layer": 8}}, "model.n_layer cannot change while"),
    ("set", {"settings": {"optim.weight_decy": 0.0}}, "did you mean 'optim.weight_decay'"),
]


def test_values_no_run_takes_are_refused_in_the_reply_and_the_run_goes_on(live) -> None:
    viewer = Viewer(live.run_dir)
    for ident, (name, arguments, reason) in enumerate(REFUSED_ON_RECEIPT):
        reply = viewer.command(name, ident, **arguments)
        assert reply["ok"] is False, (name, arguments, reply)
        assert reason in reply["error"] and "\n" not in reply["error"], (name, arguments, reply)
    # a right one is still taken, and acknowledged by its event
    assert viewer.command("scale_lr", "ok", factor=0.5)["ok"] is True
    viewer.until(kind("lr_changed"))
    assert live.steps_grow(3) and live.process.poll() is None  # nothing stopped it
    # none of them reached the run: not recorded as commands, no refusal alerts after an ok
    asked = [r["name"] for r in live.records("command")]
    assert asked == ["scale_lr"], asked
    assert live.records("alert", code="rollback") == []
    assert live.records("alert", code="set") == []
    viewer.close()


@pytest.mark.parametrize("command", ["set_lr", "scale_lr"])
def test_an_lr_change_over_the_socket_is_credited_to_its_viewer(live, command) -> None:
    Viewer(live.run_dir).close()  # viewer 1 comes and goes: the one that asks is not the first
    viewer = Viewer(live.run_dir, who=WHO)
    argument = {"lr": 5e-4} if command == "set_lr" else {"factor": 0.5}
    assert viewer.command(command, 1, **argument)["ok"] is True
    viewer.until(kind("lr_changed"))
    by = f"viewer {viewer.number} {WHO}"

    def lr_changes() -> list[dict]:  # config.toml takes the change just after the event
        changes = tomllib.loads((live.run_dir / "config.toml").read_text()).get("changes", [])
        return [c for c in changes if "lr_scale" in c["settings"]]

    deadline = time.monotonic() + TIMEOUT_S
    while not lr_changes() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [c["by"] for c in lr_changes()] == [by]
    assert live.wait_for_record("lr_changed")
    entries = [e for e in read_journal(live.run_dir / "metrics.jsonl") if e.what.startswith("LR")]
    assert [e.who for e in entries] == [by]
    viewer.close()


def test_ps_says_the_length_set_while_the_run_trains(live) -> None:
    viewer = Viewer(live.run_dir)
    settings = {"train.max_steps": 500_000}
    assert viewer.command("set", 1, settings=settings)["ok"] is True
    changed = viewer.until(kind("settings_changed"))
    assert changed["max_steps"] == 500_000
    # a new viewer's hello, the library's probe and `cockpit ps --json` all say it
    second = Viewer(live.run_dir)
    assert second.hello["summary"]["max_steps"] == 500_000
    second.close()
    found = probe(live.run_dir)
    assert found is not None and found.max_steps == 500_000
    listed = subprocess.run(
        [sys.executable, "-m", "cockpit", "ps", str(live.run_dir.parent), "--json"],
        cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert [r["max_steps"] for r in json.loads(listed.stdout)] == [500_000]
    shown = subprocess.run(
        [sys.executable, "-m", "cockpit", "ps", str(live.run_dir.parent)],
        cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S,
    )  # fmt: skip
    assert "/500k" in shown.stdout and "/1M" not in shown.stdout, shown.stdout
    viewer.close()
