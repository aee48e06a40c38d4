"""A long run of the cockpit in a real terminal (tmux, a pty), with keys pressed and faults.

    python -m bench.soak [--minutes 20] [--preset default]    (from the repository root)

Prints: the process's RSS at the start and the end (goal: growth under 50 MB); the pause-key
latency (key sent -> the engine's `paused` record) at the start and the end (goal: unchanged
within noise); and the steps lost to the injected faults: the terminal is killed (SIGHUP, as
when an SSH link drops) and the run is resumed (goal: 0 beyond the step in flight).
During the run it checkpoints, evaluates, samples and nudges the LR every minute.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

# The end-to-end tests' terminal driver; `python -m` from the root makes tests/ importable.
from tests.tmux_driver import Tmux


def terminal(command: str) -> Tmux:
    return Tmux(command, width=160, height=48, prefix="soak")


class Follower:
    """Reads metrics.jsonl incrementally: re-parsing a growing file at 100 Hz would itself load
    the CPU the run trains on, and grow the latency it is measuring."""

    def __init__(self) -> None:
        self.offset: dict[Path, int] = {}
        self.cache: dict[Path, list[dict]] = {}

    def __call__(self, metrics: Path) -> list[dict]:
        out = self.cache.setdefault(metrics, [])
        with metrics.open("rb") as f:
            f.seek(self.offset.get(metrics, 0))
            chunk = f.read()
        complete = chunk[: chunk.rfind(b"\n") + 1]
        self.offset[metrics] = self.offset.get(metrics, 0) + len(complete)
        for line in complete.splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
        return out


records = Follower()


def find_process(run_dir: Path, timeout: float = 60) -> psutil.Process:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in psutil.process_iter(["cmdline"]):
            cmd = proc.info["cmdline"] or []
            if any("cockpit" in c for c in cmd[:3]) and str(run_dir) in cmd:
                return proc
        time.sleep(0.2)
    raise RuntimeError("cockpit process not found")


def pause_latency(term: Tmux, metrics: Path, presses: int) -> list[float]:
    latencies = []
    for _ in range(presses):
        seen = sum(1 for r in records(metrics) if r["kind"] == "state" and r["state"] == "paused")
        sent = time.time()
        term.send("space")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            paused = [
                r for r in records(metrics) if r["kind"] == "state" and r["state"] == "paused"
            ]
            if len(paused) > seen:
                latencies.append(paused[-1]["time"] - sent)
                break
            time.sleep(0.01)
        term.send("space")
        time.sleep(1.5)
    return latencies


def wait_steps(metrics: Path, n: int, timeout: float = 120) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        steps = (
            [r["step"] for r in records(metrics) if r["kind"] == "step"] if metrics.exists() else []
        )
        if len(steps) >= n:
            return steps[-1]
        time.sleep(0.5)
    raise RuntimeError("training did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument("--preset", default="default")
    parser.add_argument("--presses", type=int, default=5)
    args = parser.parse_args()
    run_dir = Path(tempfile.mkdtemp(prefix="soak-")) / "run"
    metrics = run_dir / "metrics.jsonl"
    base = f"{shlex.quote(sys.executable)} -m cockpit"
    term = terminal(
        f"{base} --preset {args.preset} --run-dir {run_dir} --set train.max_steps=100000000 --set checkpoint.interval=5000"
    )
    wait_steps(metrics, 50)
    proc = find_process(run_dir)
    time.sleep(20)  # past start-up allocations
    rss_start = proc.memory_info().rss
    lat_start = pause_latency(term, metrics, args.presses)
    print(
        f"start: RSS {rss_start / 2**20:.1f} MiB, pause latency p50 {statistics.median(lat_start) * 1e3:.0f} ms (max {max(lat_start) * 1e3:.0f})",
        flush=True,
    )

    end_at = time.monotonic() + args.minutes * 60
    minute = 0
    while time.monotonic() < end_at:
        time.sleep(min(60, max(0, end_at - time.monotonic())))
        minute += 1
        for key in ("c", "e", "s", "+" if minute % 2 else "-"):
            term.send(key)
            time.sleep(0.5)
        last = [r for r in records(metrics) if r["kind"] == "step"][-1]
        print(
            f"minute {minute}: step {last['step']}, RSS {proc.memory_info().rss / 2**20:.1f} MiB, {last['tokens_per_s']:,.0f} tok/s",
            flush=True,
        )

    rss_end = proc.memory_info().rss
    lat_end = pause_latency(term, metrics, args.presses)
    print(
        f"end:   RSS {rss_end / 2**20:.1f} MiB, pause latency p50 {statistics.median(lat_end) * 1e3:.0f} ms (max {max(lat_end) * 1e3:.0f})"
    )
    print(
        f"RSS growth over {args.minutes:g} min: {(rss_end - rss_start) / 2**20:+.1f} MiB (goal < 50 MB)"
    )

    # Fault: the terminal disappears mid-run (SSH drop -> SIGHUP).
    before = [r["step"] for r in records(metrics) if r["kind"] == "step"][-1]
    term.kill()
    proc.wait(timeout=120)
    saved = max(int(p.stem.split("-")[1]) for p in run_dir.glob("ckpt-*.pt"))
    recorded = [r["step"] for r in records(metrics) if r["kind"] == "step"][-1]
    print(
        f"SIGHUP: last step recorded {recorded} (seen {before} just before), checkpoint at step {saved}: {max(0, recorded - saved)} steps lost"
    )
    resumed = terminal(f"{base} --resume {run_dir}")
    deadline = time.monotonic() + 120
    first_after = None
    while time.monotonic() < deadline and first_after is None:
        recs = records(metrics)
        starts = [i for i, r in enumerate(recs) if r["kind"] == "run_started"]
        if len(starts) >= 2:
            after = [r["step"] for r in recs[starts[-1] :] if r["kind"] == "step"]
            first_after = after[0] if after else None
        time.sleep(0.5)
    resumed.send("q")
    time.sleep(1)
    resumed.send("y")
    time.sleep(5)
    resumed.kill()
    print(
        f"resume: first step after resume {first_after} (checkpoint {saved}): the curve continues"
        if first_after == saved + 1
        else f"resume: first step {first_after}, checkpoint {saved}"
    )


if __name__ == "__main__":
    main()
