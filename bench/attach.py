"""What attached viewers cost a run, how fast a pause goes through the socket, how long attaching takes.

    python bench/attach.py [--rounds 6] [--window 10] [--presses 20] [--history 100000]
    python bench/attach.py --tiny --rounds 1 --window 1 ...   (the smoke test's settings)

One engine process per part: `cockpit train --headless --no-telemetry` (`nanogpt-cpu` on Tiny
Shakespeare; `--tiny`: the `tiny` preset), serving RUN_DIR/control.sock. Evaluation, samples
and periodic checkpoints are off, so every window measures training steps only.

1. Viewer cost: tokens/s of the run with no viewer, one and three viewers attached, in
   alternating rounds (each round's order rotated and reversed, so the machine's drift hits
   every side alike), from the run's own step records (tokens over time within each window).
   A viewer is either what a person runs, `cockpit attach RUN_DIR` in its own tmux session at
   160x48 ("app"), or a bare protocol client, `RemoteEngine` drained every 50 ms ("bare"): the
   socket's own cost (the server's queues, JSON encoding, writes) apart from the apps' drawing.
   Goals: >= 0.97 of no viewer with one viewer, >= 0.95 with three. On a 2-core machine the
   apps' drawing competes with the run for the same cores: each window also reports the CPU
   seconds per second of the engine process and of the viewers, and the tokens per engine
   CPU second (what the engine process spends per token, its socket threads included). A
   load average well above the cores (someone else's work) is warned of: it swamps the ratios.
2. Pause latency through the socket: the app attached in this process (`attached_app`,
   Textual's headless driver at 160x48), the pause key handed to it as its terminal driver
   does, at a random point of a step; the time until the run's StateChanged "paused" arrives at
   the viewer's reader (goal: p95 < the run's step time + 50 ms), and key-to-drawn: until the
   first frame showing PAUSED is handed to the app's terminal driver (bench/drawn.py), with the
   part from the run's stamp on its event to that frame (goal: p95 < 100 ms).
3. Attach time: a resumed live run whose history holds 100,000 steps (a real run of a few
   steps, its metrics.jsonl rewritten with 100,000 step records and an eval every 250, its
   checkpoint's step set to 100,000, then `--resume`d headless: the server replays what a real
   run of that length would). The time from `RemoteEngine(RUN_DIR)` to the app having drawn
   the loss panel with every replayed point up to the newest step. Median of 5. Goal: < 1 s.
   A fresh `cockpit attach` process also imports the app first: that time is printed beside.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # `python bench/attach.py` puts bench/ first, not the root
    sys.path.insert(0, str(REPO))

from textual import events  # noqa: E402

from bench.drawn import FrameWatch  # noqa: E402
from cockpit.cli.attach import attached_app  # noqa: E402
from engine.control import RemoteEngine, probe  # noqa: E402
from engine.events import StateChanged  # noqa: E402
from tests.live_process import LiveRun, run_process  # noqa: E402
from tests.tmux_driver import TMUX_INSTALLED, Tmux  # noqa: E402

SHAKESPEARE = REPO.parent / "shared" / "data" / "tinyshakespeare" / "input.txt"
SIZE = (160, 48)
QUIET = ["eval.interval=0", "sample.interval=0", "checkpoint.interval=0"]
GOALS = {1: 0.97, 3: 0.95}  # viewers -> the least tokens/s ratio against no viewer
DRAIN_S = 0.05  # how often a bare client empties its queue (the app's timer is as fast)
DRAIN_TICK_S = 0.25  # the app's tick, which drains the routine readings (event_feed.py's TICK_S)
PY = shlex.quote(sys.executable)
MIN_STEPS = 3  # a window is stretched until it holds at least this many steps
TICKS = os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------------ the engine process
def engine_run(run_dir: Path, preset: str, data: str | None, steps: int = 10_000_000) -> LiveRun:
    """A headless run of `preset` (long, quiet: no evals, samples or periodic checkpoints)."""
    run = LiveRun(run_dir, *QUIET, preset=preset, steps=steps)
    if data:
        run.argv += ["--data", data]
    return run


@contextmanager
def running(run: LiveRun) -> Iterator[LiveRun]:
    try:
        yield run.start()
    finally:
        run.close()


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user + system, all threads) the process `pid` has used; 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS


def window_tokens_per_s(run: LiveRun, t0: float, t1: float) -> tuple[float, int]:
    """Tokens/s over the step records written between the wall times t0 and t1, and how many."""
    # the run flushes metrics.jsonl about once a second: wait for a step past the window
    wait_until(lambda: any(r["time"] > t1 for r in run.records("step")[-5:]), 30, "the window's steps on disk")
    inside = [r for r in run.records("step") if t0 <= r["time"] <= t1]
    if len(inside) < 2:
        raise RuntimeError(f"only {len(inside)} steps in a {t1 - t0:.1f} s window: is the run stuck?")
    first, last = inside[0], inside[-1]
    return (last["tokens"] - first["tokens"]) / (last["time"] - first["time"]), len(inside)


def end_of_window(run: LiveRun, t0: float) -> float:
    """Now, or once MIN_STEPS steps since `t0` are on disk when fewer are (a slow or loaded
    machine): a window must hold steps to measure."""
    deadline = time.monotonic() + 120
    while sum(r["time"] >= t0 for r in run.records("step")[-MIN_STEPS:]) < MIN_STEPS:
        if time.monotonic() > deadline:
            break  # window_tokens_per_s says what is missing
        time.sleep(0.25)
    return time.time()


def viewer_count(run_dir: Path) -> int:
    live = probe(run_dir, timeout_s=2.0)
    return -1 if live is None else len(live.viewers)


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.1)


# ------------------------------------------------------------------ viewers
class BareClient:
    """A protocol client that does what the app's timer does with the events, minus drawing:
    drains them every 50 ms."""

    def __init__(self, run_dir: Path) -> None:
        self.engine = RemoteEngine(run_dir, who="bench bare client")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        while not self._stop.wait(DRAIN_S):
            self.engine.drain_events()

    def ready(self) -> bool:
        return self.engine.live

    def pid(self) -> int | None:
        return None  # threads of this process: their CPU is in "bench"

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.engine.close()


class AppViewer:
    """`cockpit attach RUN_DIR` in its own tmux session at 160x48: what a person runs."""

    def __init__(self, run_dir: Path) -> None:
        command = f"exec {PY} -m cockpit attach {shlex.quote(str(run_dir))}"
        self.tmux = Tmux(command, *SIZE, prefix="cockpit-bench")
        out = subprocess.run(
            self.tmux.argv("list-panes", "-t", self.tmux.name, "-F", "#{pane_pid}"),
            capture_output=True, text=True,
        )  # fmt: skip
        self._pid = int(out.stdout.split()[0]) if out.stdout.strip() else None

    def ready(self) -> bool:
        return "RUNNING" in self.tmux.screen()  # the status line: attached and drawn

    def pid(self) -> int | None:
        return self._pid

    def close(self) -> None:
        self.tmux.kill()  # SIGHUP: the viewer detaches, the run goes on


def attach_viewers(kind: str, count: int, run_dir: Path) -> list[Any]:
    viewers: list[Any] = []
    try:
        for _ in range(count):
            viewers.append(AppViewer(run_dir) if kind == "app" else BareClient(run_dir))
        wait_until(lambda: all(v.ready() for v in viewers), 90, f"{count} {kind} viewer(s)")
        wait_until(lambda: viewer_count(run_dir) == count, 30, f"{count} viewer(s) on the socket")
    except BaseException:
        detach_viewers(viewers, run_dir)
        raise
    return viewers


def detach_viewers(viewers: list[Any], run_dir: Path) -> None:
    for viewer in viewers:
        viewer.close()
    wait_until(lambda: viewer_count(run_dir) == 0, 30, "the viewers to leave")


# ------------------------------------------------------------------ 1. viewer cost
def measure_window(
    run: LiveRun, kind: str, count: int, window_s: float, settle_s: float
) -> dict[str, float]:
    """tokens/s of `run` over `window_s` with `count` viewers of `kind` attached (after they
    drew the replay and `settle_s` more), and the CPU s/s of the engine and of the viewers."""
    viewers = attach_viewers(kind, count, run.run_dir) if count else []
    try:
        time.sleep(settle_s)
        pids = [p for v in viewers if (p := v.pid()) is not None]
        engine0, viewers0, bench0 = process_cpu_s(run.pid), sum(map(process_cpu_s, pids)), time.process_time()
        t0 = time.time()
        time.sleep(window_s)
        t1 = end_of_window(run, t0)
        engine1, viewers1, bench1 = process_cpu_s(run.pid), sum(map(process_cpu_s, pids)), time.process_time()
    finally:
        detach_viewers(viewers, run.run_dir)
    tok_s, steps = window_tokens_per_s(run, t0, t1)
    engine_cpu = (engine1 - engine0) / (t1 - t0)
    return {
        "tok_s": tok_s,
        "steps": steps,
        "engine_cpu": engine_cpu,
        "tok_per_cpu_s": tok_s / engine_cpu,
        "viewer_cpu": (viewers1 - viewers0) / (t1 - t0),
        "bench_cpu": (bench1 - bench0) / (t1 - t0),
    }


def warn_if_loaded() -> None:
    """Say so when other work shares the machine: the run keeps about one thread per core busy
    (torch's), so a load average well above the cores is someone else's work."""
    cores = os.cpu_count() or 1
    load = os.getloadavg()[1]  # the last 5 minutes: about the length of part 1
    if load > cores + 1:
        print(
            f"   WARNING: load average {load:.1f} on {cores} cores: other work shares this machine,"
            " and the rounds above measure it as much as the viewers; rerun on a quiet machine"
        )


def round_order(configs: list[tuple[str, int]], r: int) -> list[tuple[str, int]]:
    """Each round starts elsewhere in the list and every other round runs it backwards."""
    k = r % len(configs)
    order = configs[k:] + configs[:k]
    return order[::-1] if r % 2 else order


def label(kind: str, count: int) -> str:
    if count == 0:
        return "no viewer"
    noun = {"app": "app", "bare": "bare client"}[kind]
    return f"{count} {noun}{'s' if count > 1 else ''}"


def viewer_cost(args: argparse.Namespace, run: LiveRun) -> None:
    configs = [("none", 0)] + [(k, n) for k in args.kinds for n in args.counts if n > 0]
    print(
        f"1. viewer cost: {args.preset}, tokens/s from the run's step records over {args.window:.0f} s"
        f" windows, {args.rounds} rounds, orders rotated and alternated;"
        f" viewers: {', '.join(args.kinds)} ({os.cpu_count()} cores here: the viewers' own CPU"
        " competes with the run's, see 'viewer CPU')"
    )
    results: dict[tuple[str, int], list[dict[str, float]]] = {c: [] for c in configs}
    ratios: dict[tuple[str, int], list[float]] = {c: [] for c in configs if c[1]}
    cpu_ratios: dict[tuple[str, int], list[float]] = {c: [] for c in configs if c[1]}
    print(f"   load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for r in range(args.rounds):
        this_round: dict[tuple[str, int], dict[str, float]] = {}
        for kind, count in round_order(configs, r):
            this_round[kind, count] = measure_window(run, kind, count, args.window, args.settle)
        base = this_round["none", 0]["tok_s"]
        base_per_cpu = this_round["none", 0]["tok_per_cpu_s"]
        cells = []
        for config in configs:
            m = this_round[config]
            results[config].append(m)
            cell = f"{label(*config)} {m['tok_s']:,.0f}"
            if config[1]:
                ratios[config].append(m["tok_s"] / base)
                cpu_ratios[config].append(m["tok_per_cpu_s"] / base_per_cpu)
                cell += f" ({ratios[config][-1]:.3f})"
            cells.append(cell)
        print(f"   round {r + 1}: tok/s " + "   ".join(cells))
    print(f"   load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print_viewer_cost(configs, results, ratios, cpu_ratios)
    warn_if_loaded()


def print_viewer_cost(
    configs: list[tuple[str, int]],
    results: dict[tuple[str, int], list[dict[str, float]]],
    ratios: dict[tuple[str, int], list[float]],
    cpu_ratios: dict[tuple[str, int], list[float]],
) -> None:
    for config in configs:
        ms = results[config]
        tok_s = statistics.median(m["tok_s"] for m in ms)
        per_cpu = statistics.median(m["tok_per_cpu_s"] for m in ms)
        engine = statistics.median(m["engine_cpu"] for m in ms)
        viewer = statistics.median(m["viewer_cpu"] + (m["bench_cpu"] if config[0] == "bare" else 0) for m in ms)
        line = (
            f"   {label(*config):>14}: median {tok_s:,.0f} tok/s ({statistics.median(m['steps'] for m in ms):.0f} steps"
            f" a window)  engine CPU {engine:.2f} s/s  viewer CPU {viewer:.2f} s/s"
            f"  {per_cpu:,.0f} tokens per engine CPU s"
        )
        if config[1]:
            ratio = statistics.median(ratios[config])
            spread = f" (rounds {min(ratios[config]):.3f}-{max(ratios[config]):.3f})" if len(ratios[config]) > 1 else ""
            goal = GOALS.get(config[1])
            verdict = "" if goal is None else f" goal >= {goal:.2f}: {'PASS' if ratio >= goal else 'FAIL'}"
            line += (
                f"  ratio to no viewer: median {ratio:.3f}{spread}{verdict}"
                f"  (per engine CPU s: {statistics.median(cpu_ratios[config]):.3f})"
            )
        print(line)
    print(
        "   (viewer CPU: the attach processes' own CPU for apps; this process's for bare clients,"
        " which includes the bench's own bookkeeping. Tokens per engine CPU second count what"
        " the engine process spends per token, its socket threads included, whoever else wants"
        " the cores; the tokens/s ratio adds the viewers' competition for them)"
    )


# ------------------------------------------------------------------ 2. pause latency
def press_like_a_terminal(app: Any, key: str) -> None:
    """Hand a key to the app as its terminal driver does when the bytes arrive (`pilot.press`
    would also wait for the app to look idle: harness work no terminal does)."""
    event = events.Key(key, " " if key == "space" else key)
    event.set_sender(app)
    app._driver.send_message(event)


class WatchedEngine(RemoteEngine):
    """A RemoteEngine that notes, as its reader receives them, the step records of the replay
    and the time of each live StateChanged (a subclass: its reader starts in __init__)."""

    def __init__(self, run_dir: Path) -> None:
        self.replayed_steps = 0
        self.live_at: float | None = None  # perf_counter when the replay's end arrived
        # (state, perf_counter when it arrived, the run's time.time() stamp on it)
        self.states: list[tuple[str, float, float]] = []
        super().__init__(run_dir)

    def _handle(self, record: dict[str, Any]) -> None:
        super()._handle(record)
        if record.get("kind") == "live" and self.live_at is None:
            self.live_at = time.perf_counter()

    def _track(self, event: Any) -> None:
        super()._track(event)
        if not self.live:
            self.replayed_steps += event.kind == "step"
        elif isinstance(event, StateChanged):
            self.states.append((event.state, time.perf_counter(), event.time))


def steps_after(app: Any, steps: int) -> Callable[[], bool]:
    """A condition: the app has seen `steps` more steps than now."""
    target = app.view.step + steps
    return lambda: app.view.step >= target


async def wait_async(condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError("timed out waiting for the attached app")
        await asyncio.sleep(0.002)


async def pause_presses(run_dir: Path, presses: int, step_s: float) -> dict[str, list[float]]:
    """Per press, in seconds: "arrived", until the "paused" StateChanged reached the viewer's
    reader; "to_ack", until the run's event was stamped (the run's clock: the same machine's);
    "ack_to_drawn", from that stamp until the frame showing PAUSED was handed to the terminal
    driver; "to_drawn", from the key to that frame."""
    engine = WatchedEngine(run_dir)
    states = engine.states
    app = attached_app(engine)
    out: dict[str, list[float]] = {"arrived": [], "to_ack": [], "ack_to_drawn": [], "to_drawn": []}
    phase = random.Random(0)
    async with app.run_test(size=SIZE):
        frames = FrameWatch(app)
        status = app.main_screen.status_line
        await wait_async(lambda: engine.live and app.state == "running")
        await asyncio.sleep(1.0)  # the replay drawn
        for _ in range(presses):
            # a person presses at any point of a step, and of the app's drain (this loop may
            # wake right after one): wait a random part of both first
            await asyncio.sleep(phase.uniform(0, step_s) + phase.uniform(0, DRAIN_TICK_S))
            del states[:]
            frames.arm(lambda: status.state == "paused", "PAUSED")
            pressed, pressed_wall = time.perf_counter(), time.time()
            press_like_a_terminal(app, "space")
            await wait_async(frames.drawn.is_set)
            out["to_drawn"].append(frames.drawn_perf - pressed)
            await wait_async(lambda: any(s == "paused" for s, _, _ in states))
            arrived, stamped = next((t, w) for s, t, w in states if s == "paused")
            out["arrived"].append(arrived - pressed)
            out["to_ack"].append(stamped - pressed_wall)
            out["ack_to_drawn"].append(frames.drawn_wall - stamped)
            press_like_a_terminal(app, "space")  # resume, and let a few steps run
            await wait_async(lambda: app.state == "running")
            await wait_async(steps_after(app, 5))
        app.detach()
    return out


def p50_p95(values: list[float]) -> str:
    return f"p50 {statistics.median(values) * 1e3:.1f} ms  p95 {percentile(values, 0.95) * 1e3:.1f} ms"


def pause_latency(args: argparse.Namespace, run: LiveRun) -> None:
    step_s = statistics.median(r["step_time_s"] for r in run.records("step")[-50:])
    times = asyncio.run(pause_presses(run.run_dir, args.presses, step_s))
    step_s = statistics.median(r["step_time_s"] for r in run.records("step")[-200:])
    goal = step_s + 0.05
    arrived = times["arrived"]
    p95 = percentile(arrived, 0.95)
    print(
        f"2. pause key -> StateChanged 'paused' at the viewer, through the socket, {len(arrived)} presses:"
        f" {p50_p95(arrived)}"
        f"  (goal p95 < step {step_s * 1e3:.1f} ms + 50 ms = {goal * 1e3:.1f} ms: {'PASS' if p95 < goal else 'FAIL'})\n"
        "   key -> drawn (the first frame handed to the attached app's terminal driver that shows"
        f" PAUSED, its bytes encoded as a terminal's would be): {p50_p95(times['to_drawn'])}\n"
        f"   the run's acknowledgement (its event's stamp) -> drawn: {p50_p95(times['ack_to_drawn'])}"
        f"  (goal p95 < 100 ms: {'PASS' if percentile(times['ack_to_drawn'], 0.95) < 0.1 else 'FAIL'});"
        f" key -> that stamp: {p50_p95(times['to_ack'])}"
    )


# ------------------------------------------------------------------ 3. attach time
def cockpit_train(*argv: str) -> None:
    done = run_process(  # a new interpreter (started warm under a test)
        [sys.executable, "-m", "cockpit", "train", "--headless", "--no-telemetry", *argv],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"cockpit train {' '.join(argv)} failed: {done.stdout[-1000:]}{done.stderr[-1000:]}")


def build_long_history(run_dir: Path, preset: str, data: str | None, history: int) -> None:
    """A run directory as a run of `history` steps leaves it: a real run of 5 steps, its step
    records replaced by `history` of them (an eval every 250 steps), its checkpoint moved to
    step `history`."""
    import torch

    cockpit_train("--preset", preset, "--run-dir", str(run_dir), "--set", "train.max_steps=5",
                  *(a for o in QUIET for a in ("--set", o)), *(["--data", data] if data else []))  # fmt: skip
    metrics = run_dir / "metrics.jsonl"
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    first_step = next(i for i, r in enumerate(records) if r["kind"] == "step")
    step_record = records[first_step]
    tokens_per_step = step_record["tokens"] // step_record["step"]
    t0 = step_record["time"]
    with metrics.open("w", encoding="utf-8") as out:
        for record in records[:first_step]:  # state, data progress, run_started
            out.write(json.dumps(record) + "\n")
        for s in range(1, history + 1):
            loss = 1.5 + 2.5 * 0.9997**s + 0.02 * ((s * 7919) % 13 - 6) / 6
            t = t0 + 0.03 * s
            step = {**step_record, "time": t, "step": s, "loss": loss, "tokens": tokens_per_step * s}
            out.write(json.dumps(step) + "\n")
            if s % 250 == 0:
                out.write(json.dumps({"kind": "eval", "time": t, "step": s, "train_loss": loss,
                                      "val_loss": loss + 0.05, "train_time_s": 0.03 * s}) + "\n")  # fmt: skip
    [checkpoint] = [p for p in run_dir.glob("ckpt-*.pt")]
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    state.update(step=history, tokens=tokens_per_step * history, train_time_s=0.03 * history)
    torch.save(state, run_dir / f"ckpt-{history:08d}.pt")
    checkpoint.unlink()
    (run_dir / "best.pt").unlink(missing_ok=True)


PHASES = ("connected", "replay in", "routed", "drawn")  # attach's milestones, in order


async def attach_until_drawn(run_dir: Path, history: int) -> tuple[dict[str, float], int]:
    """Seconds from RemoteEngine(run_dir) to each of PHASES: connected (the hello read), the
    replay in (its last record received), routed (every replayed step in the loss panel) and
    drawn (a rendered frame of the panel holding all of them); and how many steps were
    replayed."""
    start = time.perf_counter()
    engine = WatchedEngine(run_dir)
    at = {"connected": time.perf_counter() - start}
    app = attached_app(engine)
    async with app.run_test(size=SIZE):
        loss = app.main_screen.loss_panel

        def routed() -> bool:
            return (
                engine.live_at is not None
                and loss.raw.total >= engine.replayed_steps
                and bool(loss.raw)
                and loss.raw.xs[-1] >= history
            )

        routed_version: list[int] = []  # the panel's data version once it held the history

        def drawn() -> bool:
            if not routed_version:
                if not routed():
                    return False
                at["routed"] = time.perf_counter() - start
                routed_version.append(loss._version)
            # set when a frame renders the panel: the data version it drew (live steps keep
            # coming, so any version from the routed one on holds the whole history)
            key = loss._cache_key
            return key is not None and key[2] >= routed_version[0]

        await wait_async(drawn, 60)
        at["drawn"] = time.perf_counter() - start
        assert engine.live_at is not None
        at["replay in"] = engine.live_at - start
        app.detach()
    return at, engine.replayed_steps


def import_time(tries: int) -> float:
    """Seconds for a fresh interpreter to import what `cockpit attach` needs (best of `tries`)."""
    code = "import cockpit.cli.attach, cockpit.app.cockpit_app, engine.control.client"
    times = []
    for _ in range(tries):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)
        times.append(time.perf_counter() - start)
    return min(times)


def attach_time(args: argparse.Namespace, data: str | None) -> None:
    with tempfile.TemporaryDirectory(prefix="cockpit-bench-attach-") as tmp:
        run_dir = Path(tmp) / "run"
        build_long_history(run_dir, args.preset, data, args.history)
        run = LiveRun(run_dir)
        run.argv = [
            sys.executable, "-m", "cockpit", "train", "--headless", "--no-telemetry",
            "--resume", str(run_dir), "--set", f"train.max_steps={args.history * 10}",
            *(["--data", data] if data else []),
        ]  # fmt: skip
        with running(run):
            time.sleep(args.settle)
            timings = [asyncio.run(attach_until_drawn(run_dir, args.history)) for _ in range(args.attaches)]
    seconds = [at["drawn"] for at, _ in timings]
    median = statistics.median(seconds)
    phases = "  ".join(f"{name} {statistics.median(at[name] for at, _ in timings) * 1e3:.0f}" for name in PHASES)
    tries = 1 if args.tiny else 3
    imports = import_time(tries)
    print(
        f"3. attach to a live run with {args.history:,} steps of history ({timings[0][1]:,} step records"
        f" replayed, thinned by the server) until the loss panel is drawn with all of them at"
        f" {SIZE[0]}x{SIZE[1]}: median of {len(seconds)} {median * 1e3:.0f} ms"
        f" (each: {', '.join(f'{s * 1e3:.0f}' for s in seconds)} ms)"
        f"  (goal < 1 s: {'PASS' if median < 1.0 else 'FAIL'})\n"
        f"   medians from RemoteEngine(RUN_DIR) on, ms: {phases}\n"
        f"   a fresh `cockpit attach` process imports the app first: {imports * 1e3:.0f} ms more"
        f" (python -c 'import cockpit.app.cockpit_app ...', best of {tries})"
    )


# ------------------------------------------------------------------ main
def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


PARTS = ("cost", "pause", "attach")
KINDS = ("app", "bare")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, from {', '.join(PARTS)}")
    parser.add_argument("--kinds", default=",".join(KINDS), help="viewers in part 1: app (cockpit attach in tmux), bare (RemoteEngine)")
    parser.add_argument("--counts", default="1,3", help="viewer counts in part 1 (beside none)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--window", type=float, default=10.0, help="seconds measured per configuration")
    parser.add_argument("--settle", type=float, default=2.0, help="seconds after attaching before a window")
    parser.add_argument("--presses", type=int, default=20)
    parser.add_argument("--history", type=int, default=100_000)
    parser.add_argument("--attaches", type=int, default=5)
    parser.add_argument("--tiny", action="store_true", help="the tiny preset (smoke test) instead of nanogpt-cpu")
    parser.add_argument("--data", default=os.environ.get("COCKPIT_TINYSHAKESPEARE", str(SHAKESPEARE)))
    args = parser.parse_args()
    args.parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    args.kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    if unknown := sorted(set(args.parts) - set(PARTS)):
        parser.error(f"unknown part {', '.join(unknown)}: choose from {', '.join(PARTS)}")
    if unknown := sorted(set(args.kinds) - set(KINDS)):
        parser.error(f"unknown viewer kind {', '.join(unknown)}: choose from {', '.join(KINDS)}")
    try:
        args.counts = sorted({int(c) for c in args.counts.split(",") if c.strip()})
    except ValueError:
        parser.error(f"--counts {args.counts!r}: give whole numbers, e.g. --counts 1,3")
    if any(c < 0 for c in args.counts):
        parser.error("--counts: viewer counts cannot be negative")
    if "app" in args.kinds and "cost" in args.parts and not TMUX_INSTALLED:
        parser.error("app viewers run in tmux, which is not installed: install it or use --kinds bare")
    if min(args.rounds, args.presses, args.attaches, args.history) < 1 or args.window <= 0:
        parser.error("--rounds, --presses, --attaches, --history and --window must be positive")
    args.preset = "tiny" if args.tiny else "nanogpt-cpu"
    if not args.tiny and not Path(args.data).is_file():
        parser.error(f"no Tiny Shakespeare at {args.data}: pass --data PATH (or --tiny)")
    return args


def main() -> None:
    args = parse_args()
    data = None if args.tiny else args.data
    try:
        if {"cost", "pause"} & set(args.parts):  # one engine process for both
            with tempfile.TemporaryDirectory(prefix="cockpit-bench-attach-") as tmp, running(
                engine_run(Path(tmp) / "run", args.preset, data)
            ) as run:
                time.sleep(args.settle)  # past the first steps' warm-up
                if "cost" in args.parts:
                    viewer_cost(args, run)
                if "pause" in args.parts:
                    pause_latency(args, run)
        if "attach" in args.parts:
            attach_time(args, data)
    except (RuntimeError, AssertionError) as e:
        print(f"bench/attach.py: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
