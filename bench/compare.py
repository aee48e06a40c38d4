"""What overlaying other runs costs a live run: tokens/s with 5 runs overlaid on the loss curve
against the cockpit alone, side by side in one run.

    python bench/compare.py [--rounds 6] [--window 10] [--steps 100000] [--preset nanogpt-cpu]
    python bench/compare.py --rounds 1 --window 1 --steps 500 --preset tiny --torch-threads 1

One real run in this process: the app (Textual's headless driver at 160x48: layout, plots and
compositing run, only the terminal writes are dropped) training PRESET with the real Trainer on
Tiny Shakespeare, evaluation, samples and periodic checkpoints off, so that every window measures
training steps only, and no telemetry thread (the same on both sides; one thread fewer to add
noise). On a machine others load, torch's threads waiting on each other at every operation can
make steps a hundred times slower now and then: `--torch-threads 1` avoids that (the ratio is of
one run with itself). Five finished runs of STEPS steps each are written first, as
bench/open_run.py writes them (each its own noise).

Each round holds two windows of WINDOW seconds, the cockpit alone and with the five runs
overlaid, their order alternating from round to round so that a machine speeding up or slowing
down hits both alike. The overlays come as the runs screen brings them (`app.overlay_runs`:
read in the app's worker); the window starts once they are on the panel and their toast is
cleared, and after a settling time of 2 s (at most WINDOW) on both sides: reading the runs,
recomposing the screen as the toast goes and the overlays' first smoothing are done once, when
they are opened, not as the run goes. They leave with `app.main_screen.loss_panel.set_overlays([])`.
Tokens/s of a window: from the engine's Step events inside it (the first and the last step's
tokens and times). Goal (issue 16): overlaid / alone >= 0.99.

Beside it, figures that do not drift with the machine's load: the UI thread's CPU seconds per
second of each window (with the overlays minus without, against the process's CPU: what the
overlays cost), and the loss panel's draw time (each build of its plot, UI-thread CPU and wall
ms) with and without overlays.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

REPO = Path(__file__).resolve().parents[1]
for where in (REPO, REPO / "bench"):  # the packages, and bench/open_run.py beside this file
    if str(where) not in sys.path:
        sys.path.insert(0, str(where))

from open_run import write_run  # noqa: E402

from engine.config import ConfigError, load_preset  # noqa: E402
from engine.events import Event  # noqa: E402

if TYPE_CHECKING:
    from cockpit.app.cockpit_app import CockpitApp
    from engine.train import Trainer

SHAKESPEARE = REPO.parent / "shared" / "data" / "tinyshakespeare" / "input.txt"
SIZE = (160, 48)
OVERLAYS = 5
GOAL = 0.99
CORES = os.cpu_count() or 1
QUIET = [
    "eval.interval=0",
    "sample.interval=0",
    "checkpoint.interval=0",
    "train.max_steps=100000000",
]
WARMUP_STEPS = 10  # the first steps (allocations, the first drawing) are in no window
SETTLE_S = 2.0  # after a switch, before a window (at most the window): its one-time work done
MIN_STEPS = 3  # a window is stretched until it holds at least this many steps (a loaded machine)
SETUP_TIMEOUT_S = 300.0  # a run that has not stepped, or overlays not shown, by then: a failure


@dataclass
class Window:
    """One window's figures."""

    overlaid: bool
    tokens_per_s: float
    steps: int
    ui_cpu_per_s: float  # the UI thread's CPU seconds per wall second
    process_cpu_per_s: float


@dataclass
class DrawClock:
    """Times each build of the loss panel's plot (its `_draw`), filed under the current label
    (None: not inside a window, not counted)."""

    label: bool | None = None
    cpu: dict[bool, list[float]] = field(default_factory=lambda: {False: [], True: []})
    wall: dict[bool, list[float]] = field(default_factory=lambda: {False: [], True: []})

    def wrap(self, panel: Any) -> None:
        build = panel._draw

        def timed(*args: Any) -> Any:
            cpu0, wall0 = time.thread_time(), time.perf_counter()
            try:
                return build(*args)
            finally:
                if self.label is not None:
                    self.cpu[self.label].append(time.thread_time() - cpu0)
                    self.wall[self.label].append(time.perf_counter() - wall0)

        panel._draw = timed  # on the instance: row_strips looks it up there first


class StepLog:
    """The engine's Step events, as (time, tokens): a sink the trainer calls on its thread."""

    def __init__(self) -> None:
        self.steps: list[tuple[float, int]] = []

    def __call__(self, event: Event) -> None:
        if event.kind == "step":
            self.steps.append((event.time, event.tokens))  # type: ignore[attr-defined]

    def rate(self, t0: float, t1: float) -> tuple[float, int]:
        """Tokens/s over the steps whose time is within [t0, t1], and how many there were."""
        inside = [s for s in list(self.steps) if t0 <= s[0] <= t1]
        if len(inside) < 2:
            raise RuntimeError(
                f"only {len(inside)} steps in a {t1 - t0:.1f} s window: is the run stuck?"
            )
        (first_t, first_tok), (last_t, last_tok) = inside[0], inside[-1]
        return (last_tok - first_tok) / (last_t - first_t), len(inside)


async def wait_until(condition: Any, what: str, timeout_s: float = SETUP_TIMEOUT_S) -> None:
    # plain sleeps: pilot.pause() would add a round trip through every widget
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        await asyncio.sleep(0.02)


async def show_overlays(app: CockpitApp, run_dirs: list[Path], on: bool) -> None:
    """The runs overlaid as the runs screen overlays them, or none."""
    panel = app.main_screen.loss_panel
    if on:
        app.overlay_runs(run_dirs)
        await wait_until(lambda: len(panel.overlays) == len(run_dirs), "the overlays on the panel")
        app.clear_notifications()  # the "Comparing" toast: opening's, not drawing's
    else:
        panel.set_overlays([])
        panel.flush(force=True)


async def window(
    app: CockpitApp, log: StepLog, clock: DrawClock, seconds: float, overlaid: bool
) -> Window:
    t0, ui0, proc0 = time.time(), time.thread_time(), time.process_time()
    clock.label = overlaid
    await asyncio.sleep(seconds)
    await wait_until(
        lambda: sum(t >= t0 for t, _ in log.steps[-MIN_STEPS:]) >= MIN_STEPS, "steps in the window"
    )
    clock.label = None
    t1, ui1, proc1 = time.time(), time.thread_time(), time.process_time()
    # the window's last step may still be on its way through the sink: wait for one past it
    await wait_until(lambda: log.steps[-1][0] > t1, "a step after the window", timeout_s=60)
    tokens_per_s, steps = log.rate(t0, t1)
    return Window(
        overlaid, tokens_per_s, steps, (ui1 - ui0) / (t1 - t0), (proc1 - proc0) / (t1 - t0)
    )


async def measure(
    args: argparse.Namespace, run_dirs: list[Path], train_dir: Path
) -> tuple[list[Window], DrawClock, float]:
    """The rounds' windows, the draw clock, and the run's median step time (s)."""
    # imported here, not above: a bad option is refused without waiting for torch and Textual
    from cockpit.app.cockpit_app import CockpitApp
    from engine.train import Trainer

    if args.torch_threads:
        import torch

        torch.set_num_threads(args.torch_threads)
    log = StepLog()
    made: list[Trainer] = []

    def factory(preset: str) -> Trainer:
        cfg = load_preset(preset, QUIET)
        # no telemetry thread: it would cost the same on both sides and only add noise
        made.append(
            Trainer(cfg, run_dir=train_dir, data_path=args.data, sinks=[log], telemetry=False)
        )
        return made[-1]

    app = CockpitApp(factory, args.preset)
    clock = DrawClock()
    windows: list[Window] = []
    async with app.run_test(size=SIZE):
        await wait_until(lambda: len(log.steps) >= WARMUP_STEPS, f"{WARMUP_STEPS} steps of the run")
        clock.wrap(app.main_screen.loss_panel)
        try:
            for r in range(args.rounds):
                order = (False, True) if r % 2 == 0 else (True, False)
                for overlaid in order:
                    await show_overlays(app, run_dirs, overlaid)
                    # the switch's own work (the whole screen recomposed as the toast goes, the
                    # overlays' first smoothing and downsampling) is once, not per step
                    await asyncio.sleep(min(SETTLE_S, args.window))
                    windows.append(await window(app, log, clock, args.window, overlaid))
                alone, over = sorted(windows[-2:], key=lambda w: w.overlaid)
                print(
                    f"   round {r + 1}: alone {alone.tokens_per_s:,.0f} tok/s ({alone.steps} steps)"
                    f"   5 overlaid {over.tokens_per_s:,.0f} tok/s ({over.steps} steps)"
                    f"   ratio {over.tokens_per_s / alone.tokens_per_s:.4f}"
                    f"   UI thread CPU s/s {alone.ui_cpu_per_s:.4f} -> {over.ui_cpu_per_s:.4f}",
                    flush=True,
                )
        finally:
            made[0].stop(checkpoint=False)
            await wait_until(
                lambda: made[0].state in ("stopped", "finished", "failed"), "the run to stop", 60
            )
    times = [
        b[0] - a[0]
        for a, b in zip(log.steps[WARMUP_STEPS:], log.steps[WARMUP_STEPS + 1 :], strict=False)
    ]
    return windows, clock, statistics.median(times) if times else float("nan")


def report(windows: list[Window], clock: DrawClock, rounds: int) -> None:
    pairs = [sorted(windows[2 * r : 2 * r + 2], key=lambda w: w.overlaid) for r in range(rounds)]
    ratios = [over.tokens_per_s / alone.tokens_per_s for alone, over in pairs]
    median_ratio = statistics.median(ratios)
    verdict = "PASS" if median_ratio >= GOAL else "FAIL"
    print(
        f"   tokens/s with {OVERLAYS} runs overlaid / the cockpit alone: median of {rounds} rounds "
        f"{median_ratio:.4f} (goal >= {GOAL}: {verdict}); rounds: {', '.join(f'{x:.4f}' for x in ratios)}"
    )
    ui = {
        side: statistics.median(w.ui_cpu_per_s for w in windows if w.overlaid == side)
        for side in (False, True)
    }
    process = statistics.median(w.process_cpu_per_s for w in windows)
    print(
        f"   UI thread CPU s per s (medians): alone {ui[False]:.4f}  overlaid {ui[True]:.4f}; the overlays "
        f"add {100 * (ui[True] - ui[False]) / process:+.2f}% of the process's CPU ({process:.2f} s/s), "
        # a loaded machine gives the process less CPU, not the UI thread: against the cores a run
        # would have to itself, the figure does not depend on the load
        f"{100 * (ui[True] - ui[False]) / CORES:+.2f}% of {CORES} cores"
    )
    for side, name in ((False, "alone"), (True, f"{OVERLAYS} overlaid")):
        cpu, wall = clock.cpu[side], clock.wall[side]
        if not cpu:  # the panel redraws at most once a second: a short window may hold none
            print(f"   loss panel draw, {name}: no draw in the windows")
            continue
        print(
            f"   loss panel draw, {name}: {len(cpu)} draws, median UI-thread CPU "
            f"{statistics.median(cpu) * 1e3:.1f} ms, wall {statistics.median(wall) * 1e3:.1f} ms"
        )


def threads_note(threads: int) -> str:
    return f" (torch on {threads} thread{'s' if threads > 1 else ''})" if threads else ""


def warn_of_load() -> None:
    """Say so when other work loads the machine: it swamps a 1% difference in tokens/s."""
    load = os.getloadavg()[0]
    if load > CORES:
        print(
            f"   warning: load average {load:.1f} on {CORES} cores (other work): the tokens/s ratios "
            "measure it more than the overlays; the CPU and draw figures hold"
        )


def problem(args: argparse.Namespace) -> str | None:
    """The one line why these options cannot run, or None."""
    if args.rounds < 1 or args.steps < 1:
        return "--rounds and --steps must be at least 1"
    if args.torch_threads < 0:
        return "--torch-threads must be 0 (torch's own choice) or more"
    if args.window <= 0:
        return "--window must be a positive number of seconds"
    if not Path(args.data).is_file():
        return f"no corpus at {args.data}: pass --data PATH (a text file)"
    try:
        load_preset(args.preset, QUIET)
    except ConfigError as e:
        return f"--preset {args.preset}: {e}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rounds", type=int, default=6, help="rounds of two windows each (default 6)"
    )
    parser.add_argument(
        "--window", type=float, default=10.0, help="seconds per window (default 10)"
    )
    parser.add_argument(
        "--steps", type=int, default=100_000, help="steps of each overlaid run (default 100,000)"
    )
    parser.add_argument(
        "--preset", default="nanogpt-cpu", help="the live run's preset (default nanogpt-cpu)"
    )
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=0,
        help="torch's intra-op threads for the run (default: torch's own choice); 1 on a loaded machine",
    )
    parser.add_argument(
        "--data", default=os.environ.get("COCKPIT_TINYSHAKESPEARE", str(SHAKESPEARE))
    )
    args = parser.parse_args(argv)
    why = problem(args)
    if why is not None:
        print(f"compare: {why}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="compare-") as tmp:
        t0 = time.perf_counter()
        run_dirs = [Path(tmp) / f"overlay-{i + 1}" for i in range(OVERLAYS)]
        for seed, run_dir in enumerate(run_dirs):
            write_run(run_dir, args.steps, seed=seed)
        print(f"wrote {OVERLAYS} runs of {args.steps:,} steps in {time.perf_counter() - t0:.1f} s")
        print(
            f"{args.preset} live in the app at {SIZE[0]}x{SIZE[1]}{threads_note(args.torch_threads)}: "
            f"{args.rounds} rounds of 2 windows "
            f"of {args.window:g} s (alone, {OVERLAYS} overlaid), alternating",
            flush=True,
        )
        windows, clock, step_s = asyncio.run(measure(args, run_dirs, Path(tmp) / "live"))
        print(f"   the run's median step: {step_s * 1e3:.1f} ms")
        report(windows, clock, args.rounds)
        warn_of_load()
    return 0


if __name__ == "__main__":
    sys.exit(main())
