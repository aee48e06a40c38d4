"""How long `cockpit runs` takes over many long runs, with their summaries and without.

    python bench/runs.py [--runs 200] [--steps 100000] [--repeats 3] [--dir DIR]

Builds RUNS run directories (once, in a temporary directory, or in DIR, reused when it is
already built) whose metrics.jsonl each hold STEPS step records as the engine writes them, an
eval every 1,000 steps and a checkpoint record every 5,000; most end finished, some stopped,
failed or with no final state (crashed), one with a line cut mid-write. Then times
`python -m cockpit runs DIR` (a subprocess, as a user runs it; best of REPEATS):

1. with every summary.json deleted before each run: the listing reads every metrics file
   (and writes the summaries back);
2. with the summaries present (goal: < 1 s);
3. and an interpreter that imports the CLI and exits, for scale: what any subcommand costs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOAL_S = 1.0
EVAL_EVERY, CHECKPOINT_EVERY = 1000, 5000
FINALS = ("finished", "finished", "finished", "stopped", "failed", None)  # None: crashed


def step_lines(steps: int) -> bytes:
    """The body every run shares: STEPS step records with evals and checkpoint records."""
    out = []
    for n in range(1, steps + 1):
        out.append(
            f'{{"kind":"step","time":{1.7e9 + n * 0.05:.6f},"step":{n},"loss":{4 - n / steps:.6f},'
            f'"lr":0.0006,"grad_norm":0.8123,"tokens_per_s":143156.957,"step_time_s":0.05,'
            f'"tokens":{n * 16384},"mfu":0.405,"data_time_s":3.8e-05,"update_ratio":null}}\n'
        )
        if n % EVAL_EVERY == 0:
            out.append(
                f'{{"kind":"eval","time":{1.7e9 + n * 0.05 + 0.01:.6f},"step":{n},'
                f'"train_loss":{4 - n / steps:.6f},"val_loss":{4.1 - n / steps:.6f},'
                f'"train_time_s":{n * 0.05:.3f},"full_split":false}}\n'
            )
        if n % CHECKPOINT_EVERY == 0:
            out.append(
                f'{{"kind":"checkpoint","time":{1.7e9 + n * 0.05 + 0.02:.6f},"step":{n},'
                f'"path":"ckpt-{n:08d}.pt","reason":"interval"}}\n'
            )
    return "".join(out).encode()


def build(root: Path, runs: int, steps: int) -> float:
    """Write the run directories; returns the seconds it took."""
    t0 = time.perf_counter()
    body = step_lines(steps)
    for i in range(runs):
        run_dir = root / f"run-{i:04d}"
        run_dir.mkdir(parents=True)
        start = time.time() - (runs - i) * 3600
        head = [
            {"kind": "state", "time": start, "state": "starting", "step": 0, "reason": ""},
            {"kind": "run_started", "time": start + 1, "preset": "nanogpt-cpu", "start_step": 0,
             "max_steps": steps, "tokens_per_step": 16384, "resumed_from": None,
             "train_time_s": 0.0},
            {"kind": "state", "time": start + 2, "state": "running", "step": 0, "reason": ""},
        ]  # fmt: skip
        final = FINALS[i % len(FINALS)]
        with (run_dir / "metrics.jsonl").open("wb") as f:
            f.write("".join(json.dumps(r) + "\n" for r in head).encode())
            f.write(body)
            if final is not None:
                f.write(json.dumps({"kind": "state", "time": start + 3, "state": final,
                                    "step": steps, "reason": ""}).encode() + b"\n")  # fmt: skip
            elif i % 12 == 5:
                f.write(b'{"kind":"step","time":1.0,"st')  # killed mid-write
        (run_dir / "config.json").write_text("{}")
    (root / "built.json").write_text(json.dumps({"runs": runs, "steps": steps}))
    return time.perf_counter() - t0


def time_listing(root: Path) -> tuple[float, str]:
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "cockpit", "runs", str(root)],
        cwd=ROOT, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    elapsed = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"cockpit runs failed ({done.returncode}): {done.stderr.strip()}")
    return elapsed, done.stdout


def time_interpreter() -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import cockpit.cli; cockpit.cli.build_parser()"],
                   cwd=ROOT, check=True, timeout=120)  # fmt: skip
    return time.perf_counter() - t0


def delete_summaries(root: Path) -> None:
    for summary in root.glob("*/summary.json"):
        summary.unlink()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", type=Path, help="build here (kept, and reused when already built)")
    args = parser.parse_args()
    if args.runs < 1 or args.steps < 1 or args.repeats < 1:
        parser.error("--runs, --steps and --repeats must be at least 1")
    base = args.dir or Path(tempfile.mkdtemp(prefix="bench-runs-"))
    try:
        return bench(base, args.runs, args.steps, args.repeats)
    finally:
        if args.dir is None:
            shutil.rmtree(base, ignore_errors=True)


def bench(root: Path, runs: int, steps: int, repeats: int) -> int:
    marker = root / "built.json"
    if marker.exists() and json.loads(marker.read_text()) == {"runs": runs, "steps": steps}:
        print(f"reusing {runs} runs of {steps:,} steps in {root}")
    else:
        if root.exists() and any(root.iterdir()):
            raise SystemExit(f"{root} holds something else: name an empty or new directory")
        root.mkdir(parents=True, exist_ok=True)
        seconds = build(root, runs, steps)
        size = sum(p.stat().st_size for p in root.glob("*/metrics.jsonl"))
        print(f"built {runs} runs of {steps:,} steps ({size / 1e9:.2f} GB of metrics.jsonl) in {seconds:.1f} s")
    rebuilds = []
    for _ in range(repeats):
        delete_summaries(root)
        rebuilds.append(time_listing(root)[0])
    print(f"1. no summaries (every metrics file read, summaries written): best of {repeats} "
          f"{min(rebuilds):.2f} s (all: {', '.join(f'{s:.2f}' for s in rebuilds)})")  # fmt: skip
    listed, out = [], ""
    for _ in range(repeats):
        seconds, out = time_listing(root)
        listed.append(seconds)
    best = min(listed)
    rows = len(out.splitlines()) - 1
    print(f"2. with summaries: {rows} runs listed, best of {repeats} {best:.3f} s "
          f"(all: {', '.join(f'{s:.3f}' for s in listed)}) (goal < {GOAL_S:g} s: "
          f"{'PASS' if best < GOAL_S else 'FAIL'})")  # fmt: skip
    start = min(time_interpreter() for _ in range(repeats))
    print(f"3. for scale: an interpreter importing the CLI: {start:.3f} s")
    if rows != runs:
        print(f"expected {runs} rows, got {rows}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
