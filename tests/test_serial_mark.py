"""Under `pytest -n 2` (the README's test command), a test marked `serial` runs alone: a scratch
suite of sleeping tests, run on two workers with this suite's conftest, records when each ran."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("xdist")

CONFTEST = Path(__file__).with_name("conftest.py")
SCRATCH_TEST = '''
import os, time
import pytest

def ran(name, work):
    start = time.monotonic()
    time.sleep(work)
    with open(os.environ["SPANS"], "a") as spans:
        spans.write(f"{name} {os.environ['PYTEST_XDIST_WORKER']} {start} {time.monotonic()}\\n")

@pytest.mark.parametrize("n", range(6))
def test_beside_another(n):
    ran(f"plain{n}", 0.3)

@pytest.mark.serial
@pytest.mark.parametrize("n", range(2))
def test_alone(n):
    ran(f"serial{n}", 0.3)
'''


def test_a_serial_test_runs_with_no_other_test_beside_it(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST.read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "test_scratch.py").write_text(SCRATCH_TEST, encoding="utf-8")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    serial: alone\n", encoding="utf-8")
    spans = tmp_path / "spans.txt"
    env = {**os.environ, "SPANS": str(spans), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    env.pop("PYTEST_XDIST_WORKER", None)  # the scratch run is a run of its own, not this worker's
    env.pop("PYTEST_ADDOPTS", None)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "xdist", "-n", "2", "--dist", "load", "-q", "-p", "no:cacheprovider"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line.split() for line in spans.read_text().splitlines()]
    ran = {name: (worker, float(start), float(end)) for name, worker, start, end in rows}
    assert len(ran) == 8 and {worker for worker, _, _ in ran.values()} == {"gw0", "gw1"}

    def overlap(a: str, b: str) -> bool:
        return ran[a][1] < ran[b][2] and ran[b][1] < ran[a][2]

    beside = [(a, b) for a in ran for b in ran if a < b and overlap(a, b)]
    assert beside, "the two workers never ran tests at the same time: nothing was checked"
    assert not [pair for pair in beside if any(name.startswith("serial") for name in pair)], beside
