"""One prepared GPU check of a torchrun launch (world size 1: a single process, no NCCL, no DDP)
end to end with the cockpit attached, bf16 + torch.compile.

    python bench/gpu_torchrun.py [--steps 600] [--out DIR]

1. Launches `torchrun --standalone --nproc-per-node 1 -m cockpit train --headless` on the
   `default` preset moved to CUDA (bf16, compiled, batch 64), as docs/guide/distributed.md shows;
2. attaches the cockpit app (Textual's headless driver) to rank 0's socket: time to a drawn
   loss panel; pause, LR x1.25, checkpoint and resume through the keys, each timed from the key
   to its acknowledging event; then a bare client times 10 pauses against the step time;
3. once the run ends: tokens/s, MFU, the NCCL mentions in the log (none: no process group), the memory
   breakdown the engine measured (weights, gradients, optimizer, activations from
   torch.cuda.max_memory_allocated, cache) and the NVML readings, and the checkpoint loaded back.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engine.control import RemoteEngine, probe  # noqa: E402


def records(path: Path, kind: str) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("kind") == kind:
            out.append(record)
    return out


def wait(condition: Any, timeout_s: float, what: str, poll_s: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise SystemExit(f"gpu check: {what} did not happen in {timeout_s:.0f} s")
        time.sleep(poll_s)
    return value


def attach_with_the_app(run_dir: Path) -> dict[str, float]:
    """The real app, attached: key -> acknowledgement times (s)."""
    from cockpit.cli.attach import attached_app

    engine = RemoteEngine(run_dir)
    app = attached_app(engine)
    times: dict[str, float] = {}
    started = time.perf_counter()

    async def go() -> None:
        async with app.run_test(size=(160, 48)) as pilot:
            while not app.main_screen.loss_panel.has_data():
                await pilot.pause(0.02)
            times["attach_to_drawn_s"] = time.perf_counter() - started
            for key, done, name in (
                ("space", lambda: app.state == "paused", "pause"),
                ("plus", lambda: abs(app.main_screen.lr_panel.scale - 1.25) < 1e-9, "lr_x1.25"),
                ("c", lambda: app.view.last_checkpoint is not None and app.view.last_checkpoint[2] == "manual", "checkpoint"),
                ("space", lambda: app.state == "running", "resume"),
            ):
                t0 = time.perf_counter()
                await pilot.press(key)
                while not done():
                    await pilot.pause(0.005)
                times[name + "_s"] = time.perf_counter() - t0
            app.detach()

    asyncio.run(go())
    return times


def bare_pauses(run_dir: Path, presses: int) -> list[float]:
    engine = RemoteEngine(run_dir)
    latencies = []
    for _ in range(presses):
        t0 = time.perf_counter()
        engine.pause()
        wait(lambda: engine.state == "paused", 60, "pause", poll_s=0.001)
        latencies.append(time.perf_counter() - t0)
        engine.resume()
        wait(lambda: engine.state == "running", 60, "resume")
        time.sleep(0.2)
    engine.close()
    return latencies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--out", default="gpu-torchrun")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    run_dir = out / "run"
    argv = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1",
        "-m", "cockpit", "train", "--headless", "--preset", "default", "--run-dir", str(run_dir),
        "--set", "train.device=cuda", "--set", "train.dtype=bfloat16", "--set", "train.compile=true",
        "--set", "train.batch_size=64", "--set", f"train.max_steps={args.steps}",
        "--set", "eval.interval=0", "--set", "checkpoint.interval=0",
    ]  # fmt: skip
    log = open(out / "engine.log", "wb")  # noqa: SIM115
    t0 = time.perf_counter()
    env = {**__import__("os").environ, "NCCL_DEBUG": "INFO"}  # NCCL says when it starts
    process = subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env)
    wait(lambda: (live := probe(run_dir)) is not None and live.step > 20, 300, "the first steps")
    print(f"first steps after {time.perf_counter() - t0:.1f} s (import, NCCL, compile)")
    try:
        times = attach_with_the_app(run_dir)
        print("app attached:", {k: round(v, 4) for k, v in times.items()})
    except ImportError as e:
        print(f"app not attached (textual missing here: {e}); the bare client follows")
    pauses = bare_pauses(run_dir, 10)
    steps = records(run_dir / "metrics.jsonl", "step")
    step_s = statistics.median(r["step_time_s"] for r in steps[-50:])
    p95 = sorted(pauses)[int(0.95 * (len(pauses) - 1))]
    print(
        f"pause through the socket: p50 {statistics.median(pauses) * 1e3:.1f} ms, p95 "
        f"{p95 * 1e3:.1f} ms; step {step_s * 1e3:.1f} ms; goal p95 < step + 50 ms: "
        f"{'PASS' if p95 < step_s + 0.05 else 'FAIL'}"
    )
    process.wait(900)
    log.close()
    started = records(run_dir / "metrics.jsonl", "run_started")[-1]
    steps = records(run_dir / "metrics.jsonl", "step")
    late = steps[len(steps) // 2 :]
    print(f"exit {process.returncode}; device {started['device']} {started['dtype']}; peak {started['peak_flops'] / 1e12:.0f} TFLOP/s ({started['peak_source']})")
    print(
        f"tokens/s median {statistics.median(r['tokens_per_s'] for r in late):,.0f}; MFU median "
        f"{statistics.median(r['mfu'] for r in late) * 100:.1f}%; final loss {steps[-1]['loss']:.4f}"
    )
    for memory in records(run_dir / "metrics.jsonl", "memory")[-1:]:
        gib = {k: round(memory[k] / 2**30, 3) for k in ("weights", "gradients", "optimizer", "activations", "cache", "other")}
        print(f"memory at step {memory['step']} (GiB): {gib}; activations measured: {memory['activations_measured']}")
    for reading in records(run_dir / "metrics.jsonl", "telemetry")[-1:]:
        print("NVML:", reading.get("source"), json.dumps(reading.get("gpus"))[:400])
    for event in records(run_dir / "metrics.jsonl", "eval")[-1:]:
        print(f"val {event['val_loss']:.4f} at step {event['step']}")
    import torch

    final = max(run_dir.glob("ckpt-*.pt"))
    state = torch.load(final, weights_only=True)
    print(f"checkpoint {final.name} loads (weights_only): step {state['step']}, world {state.get('world_size')}")
    print((out / "engine.log").read_text(errors="replace").count("NCCL"), "NCCL mentions in the log")
    return 0


if __name__ == "__main__":
    sys.exit(main())
