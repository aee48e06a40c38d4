"""examples/lower_lr_at.py, the example client of the control socket, against a real headless
run in its own process: it lowers the LR and says so, the run's metrics.jsonl records the change,
a refusal and a run that ends first are one line each, and the wire protocol's page
(docs/reference/wire.md) shows the file as it is."""

from __future__ import annotations

import ast
import datetime
import re
import subprocess
import sys
from pathlib import Path

import pytest
from live_process import LiveRun

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "lower_lr_at.py"
TIMEOUT_S = 60
CHANGED = re.compile(r"LR (\S+) -> (\S+) at step (\d+) \(x(\S+) on the schedule\)")



def example(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The script as a user runs it, outside the checkout (it needs nothing of cockpit)."""
    return subprocess.run(
        [sys.executable, str(EXAMPLE), *args],
        cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT_S,
    )  # fmt: skip


def one_line(text: str) -> str:
    lines = text.splitlines()
    assert len(lines) == 1, text
    return lines[0]


def test_lowers_the_lr_of_a_live_run_and_the_run_records_it(live: LiveRun, tmp_path: Path) -> None:
    done = example(str(live.run_dir), "--at", "now", "--factor", "0.5", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    match = CHANGED.fullmatch(one_line(done.stdout))
    assert match, done.stdout
    old, new, step, scale = match.groups()
    assert float(scale) == 0.5
    assert float(new) == pytest.approx(float(old) / 2, rel=1e-3)

    # the run's own log has the acknowledgement the script printed
    record = live.wait_for_record("lr_changed", scale=0.5)
    assert record["step"] == int(step)
    assert f"{record['new_lr']:.4g}" == new and f"{record['old_lr']:.4g}" == old
    assert live.steps_grow(by=3)  # and it trains on

    # an LR the engine will not take (over 10) is refused in one line, nothing changed
    refused = example(str(live.run_dir), "--factor", "1e6", cwd=tmp_path)
    assert refused.returncode == 1 and refused.stdout == ""
    assert one_line(refused.stderr).startswith("lower_lr_at: the run refused: LR change refused")
    assert [r["scale"] for r in live.records("lr_changed")] == [0.5]


def test_a_run_that_ends_before_the_time_is_said_in_one_line(live: LiveRun, tmp_path: Path) -> None:
    later = (datetime.datetime.now() + datetime.timedelta(hours=1)).strftime("%H:%M")
    waiting = subprocess.Popen(
        [sys.executable, str(EXAMPLE), str(live.run_dir), "--at", later],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert waiting.stderr is not None
        assert waiting.stderr.readline().startswith("waiting until ")  # connected, replayed
        live.close()  # SIGTERM: the run checkpoints, sends its final state and hangs up
        out, err = waiting.communicate(timeout=TIMEOUT_S)
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.wait()
    assert waiting.returncode == 1 and out == ""
    line = one_line(err)
    assert line.startswith("lower_lr_at: the run ended (stopped) at step "), line
    assert line.endswith(f"before {later}; LR unchanged"), line
    assert live.records("lr_changed") == []


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ((), "no live run answers in "),
        (("--at", "25:00"), "--at '25:00' is not a time"),
        (("--factor", "0"), "--factor 0.0 must be a positive number"),
        (("--factor", "nan"), "--factor nan must be a positive number"),
    ],
)
def test_bad_input_and_no_run_are_one_line_and_exit_2(
    tmp_path: Path, args: tuple[str, ...], says: str
) -> None:
    done = example(str(tmp_path / "no-run"), *args, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert one_line(done.stderr).startswith(f"lower_lr_at: {says}"), done.stderr


def test_the_wire_protocol_page_shows_the_example_as_it_is() -> None:
    page = (REPO / "docs" / "reference" / "wire.md").read_text()
    section = page[page.index("\n## An example client\n") :]
    start = section.index("```python\n") + len("```python\n")
    block = section[start : section.index("\n```", start) + 1]
    assert block == EXAMPLE.read_text(), "copy examples/lower_lr_at.py into docs/reference/wire.md"


def test_the_example_needs_only_the_standard_library() -> None:
    tree = ast.parse(EXAMPLE.read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}  # fmt: skip
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}  # fmt: skip
    assert imported and imported <= set(sys.stdlib_module_names), imported
