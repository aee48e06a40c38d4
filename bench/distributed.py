"""What steering every rank from one cockpit costs a step, and tokens/s at world 1 against world 2.

    python bench/distributed.py [--preset nanogpt-cpu] [--calls 2000] [--rounds 3] [--data PATH]
    python bench/distributed.py --preset tiny --calls 50 ...   (the smoke test's settings)

On CPU with gloo, every torchrun launch with OMP_NUM_THREADS=1.

1. The control channel (engine/distributed/command_exchange.py): `RankSync.exchange([])` timed call by call,
   --calls times after --warmup calls, in a worker this script starts as itself under
   `python -m torch.distributed.run --standalone --nproc-per-node 2` (the ranks otherwise idle:
   the channel's own cost), then a bare `all_reduce` of the same tensor on the same group as
   many times (gloo's floor, what any one-collective channel costs). The same worker then trains --steps steps of the preset with the
   engine's Trainer (as `cockpit train --headless` does, without the control socket; evals,
   samples and periodic checkpoints off, grad_accum=--grad-accum: its share per rank) and
   reports the step time from the run's metrics.jsonl (`step_time_s`, the steps after
   --warmup-steps), how many exchanges the run made (`RankSync.exchanges`) for how many steps,
   and the time inside each exchange during the run (which adds any wait for the other rank).
   Goal: the mean exchange (the slower rank's) < 1% of the step time. The loop leaves its
   command time out of `step_time_s` (engine/train/run.py), so the step time does not already
   hold the exchange. Both figures move with other load on the machine (the exchange's wall
   time is mostly the wake-ups of two processes on shared cores; a busier machine also makes
   the step slower), so the verdict can differ between a quiet and a busy machine. Each
   process's CPU time per exchange (gloo's threads included) is printed beside.
2. The loop with its exchange against without: the same worker run (no idle calls) with
   `RankSync.exchange` replaced by a pass-through, alternating, --rounds rounds: wall seconds
   per step from metrics.jsonl (step --warmup-steps to the last; the exchange included, unlike
   `step_time_s`). What the channel costs the loop as it runs, within the machine's noise.
3. tokens/s at world 1 against world 2, the same global batch: `cockpit train --headless` of
   the preset as one process (torch's default threads: every core) and under torchrun with 2
   ranks (grad_accum split between them), alternating which goes first each round. tokens/s
   is the world's: rank 0's metrics.jsonl, tokens over wall time from step --warmup-steps to
   the last step (the recorded `tokens_per_s` median beside it). No goal: on a 2-core machine
   both ranks share the cores the single process has to itself. A single process with several
   threads is the more fragile of the two when something else takes a core (its threads wait
   for each other at every operation): a round far below the others says so; the medians
   over rounds are the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # `python bench/distributed.py` puts bench/ first, not the root
    sys.path.insert(0, str(REPO))

SHAKESPEARE = REPO.parent / "shared" / "data" / "tinyshakespeare" / "input.txt"
QUIET = ["eval.interval=0", "sample.interval=0", "checkpoint.interval=0"]
GOAL = 0.01  # the exchange's share of a step
WORLD = 2
PARTS = ("exchange", "loop", "throughput")
RUN_TIMEOUT_S = 900.0


# ------------------------------------------------------------------ the worker (one rank)
def worker(args: argparse.Namespace) -> int:
    """One rank under torchrun: time idle exchanges, then train and count the run's exchanges."""
    import torch

    from engine.config import load_preset
    from engine.distributed import World, init_world
    from engine.distributed.command_exchange import RankSync
    from engine.train import Trainer

    world = World.from_env()
    group = init_world(world, torch.device("cpu"))
    sync = RankSync(world, group)
    for _ in range(args.warmup):
        sync.exchange([])
    idle_ns, cpu_s = timed_calls(lambda: sync.exchange([]), args.calls)
    # gloo's own floor: a bare all-reduce of the same tensor on the same group
    import torch.distributed as dist

    buffer = torch.zeros(sync.size, dtype=torch.float64)
    bare_ns, bare_cpu_s = timed_calls(lambda: dist.all_reduce(buffer, group=group), args.calls)
    result: dict[str, Any] = {
        "rank": world.rank, "idle_ns": idle_ns, "idle_cpu_s": cpu_s,
        "bare_ns": bare_ns, "bare_cpu_s": bare_cpu_s, "size": sync.size,
    }  # fmt: skip

    cfg = load_preset(args.preset, run_overrides(args, args.steps))
    trainer = Trainer(
        cfg,
        run_dir=args.run_dir,
        data_path=args.data,
        telemetry=False,
        interactive=False,
        world=world,
    )
    in_run_ns: list[int] = []
    exchange = trainer.sync.exchange

    def timed_exchange(*call: Any, **named: Any) -> list:  # the loop's calls, timed in place
        start = time.perf_counter_ns()
        try:
            return exchange(*call, **named)
        finally:
            in_run_ns.append(time.perf_counter_ns() - start)

    # --skip-exchange: the loop without its channel (each rank keeps its own commands, the
    # bench sends none; no report is ever due, so no rank reports either), for part 2
    def passthrough(local: list, *_rest: Any, **_named: Any) -> list:
        return local

    chosen = passthrough if args.skip_exchange else timed_exchange
    trainer.sync.exchange = chosen  # type: ignore[method-assign]
    state = trainer.run()  # leaves the process groups at its end
    result.update(
        state=str(state), steps=trainer.step, exchanges=trainer.sync.exchanges, in_run_ns=in_run_ns
    )
    Path(args.out, f"rank{world.rank}.json").write_text(json.dumps(result))
    return 0


def timed_calls(call: Any, calls: int) -> tuple[list[int], float]:
    """Each call's wall time in ns, and the process's CPU seconds over all of them (gloo's
    threads included)."""
    times = []
    cpu_start = time.process_time()
    for _ in range(calls):
        start = time.perf_counter_ns()
        call()
        times.append(time.perf_counter_ns() - start)
    return times, time.process_time() - cpu_start


# ------------------------------------------------------------------ processes
def run_overrides(args: argparse.Namespace, steps: int) -> list[str]:
    return [
        *QUIET, f"train.max_steps={steps}", f"train.grad_accum={args.grad_accum}", *args.overrides
    ]  # fmt: skip


def torchrun(*argv: str) -> list[str]:
    launcher = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(WORLD)]
    if os.environ.get("COCKPIT_TEST_WARM_RANKS"):
        # under a test that named its warm server (tests/warm_ranks.py): the launcher and its
        # ranks are forked from it, each through a stand-in, instead of importing torch again
        stand_in = str(REPO / "tests" / "warm_ranks.py")
        return [sys.executable, stand_in, *launcher, stand_in, *argv]
    return [sys.executable, *launcher, *argv]


def child_env(threads: int | None) -> dict[str, str]:
    """The environment of a run: OMP_NUM_THREADS as given (None: torch's default, every core),
    and Tiny Shakespeare where the presets look for it."""
    env = dict(os.environ)
    env.pop("OMP_NUM_THREADS", None)
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    if "COCKPIT_TINYSHAKESPEARE" not in env and SHAKESPEARE.is_file():
        env["COCKPIT_TINYSHAKESPEARE"] = str(SHAKESPEARE)
    return env


def run_to_end(argv: list[str], env: dict[str, str], what: str) -> None:
    """Run `argv` (in its own process group, so torchrun's ranks go with it) to the end; on a
    failure, print its output's tail and exit 1."""
    process = subprocess.Popen(
        argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    try:
        output, _ = process.communicate(timeout=RUN_TIMEOUT_S)
    except BaseException:  # a timeout or ctrl+c: take the ranks down with the launcher
        stop_group(process)
        raise
    if process.returncode != 0:
        tail = output.decode(errors="replace")[-3000:]
        print(f"{what} failed (exit {process.returncode}):\n{tail}", file=sys.stderr)
        sys.exit(1)


def stop_group(process: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=10)
            return
        except subprocess.TimeoutExpired:
            continue


def cockpit_argv(args: argparse.Namespace, run_dir: Path, steps: int) -> list[str]:
    argv = ["-m", "cockpit", "train", "--headless", "--no-telemetry", "--preset", args.preset,
            "--run-dir", str(run_dir)]  # fmt: skip
    if args.data:
        argv += ["--data", args.data]
    for override in run_overrides(args, steps):
        argv += ["--set", override]
    return argv


def step_records(run_dir: Path) -> list[dict[str, Any]]:
    records = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record.get("kind") == "step":
            records.append(record)
    return records


def measured_steps(records: list[dict[str, Any]], warmup_steps: int) -> list[dict[str, Any]]:
    """The records from step `warmup_steps` on (all of them for a run too short to drop any)."""
    kept = [r for r in records if r["step"] >= warmup_steps]
    return kept if len(kept) >= 2 else records


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# ------------------------------------------------------------------ 1. the control channel
def launch_worker(
    args: argparse.Namespace, calls: int, warmup: int, skip_exchange: bool = False
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The worker under torchrun: each rank's results, and the run's step records."""
    with tempfile.TemporaryDirectory(prefix="bench-distributed-") as tmp:
        out, run_dir = Path(tmp, "out"), Path(tmp, "run")
        out.mkdir()
        argv = torchrun(
            str(Path(__file__).resolve()), "--worker", "--out", str(out), "--run-dir", str(run_dir),
            "--preset", args.preset, "--calls", str(calls), "--warmup", str(warmup),
            "--steps", str(args.steps), "--grad-accum", str(args.grad_accum),
            *(["--data", args.data] if args.data else []),
            *(["--skip-exchange"] if skip_exchange else []),
            *(a for o in args.overrides for a in ("--set", o)),
        )  # fmt: skip
        run_to_end(argv, child_env(threads=1), "the exchange worker under torchrun")
        ranks = [json.loads(Path(out, f"rank{r}.json").read_text()) for r in range(WORLD)]
        records = step_records(run_dir)
        ended = [r for r in ranks if r["state"] != "finished"]
        if ended:  # a run that failed measured nothing: say why rather than print figures
            reasons = [
                json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()
            ]
            reason = next((r["reason"] for r in reversed(reasons) if r.get("kind") == "state"), "")
            rank = ended[0]
            print(
                f"the worker's run ended {rank['state']} on rank {rank['rank']}: {reason}",
                file=sys.stderr,
            )
            sys.exit(1)
        return ranks, records


def wall_per_step(records: list[dict[str, Any]], warmup_steps: int) -> float:
    """Seconds per step over wall time (what the loop spends at its boundaries included)."""
    kept = measured_steps(records, warmup_steps)
    return (kept[-1]["time"] - kept[0]["time"]) / (kept[-1]["step"] - kept[0]["step"])


def exchange_part(args: argparse.Namespace) -> None:
    ranks, records = launch_worker(args, args.calls, args.warmup)
    print(
        f"1. control channel: RankSync.exchange([]) under torchrun, {WORLD} ranks, gloo, "
        f"OMP_NUM_THREADS=1: {args.calls:,} calls each after {args.warmup:,} warm-up calls"
    )
    means = []
    for rank in ranks:
        us = [ns / 1e3 for ns in rank["idle_ns"]]
        means.append(statistics.fmean(us))
        print(
            f"   rank {rank['rank']}: mean {means[-1]:.1f} us  p50 {statistics.median(us):.1f} us"
            f"  p95 {percentile(us, 0.95):.1f} us  max {max(us):.1f} us;  CPU per exchange "
            f"{rank['idle_cpu_s'] * 1e6 / len(us):.1f} us (this process, gloo's threads included)"
        )
    for rank in ranks:
        bare = [ns / 1e3 for ns in rank["bare_ns"]]
        print(
            f"   gloo's floor, rank {rank['rank']}: a bare all_reduce of the same {rank['size']}"
            f" float64: mean {statistics.fmean(bare):.1f} us  p50 {statistics.median(bare):.1f} us"
            f"  p95 {percentile(bare, 0.95):.1f} us;  CPU {rank['bare_cpu_s'] * 1e6 / len(bare):.1f} us"
        )
    kept = measured_steps(records, args.warmup_steps)
    step_s = statistics.median(r["step_time_s"] for r in kept)
    per_rank = args.grad_accum // WORLD
    print(
        f"   {args.preset} at world {WORLD}: {args.steps} steps, grad_accum={args.grad_accum} "
        f"({per_rank} micro-batch{'es' if per_rank > 1 else ''} per rank), evals/samples/checkpoints off"
        f"{', --set ' + ' '.join(args.overrides) if args.overrides else ''}: median step_time_s "
        f"{step_s * 1e3:.2f} ms over steps {kept[0]['step']}-{kept[-1]['step']} (metrics.jsonl)"
    )
    worst = max(means)  # the slower rank's mean: every rank waits for the exchange to finish
    share = worst * 1e-6 / step_s
    p50_share, p95_share = (
        max(percentile([ns / 1e3 for ns in r["idle_ns"]], q) for r in ranks) * 1e-6 / step_s
        for q in (0.5, 0.95)
    )
    verdict = "PASS" if share < GOAL else "FAIL"
    print(
        f"   per-step cost: mean {worst:.1f} us = {100 * share:.3f}% of a step (p50: "
        f"{100 * p50_share:.3f}%, p95: {100 * p95_share:.3f}%)  goal < {100 * GOAL:.0f}%: {verdict}"
    )
    per_step = max(r["exchanges"] / max(r["steps"], 1) for r in ranks)
    counts = ", ".join(
        f"rank {r['rank']} {r['exchanges']:,} in {r['steps']:,} steps" for r in ranks
    )
    print(
        f"   exchanges in the run (RankSync.exchanges): {counts}: {per_step:.2f} per step "
        "(RankCommands.take, once per loop turn)"
    )
    for rank in ranks:
        # the boundaries after the warm-up steps, as for the step time
        in_run = [ns / 1e3 for ns in rank["in_run_ns"][args.warmup_steps :]] or [0.0]
        print(
            f"   time inside exchange in the run, rank {rank['rank']}: mean "
            f"{statistics.fmean(in_run):.1f} us  p50 {statistics.median(in_run):.1f} us  p95 "
            f"{percentile(in_run, 0.95):.1f} us (with any wait for the other rank to arrive)"
        )


# ------------------------------------------------------------------ 2. the loop with and without
def loop_part(args: argparse.Namespace) -> None:
    print(
        f"2. the loop with its exchange against without (the worker's Trainer, RankSync.exchange "
        f"replaced by a pass-through), {args.preset} at world {WORLD}, {args.steps} steps a run, "
        f"wall time per step from step {args.warmup_steps}, alternating"
    )
    by_side: dict[bool, list[float]] = {True: [], False: []}
    for r in range(args.rounds):
        for with_exchange in (True, False) if r % 2 == 0 else (False, True):
            _, records = launch_worker(args, 0, 0, skip_exchange=not with_exchange)
            by_side[with_exchange].append(wall_per_step(records, args.warmup_steps))
        on, off = by_side[True][-1], by_side[False][-1]
        print(
            f"   round {r + 1}: with {on * 1e3:.2f} ms/step  without {off * 1e3:.2f} ms/step"
            f"  difference {(on - off) * 1e6:+,.0f} us ({100 * (on - off) / off:+.2f}%)"
        )
    on, off = statistics.median(by_side[True]), statistics.median(by_side[False])
    print(
        f"   median: with {on * 1e3:.2f} ms/step  without {off * 1e3:.2f} ms/step  difference "
        f"{(on - off) * 1e6:+,.0f} us ({100 * (on - off) / off:+.2f}%; the rounds' spread is the "
        "machine's noise, the bound on what this can resolve)"
    )


# ------------------------------------------------------------------ 3. world 1 against world 2
def world_run(args: argparse.Namespace, world: int, run_dir: Path) -> tuple[float, float]:
    """(tokens/s over wall time, median recorded tokens_per_s) of one run of the preset."""
    argv = cockpit_argv(args, run_dir, args.tp_steps)
    if world == 1:
        run_to_end([sys.executable, *argv], child_env(threads=None), "the world-1 run")
    else:
        run_to_end(torchrun(*argv), child_env(threads=1), f"the world-{world} run")
    kept = measured_steps(step_records(run_dir), args.warmup_steps)
    first, last = kept[0], kept[-1]
    wall = (last["tokens"] - first["tokens"]) / (last["time"] - first["time"])
    return wall, statistics.median(r["tokens_per_s"] for r in kept)


def throughput_part(args: argparse.Namespace) -> None:
    cores = os.cpu_count() or 1
    print(
        f"3. tokens/s, {args.preset}, grad_accum={args.grad_accum} (the same global batch), "
        f"{args.tp_steps} steps a run, from step {args.warmup_steps}: world 1 (one process, torch's "
        f"default threads) against world {WORLD} (torchrun, OMP_NUM_THREADS=1), alternating"
    )
    by_world: dict[int, list[tuple[float, float]]] = {1: [], WORLD: []}
    with tempfile.TemporaryDirectory(prefix="bench-distributed-") as tmp:
        for r in range(args.rounds):
            order = (1, WORLD) if r % 2 == 0 else (WORLD, 1)
            for world in order:
                by_world[world].append(world_run(args, world, Path(tmp, f"r{r}-w{world}")))
            one, two = by_world[1][-1], by_world[WORLD][-1]
            print(
                f"   round {r + 1}: world 1 {one[0]:,.0f} tok/s (recorded {one[1]:,.0f})   "
                f"world {WORLD} {two[0]:,.0f} tok/s (recorded {two[1]:,.0f})   ratio {two[0] / one[0]:.3f}"
            )
    one = statistics.median(w for w, _ in by_world[1])
    two = statistics.median(w for w, _ in by_world[WORLD])
    print(
        f"   median: world 1 {one:,.0f} tok/s  world {WORLD} {two:,.0f} tok/s  ratio {two / one:.3f}"
        f" (no goal: {cores} cores here, shared by both ranks; the single process has them all)"
    )


# ------------------------------------------------------------------ the command line
def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="nanogpt-cpu")
    parser.add_argument(
        "--data", default=None, help="a corpus for the runs (default: the preset's)"
    )
    parser.add_argument("--calls", type=int, default=2000, help="timed exchanges per rank")
    parser.add_argument("--warmup", type=int, default=200, help="exchanges before the timed ones")
    parser.add_argument("--steps", type=int, default=200, help="steps of part 1's run")
    parser.add_argument("--tp-steps", type=int, default=300, help="steps of each run of part 2")
    parser.add_argument(
        "--warmup-steps", type=int, default=20, help="steps left out of the figures"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--grad-accum", type=int, default=2)
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="another config override for every run (e.g. train.batch_size=8)",
    )  # fmt: skip
    parser.add_argument(
        "--parts", default=",".join(PARTS), help=f"comma-separated, from {', '.join(PARTS)}"
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--run-dir", help=argparse.SUPPRESS)
    parser.add_argument("--skip-exchange", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return args
    args.parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    unknown = args.parts - set(PARTS)
    if unknown:
        parser.error(f"unknown part {', '.join(sorted(unknown))}: choose from {', '.join(PARTS)}")
    for name in ("calls", "steps", "tp_steps", "rounds", "grad_accum"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.grad_accum % WORLD:
        parser.error(f"--grad-accum must be a multiple of {WORLD} (each rank takes an equal share)")
    if args.data and not Path(args.data).exists():
        parser.error(f"--data {args.data}: no such file or folder; pass a corpus that exists")
    from engine.config import ConfigError, load_preset

    try:
        load_preset(args.preset, run_overrides(args, args.steps))
    except ConfigError as e:  # a bad preset or --set: one line, before anything starts
        parser.error(str(e))
    return args


def main() -> None:
    args = parse()
    if args.worker:
        sys.exit(worker(args))
    if "exchange" in args.parts:
        exchange_part(args)
    if "loop" in args.parts:
        loop_part(args)
    if "throughput" in args.parts:
        throughput_part(args)


if __name__ == "__main__":
    main()
