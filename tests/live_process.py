"""A real headless run in its own process, serving its control socket: what attach tests attach to.

Imported as `live_process` by the tests (pytest puts tests/ on sys.path for tests/conftest.py)
and as `tests.live_process` by the benches run from the repository root.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# the tests' runs start warm, and so do those of a bench that a test started naming its warm
# server; a bench's own, as a user's would
if "pytest" in sys.modules or os.environ.get("COCKPIT_WARM_SERVER"):
    try:
        from warm_process import Popen as popen
        from warm_process import run as run_process
    except ImportError:
        from tests.warm_process import Popen as popen
        from tests.warm_process import run as run_process
else:
    popen, run_process = subprocess.Popen, subprocess.run

TIMEOUT_S = 60.0  # a loaded 2-core machine can take a while to import torch and start
REPO = Path(__file__).resolve().parent.parent


class LiveRun:
    """`cockpit train --headless --preset tiny` (a long run) in `run_dir`, as a subprocess.

    `start()` returns once the control socket answers and the run has stepped; `close()` stops
    it (SIGTERM: it checkpoints and exits) or kills it if it will not go."""

    def __init__(
        self, run_dir: Path, *overrides: str, preset: str = "tiny", steps: int = 1_000_000
    ) -> None:
        self.run_dir = run_dir
        self.argv = [
            sys.executable, "-m", "cockpit", "train", "--headless", "--no-telemetry",
            "--preset", preset, "--run-dir", str(run_dir),
            "--set", f"train.max_steps={steps}", *(a for o in overrides for a in ("--set", o)),
        ]  # fmt: skip
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> LiveRun:
        from engine.control.live_runs import probe

        self.run_dir.parent.mkdir(parents=True, exist_ok=True)
        self.log = open(self.run_dir.parent / f"{self.run_dir.name}.log", "wb")  # noqa: SIM115
        self.process = popen(
            self.argv, cwd=REPO, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            live = probe(self.run_dir, timeout_s=1.0)
            if live is not None and live.step >= 2:
                return self
            assert self.process.poll() is None, f"the run ended: {self.output()}"
            assert time.monotonic() < deadline, f"no live run after {TIMEOUT_S}s: {self.output()}"
            time.sleep(0.05)

    def output(self) -> str:
        self.log.flush()
        return (self.run_dir.parent / f"{self.run_dir.name}.log").read_text(errors="replace")[
            -2000:
        ]

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def step(self) -> int:
        """The newest step in metrics.jsonl."""
        steps = [r["step"] for r in self.records("step")]
        return steps[-1] if steps else 0

    def records(self, kind: str, **fields: Any) -> list[dict[str, Any]]:
        """metrics.jsonl's records of `kind` (with these field values), whole lines only."""
        out = []
        text = (self.run_dir / "metrics.jsonl").read_text()
        for line in text.splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue  # the line being written
            if record.get("kind") == kind and all(record.get(k) == v for k, v in fields.items()):
                out.append(record)
        return out

    def wait_for_record(
        self, kind: str, timeout_s: float = TIMEOUT_S, **fields: Any
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = self.records(kind, **fields)
            if found:
                return found[-1]
            time.sleep(0.05)
        raise AssertionError(f"no {kind} record with {fields} in {timeout_s}s")

    def steps_grow(self, by: int = 5, timeout_s: float = TIMEOUT_S) -> bool:
        start, deadline = self.step(), time.monotonic() + timeout_s
        while self.step() < start + by:
            if time.monotonic() > deadline or (self.process and self.process.poll() is not None):
                return False
            time.sleep(0.05)
        return True

    def kill(self) -> None:
        """kill -9: no final state, no last checkpoint, the socket file left behind."""
        os.kill(self.pid, signal.SIGKILL)
        assert self.process is not None
        self.process.wait(TIMEOUT_S)

    def close(self) -> None:
        process = self.process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if hasattr(self, "log"):
            self.log.close()
