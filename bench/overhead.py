"""What the cockpit costs the training run, how fast it reacts, and how long a redraw takes.

    python bench/overhead.py [--steps 300] [--rounds 6] [--data PATH]

1. Overhead: tokens/s of `nanogpt-cpu` with the app drawing at 160x48 (Textual's headless
   driver: layout, plots and compositing all run, only the terminal writes are dropped) against
   the same run headless, alternating, in one invocation. Goal: ratio >= 0.97.
2. Responsiveness: over 20 presses of the pause key while training (handed over as the
   terminal driver does, each at a random point of a step), the time from the key to the first
   frame showing PAUSED handed to the terminal driver (key-to-drawn; bench/drawn.py), split into
   the key to the engine's acknowledgement (goal: p95 under one step time plus 50 ms) and that
   acknowledgement to the frame (goal: p95 < 100 ms).
3. Redraw cost: the UI thread's CPU time for a frame at 160x48 with 100,000 steps of history,
   every panel with new data, through Textual's compositor down to the terminal bytes.
   Goal: p95 < 25 ms.

Beside the tokens/s ratio (which drifts with the machine's speed, and on a shared machine with
everyone else's load), part 1 reports the CPU seconds the UI thread, the telemetry thread and
the app's event wake thread use per second of training, read from each thread's own CPU clock:
these do not drift. Their sum against the process's CPU is what the cockpit costs (goal: about
3% on 2 cores).
`--profile` adds a cProfile of the UI thread alone over a minute of live training.
`--parts` picks the parts to run (e.g. `--parts cpu,profile`; `cpu` is part 1 without the
headless rounds).

`--parts metrics` (not run by default): the Prometheus endpoint (`--metrics-port`) and the
notifications (`--notify`), headless rounds of the same run four ways, in a rotating order:
without either, with the endpoint and nobody scraping, with it scraped once a second as
Prometheus would, and with notifications sent to a JSON endpoint on 127.0.0.1 (a real HTTP
server: the run's notices, its end among them, arrive there); the tokens/s ratios against the
run without either. Goal: nothing measurable unscraped, under 1% scraped or notifying. Needs
prometheus_client.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import math
import os
import pstats
import random
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # `python bench/overhead.py` puts bench/ first, not the root
    sys.path.insert(0, str(REPO))

from textual import events  # noqa: E402

from bench.drawn import FrameWatch  # noqa: E402
from cockpit.app.cockpit_app import CockpitApp  # noqa: E402
from engine.config import load_preset  # noqa: E402
from engine.events import (  # noqa: E402
    DeviceReading,
    Eval,
    EventQueue,
    MemoryBreakdown,
    RunStarted,
    Sample,
    StateChanged,
    Step,
    Telemetry,
)
from engine.optim import planned_curve  # noqa: E402
from engine.train import Trainer  # noqa: E402
from engine.train.threads import auto_threads, usable_cores  # noqa: E402
from engine.train.trainer import settle_garbage_collector  # noqa: E402

SHAKESPEARE = REPO.parent / "shared" / "data" / "tinyshakespeare" / "input.txt"
SIZE = (160, 48)
# The runs with and without the app at one fixed thread count (the static default): the measured
# choice (engine/train/thread_tuner.py) may differ between them, which is not the app's cost.
FIXED_THREADS = f"train.threads={auto_threads(usable_cores())}"


UI_THREAD = "MainThread"  # Textual runs its event loop, so all drawing, on the main thread
TELEMETRY_THREAD = "telemetry-poller"
WAKE_THREAD = "event-wake"  # the app's thread that waits on the engine's events (cockpit/app/event_feed.py)


def thread_cpu_seconds() -> dict[str, float]:
    """CPU seconds (user + system) used so far by each live Python thread, by name, read from
    each thread's own CPU clock (any thread may read them), and by the whole process under
    "process" (torch's worker threads included)."""
    clocks = {"process": time.process_time()}
    for thread in threading.enumerate():
        if thread.ident is None:
            continue
        try:
            clocks[thread.name] = time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
        except (OSError, AttributeError):  # the thread ended meanwhile; no such clock here
            pass
    return clocks


@dataclass
class Timing:
    """What a run's step sink saw: each step's wall time, and the threads' CPU clocks at the
    warm-up step and at the last step (read on the engine thread, which is then between steps)."""

    warmup: int
    last_step: int
    steps: dict[int, float] = field(default_factory=dict)
    cpu_at_warmup: dict[str, float] = field(default_factory=dict)
    cpu_at_end: dict[str, float] = field(default_factory=dict)

    def tokens_per_s(self, tokens_per_step: int) -> float:
        last = max(self.steps)
        return (last - self.warmup) * tokens_per_step / (self.steps[last] - self.steps[self.warmup])

    def cpu_per_training_s(self) -> dict[str, float]:
        """Each thread's CPU seconds per wall second of training, between the two readings."""
        wall = self.steps[max(self.steps)] - self.steps[self.warmup]
        return {
            name: (self.cpu_at_end[name] - start) / wall
            for name, start in self.cpu_at_warmup.items()
            if name in self.cpu_at_end
        }


def make_trainer(
    steps: int, data: str, run_dir: str, timing: Timing, extra: tuple[str, ...] = ()
) -> Trainer:
    cfg = load_preset(
        "nanogpt-cpu", [f"train.max_steps={steps}", "checkpoint.interval=0", FIXED_THREADS, *extra]
    )

    def clock(event) -> None:
        if event.kind == "step":
            timing.steps[event.step] = time.perf_counter()
            if event.step == timing.warmup:
                timing.cpu_at_warmup = thread_cpu_seconds()
            elif event.step == timing.last_step:
                timing.cpu_at_end = thread_cpu_seconds()

    return Trainer(cfg, run_dir=run_dir, data_path=data, sinks=[clock])


def headless_run(
    steps: int,
    data: str,
    warmup: int,
    extra: tuple[str, ...] = (),
    scrape_s: float = 0.0,
    notify_url: str = "",
) -> tuple[float, Timing]:
    """tokens/s of a headless run; `scrape_s` > 0: its metrics endpoint (`extra` sets
    log.metrics_port) is scraped that often while it trains, with its token; `notify_url`: its
    notices are sent there as `cockpit train --notify json:URL` sends them."""
    timing = Timing(warmup, steps)
    with tempfile.TemporaryDirectory() as run_dir:
        trainer = make_trainer(steps, data, run_dir, timing, extra)
        notes = None
        if notify_url:
            from engine.rundir import Notifications, parse_endpoint

            endpoint = parse_endpoint(f"json:{notify_url}")
            notes = Notifications([endpoint], print, preset="nanogpt-cpu")
            trainer.sinks.append(notes)
        thread = threading.Thread(target=trainer.run)  # a thread, as in the app
        thread.start()
        scraper = None
        if scrape_s > 0:
            port = trainer.cfg.log.metrics_port
            scraper = threading.Thread(
                target=scrape_while, args=(thread, Path(run_dir), port, scrape_s), daemon=True
            )
            scraper.start()
        thread.join()
        if scraper is not None:
            scraper.join()
        if notes is not None:
            notes.close()
        return timing.tokens_per_s(trainer.cfg.tokens_per_step), timing


def scrape_while(training: threading.Thread, run_dir: Path, port: int, every_s: float) -> None:
    """GET /metrics every `every_s` while `training` runs, as a Prometheus server would."""
    import urllib.error
    import urllib.request

    token_file = run_dir / "metrics.token"
    while training.is_alive() and not token_file.exists():
        time.sleep(0.01)
    scrapes = 0
    while training.is_alive():
        request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics")
        request.add_header("Authorization", f"Bearer {token_file.read_text().strip()}")
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                response.read()
            scrapes += 1
        except (urllib.error.URLError, ConnectionError):  # the endpoint closing as the run ends
            pass
        time.sleep(every_s)
    if scrapes == 0:  # then "scraped" measured nothing more than "on"
        print("   warning: the endpoint was never scraped: the run was too short (--steps)")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class NoticeInbox:
    """A JSON notification endpoint on 127.0.0.1 (a real HTTP server in a thread) that counts
    the notices it receives."""

    def __init__(self) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        inbox = self
        self.received = 0

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                inbox.received += 1
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/notify"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def metrics_rounds(steps: int, data: str, warmup: int, rounds: int) -> None:
    """Part 5: the run without the endpoint or notifications, with the endpoint unscraped,
    scraped every second, and with notifications to a local endpoint."""
    print(
        f"5. metrics endpoint and notifications: nanogpt-cpu headless, {steps} steps: off, "
        "endpoint on (not scraped), on (scraped every 1 s), notifying (--notify json:URL on "
        "127.0.0.1), in a rotating order"
    )
    ways = ("off", "on", "scraped", "notify")
    ratios: dict[str, list[float]] = {way: [] for way in ways[1:]}
    inbox = NoticeInbox()
    try:
        for r in range(rounds):
            got = {}
            for way in ways[r % 4 :] + ways[: r % 4]:  # a machine drifting hits each way alike
                extra = (f"log.metrics_port={free_port()}",) if way in ("on", "scraped") else ()
                scrape_s = 1.0 if way == "scraped" else 0.0
                url = inbox.url if way == "notify" else ""
                got[way] = headless_run(steps, data, warmup, extra, scrape_s, url)[0]
            for way in ratios:
                ratios[way].append(got[way] / got["off"])
            print(
                f"   round {r + 1}: off {got['off']:,.0f} tok/s   "
                + "   ".join(
                    f"{way} {got[way]:,.0f} (ratio {ratios[way][-1]:.3f})" for way in ratios
                )
            )
    finally:
        inbox.close()
    print(
        f"   median ratios against off: on {statistics.median(ratios['on']):.3f} (goal: 1.000 "
        f"within noise)   scraped {statistics.median(ratios['scraped']):.3f} (goal >= 0.99)   "
        f"notify {statistics.median(ratios['notify']):.3f} (goal >= 0.99; "
        f"{inbox.received} notices received over {rounds} runs)"
    )


async def app_run(
    steps: int, data: str, warmup: int, profile_s: float = 0.0
) -> tuple[float, Timing, cProfile.Profile | None]:
    """A run with the app drawing it. With `profile_s`, the UI thread (only: cProfile hooks the
    thread that enables it) is profiled for that long from the warm-up step on, then the run is
    stopped."""
    timing = Timing(warmup, steps)
    # timed by the UI thread's CPU clock: waits (epoll) cost nothing, and a loaded machine does
    # not inflate the figures
    profile = cProfile.Profile(time.thread_time) if profile_s else None
    with tempfile.TemporaryDirectory() as run_dir:
        made: list[Trainer] = []

        def factory(_preset: str) -> Trainer:
            made.append(make_trainer(steps, data, run_dir, timing))
            return made[-1]

        app = CockpitApp(factory, "nanogpt-cpu")
        async with app.run_test(size=SIZE) as pilot:
            if profile is not None:
                while warmup not in timing.steps:
                    await asyncio.sleep(0.05)
                profile.enable()
                await asyncio.sleep(profile_s)
                profile.disable()
                made[0].stop(checkpoint=False)
            while not made or made[0].state not in ("finished", "failed", "stopped"):
                await asyncio.sleep(0.5)
            await pilot.pause()
        return timing.tokens_per_s(made[0].cfg.tokens_per_step), timing, profile


def cpu_shares(timing: Timing) -> tuple[float, float, float, float]:
    """(UI, telemetry, event wake, process) CPU seconds per second of training."""
    per_s = timing.cpu_per_training_s()
    return (
        per_s.get(UI_THREAD, 0.0),
        per_s.get(TELEMETRY_THREAD, 0.0),
        per_s.get(WAKE_THREAD, 0.0),
        per_s["process"],
    )


def print_cpu_line(label: str, timing: Timing) -> tuple[float, float, float, float]:
    ui, telemetry, wake, process = cpu_shares(timing)
    print(
        f"   {label}: CPU s per s of training: UI thread {ui:.4f}  telemetry thread {telemetry:.4f}"
        f"  event wake thread {wake:.4f}  process {process:.3f}"
        f"  (their sum = {100 * (ui + telemetry + wake) / process:.2f}% of the process)"
    )
    return ui, telemetry, wake, process


def print_profile(profile: cProfile.Profile, seconds: float, top: int = 25) -> None:
    for order, what in (("cumulative", "cumulative"), ("tottime", "own")):
        out = io.StringIO()
        stats = pstats.Stats(profile, stream=out)
        stats.sort_stats(order).print_stats(top)
        print(
            f"   UI thread over {seconds:.0f} s of live training, top {top} by {what} CPU time"
            f" ({stats.total_tt:.2f} CPU s in all):"
        )
        text = out.getvalue()
        # from the table's header on (pstats first prints the file name and totals)
        lines = text.splitlines()
        start = next((i for i, line in enumerate(lines) if "function calls" in line), 0)
        print("\n".join("   " + line for line in lines[start:] if line.strip()))


def press_like_a_terminal(app: CockpitApp, key: str) -> None:
    """Hand a key to the app the way its terminal driver does when the bytes arrive.

    (`pilot.press` would then wait for every widget to answer a message and for the process
    to look idle: test-harness work that holds the GIL while the engine steps, and that no
    terminal does.)"""
    event = events.Key(key, " " if key == "space" else key)
    event.set_sender(app)
    app._driver.send_message(event)


@dataclass
class Presses:
    """Per press of the pause key, in seconds: until the engine's acknowledgement (its
    StateChanged "paused", stamped by the engine), from that event until the frame showing
    PAUSED reached the terminal, and from the key to that frame."""

    to_ack: list[float] = field(default_factory=list)
    ack_to_drawn: list[float] = field(default_factory=list)
    to_drawn: list[float] = field(default_factory=list)


async def pause_latency(data: str, presses: int) -> tuple[Presses, float]:
    acks: list[float] = []
    step_times: list[float] = []
    with tempfile.TemporaryDirectory() as run_dir:
        made: list[Trainer] = []

        def factory(_preset: str) -> Trainer:
            cfg = load_preset(
                "nanogpt-cpu", ["train.max_steps=100000", "checkpoint.interval=0", FIXED_THREADS]
            )

            def sink(event) -> None:
                if event.kind == "state" and event.state == "paused":
                    acks.append(event.time)
                elif event.kind == "step":
                    step_times.append(event.step_time_s)

            made.append(Trainer(cfg, run_dir=run_dir, data_path=data, sinks=[sink]))
            return made[-1]

        app = CockpitApp(factory, "nanogpt-cpu")
        out = Presses()
        async with app.run_test(size=SIZE):
            frames = FrameWatch(app)
            status = app.main_screen.status_line
            while not made or made[0].step < 20:
                await asyncio.sleep(0.2)
            phase = random.Random(0)
            for _ in range(presses):
                # a person presses at any point of a step, not just as one begins (this loop
                # wakes right after a step ends): wait a random part of a step first
                await asyncio.sleep(phase.uniform(0, statistics.median(step_times)))
                seen = len(acks)
                frames.arm(lambda: status.state == "paused", "PAUSED")
                pressed, pressed_wall = time.perf_counter(), time.time()
                press_like_a_terminal(app, "space")
                while len(acks) == seen or not frames.drawn.is_set():
                    await asyncio.sleep(0.002)
                out.to_ack.append(acks[-1] - pressed_wall)
                out.ack_to_drawn.append(frames.drawn_wall - acks[-1])
                out.to_drawn.append(frames.drawn_perf - pressed)
                press_like_a_terminal(app, "space")  # resume, and let a few steps run
                resumed_at = made[0].step
                while made[0].step < resumed_at + 5:
                    await asyncio.sleep(0.01)
            made[0].stop(checkpoint=False)
            while made[0].state != "stopped":
                await asyncio.sleep(0.05)
        return out, statistics.median(step_times)


class FrozenTrainer:
    """Holds a long scripted history; run() blocks until stopped (for the redraw benchmark)."""

    resume_from = None  # a fresh run (the catch-all below would answer with a function)
    run_dir = "/tmp/x"
    replayed_until = 0.0  # its history is drawn as live steps, as before

    def __init__(self, steps: int) -> None:
        cfg = load_preset("nanogpt-cpu", [f"train.max_steps={steps * 2}"])
        self.cfg, self.state, self.step = cfg, "running", steps
        self.events = EventQueue(capacity=steps + 10_000)
        self._stopped = threading.Event()
        self._history_waiting = True  # until the app has taken the history below
        t0 = 1_000_000.0
        self.events.put(
            RunStarted(
                run_dir="/tmp/x",
                preset="nanogpt-cpu",
                description="",
                config={},
                device="cpu",
                dtype="float32",
                n_params=800_000,
                n_params_non_embedding=790_000,
                vocab_size=65,
                tokenizer="char",
                train_tokens=1_000_000,
                val_tokens=100_000,
                start_step=0,
                max_steps=steps * 2,
                tokens_per_step=768,
                planned_lr=planned_curve(cfg),
                time=t0,
            )
        )
        for s in range(1, steps + 1):
            loss = 1.5 + 3 * math.exp(-s / 3000) + 0.05 * math.sin(s)
            self.events.put(
                Step(
                    step=s,
                    loss=loss,
                    lr=1e-3,
                    grad_norm=0.5,
                    tokens_per_s=25_000,
                    step_time_s=0.03,
                    tokens=768 * s,
                    time=t0 + 0.03 * s,
                )
            )
            if s % 250 == 0:
                self.events.put(
                    Eval(
                        step=s,
                        train_loss=loss,
                        val_loss=loss + 0.05,
                        train_time_s=0.03 * s,
                        time=t0 + 0.03 * s,
                    )
                )
        for i in range(50):
            self.events.put(
                Sample(
                    step=steps - i,
                    prompt="ROMEO:",
                    text="O, she doth teach the torches to burn bright!\n" * 3,
                    time=t0 + 0.03 * steps,
                )
            )
        for event in frame_events(steps):  # the latest telemetry and memory breakdown
            if event.kind in ("telemetry", "memory"):
                self.events.put(event)
        self.events.put(StateChanged(state="running", step=steps, time=t0 + 0.03 * steps))

    def run(self, should_stop=None) -> str:
        settle_garbage_collector()  # as the real Trainer does when its setup is done
        while not self._stopped.wait(0.1):
            if should_stop and should_stop():
                break
        self.state = "stopped"
        self.events.put(StateChanged(state="stopped", step=self.step))
        return self.state

    def stop(self, checkpoint: bool = True, reason: str = "stopped by user") -> None:
        self._stopped.set()

    def drain_events(self) -> list:
        return self.events.drain()

    def wait_for_events(self, timeout: float) -> bool:
        """Only the history wakes the app: the frames are drained by the bench itself, as the
        app's tick would, so that no extra drain falls inside a timed frame."""
        if self._history_waiting and len(self.events):
            return True
        self._history_waiting = False
        self._stopped.wait(timeout)
        return False

    @property
    def dropped_events(self) -> int:
        return self.events.dropped

    def __getattr__(self, name: str):  # pause, resume, ...: no-ops here
        return lambda *args, **kwargs: None


def frame_events(step: int) -> list:
    """Everything the cockpit shows, new at once: a step, an eval, a sample, a telemetry
    reading and a memory breakdown (values vary, so nothing can be served from a cache)."""
    t = 1_000_000.0 + 0.03 * step
    loss = 1.5 + 3 * math.exp(-step / 3000) + 0.05 * math.sin(step)
    wobble = 0.5 + 0.5 * math.sin(step / 7)
    return [
        Step(
            step=step,
            loss=loss,
            lr=1e-3,
            grad_norm=0.5,
            tokens_per_s=25_000 + 1_000 * wobble,
            step_time_s=0.03,
            tokens=768 * step,
            time=t,
        ),
        Eval(step=step, train_loss=loss, val_loss=loss + 0.05, train_time_s=0.03 * step, time=t),
        Sample(
            step=step,
            prompt="ROMEO:",
            text=f"ROMEO:\nstep {step}: " + "O, she doth teach " * 4,
            time=t,
        ),
        Telemetry(
            source="nvml",
            gpus=(
                DeviceReading(
                    0,
                    "NVIDIA H100",
                    90.0 + 9 * wobble,
                    40.0,
                    int((29 + wobble) * 2**30),
                    80 * 2**30,
                    29 * 2**30,
                    70.0 + wobble,
                    600.0 + 50 * wobble,
                    700.0,
                    1980.0,
                    ("power",),
                ),
            ),
            cpu_percent=12.0 + wobble,
            ram_used=20 * 2**30,
            ram_total=256 * 2**30,
            process_rss=3 * 2**30,
            time=t,
        ),
        MemoryBreakdown(
            step=step,
            device="cuda:0",
            capacity=80 * 2**30,
            weights=2**30,
            gradients=2**30,
            optimizer=2 * 2**30,
            activations=int((20 + wobble) * 2**30),
            activations_measured=True,
            cache=3 * 2**30,
            other=2**29,
            time=t,
        ),
    ]


async def redraw_cost(history: int, repeats: int) -> tuple[list[float], list[float]]:
    """One frame per repeat, the worst a live run produces: every panel has new data at once, the app
    drains it as its timer does (every plot forced to redraw), and Textual lays out, renders and
    encodes the screen. Returns per frame (UI-thread CPU seconds, wall seconds) from handing over
    the events to the end of the encoding; the wall time also holds the wait for Textual's next
    screen update (at most 60 a second)."""
    trainer = FrozenTrainer(history)
    app = CockpitApp(lambda _p: trainer, "nanogpt-cpu")
    cpus: list[float] = []
    walls: list[float] = []
    painted = asyncio.Event()
    marks: dict[str, float] = {}

    def display(_screen, update) -> None:  # the headless driver drops updates: encode them
        if update is not None:
            update.render_segments(app.console)
            marks["cpu"], marks["wall"] = time.thread_time(), time.perf_counter()
            painted.set()

    async with app.run_test(size=SIZE) as pilot:
        while len(trainer.events):
            await pilot.pause(0.2)
        await pilot.pause(0.5)
        app._display = display
        step = trainer.step
        for _ in range(repeats):
            step += 1
            for event in frame_events(step):
                trainer.events.put(event)
            painted.clear()
            cpu0, start = time.thread_time(), time.perf_counter()
            app.pump(force=True)
            try:
                await asyncio.wait_for(painted.wait(), timeout=5)
            except TimeoutError:
                continue  # nothing was painted: not a frame
            # Textual may paint in more than one update: take the last of them
            await asyncio.sleep(0.03)
            cpus.append(marks["cpu"] - cpu0)
            walls.append(marks["wall"] - start)
            await asyncio.sleep(0.05)  # the app's timer would wait longer between frames
        trainer.stop()
    return cpus, walls


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


PARTS = ("overhead", "cpu", "pause", "redraw", "profile", "metrics")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--presses", type=int, default=20)
    parser.add_argument("--history", type=int, default=100_000)
    parser.add_argument("--frames", type=int, default=100)
    parser.add_argument(
        "--profile", action="store_true", help="add a cProfile of the UI thread (the 'profile' part)"
    )
    parser.add_argument("--profile-seconds", type=float, default=60.0)
    parser.add_argument(
        "--parts",
        default="overhead,pause,redraw",
        help=f"comma-separated, from {', '.join(PARTS)} ('cpu': the app's rounds only, no headless)",
    )
    parser.add_argument(
        "--data", default=os.environ.get("COCKPIT_TINYSHAKESPEARE", str(SHAKESPEARE))
    )
    args = parser.parse_args()
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    if args.profile:
        parts.add("profile")
    unknown = parts - set(PARTS)
    if unknown:
        parser.error(f"unknown part {', '.join(sorted(unknown))}: choose from {', '.join(PARTS)}")

    if parts & {"overhead", "cpu"}:
        with_headless = "overhead" in parts
        print(
            f"1. overhead: nanogpt-cpu, {args.steps} steps, app at {SIZE[0]}x{SIZE[1]}"
            + (" vs headless, alternating" if with_headless else " (no headless rounds)")
        )
        headless, drawn, ratios, shares = [], [], [], []
        for r in range(args.rounds):
            # alternate which goes first, so a machine slowing down or speeding up hits both alike
            first_headless = r % 2 == 0
            if with_headless and first_headless:
                headless.append(headless_run(args.steps, args.data, args.warmup)[0])
            tok_s, timing, _ = asyncio.run(app_run(args.steps, args.data, args.warmup))
            drawn.append(tok_s)
            if with_headless and not first_headless:
                headless.append(headless_run(args.steps, args.data, args.warmup)[0])
            if with_headless:
                ratios.append(drawn[-1] / headless[-1])
                print(
                    f"   round {r + 1}: headless {headless[-1]:,.0f} tok/s   cockpit {drawn[-1]:,.0f} tok/s"
                    f"   ratio {ratios[-1]:.3f}"
                )
            else:
                print(f"   round {r + 1}: cockpit {drawn[-1]:,.0f} tok/s")
            shares.append(print_cpu_line(f"round {r + 1}", timing))
        if with_headless:
            h, d = statistics.median(headless), statistics.median(drawn)
            print(
                f"   median of the rounds' ratios {statistics.median(ratios):.3f} (goal >= 0.97); "
                f"medians: headless {h:,.0f}  cockpit {d:,.0f}  ratio {d / h:.3f}"
            )
        ui, telemetry, wake, process = (statistics.median(column) for column in zip(*shares, strict=True))
        cores = os.cpu_count() or 1
        cockpit = ui + telemetry + wake
        print(
            f"   medians: CPU s per s of training: UI thread {ui:.4f}  telemetry thread {telemetry:.4f}"
            f"  event wake thread {wake:.4f}  process {process:.3f}: the cockpit takes"
            f" {100 * cockpit / process:.2f}% of the process's CPU (goal: about 3%), "
            # a loaded machine gives the process less CPU, not the cockpit: against the cores
            # a training run would have to itself, the figure does not depend on the load
            f"{100 * cockpit / cores:.2f}% of {cores} cores (the UI thread alone"
            f" {100 * ui / cores:.2f}%)"
        )

    if "pause" in parts:
        presses, step_time = asyncio.run(pause_latency(args.data, args.presses))

        def p50_p95(values: list[float]) -> str:
            return f"p50 {statistics.median(values) * 1e3:.1f} ms  p95 {percentile(values, 0.95) * 1e3:.1f} ms"

        print(
            f"2. pause key -> drawn, in-process, over {len(presses.to_drawn)} presses (each at a random"
            " point of a step; drawn: the first frame handed to the terminal driver that shows"
            " PAUSED, its bytes encoded as a terminal's would be):\n"
            f"   key -> drawn {p50_p95(presses.to_drawn)}\n"
            f"   key -> engine acknowledgement {p50_p95(presses.to_ack)}  (goal: p95 < step"
            f" {step_time * 1e3:.1f} ms + 50 ms = {(step_time + 0.05) * 1e3:.1f} ms)\n"
            f"   acknowledgement -> drawn {p50_p95(presses.ack_to_drawn)}  (goal: p95 < 100 ms)"
        )

    if "redraw" in parts:
        cpus, walls = asyncio.run(redraw_cost(args.history, args.frames))
        print(
            f"3. redraw of every panel at {SIZE[0]}x{SIZE[1]} with {args.history:,} steps of history, all new data each frame ({len(cpus)} frames):\n"
            f"   UI-thread CPU p50 {statistics.median(cpus) * 1e3:.1f} ms  p95 {percentile(cpus, 0.95) * 1e3:.1f} ms  (goal p95 < 25 ms)   "
            f"wall, with the wait for Textual's screen update: p50 {statistics.median(walls) * 1e3:.1f} ms  p95 {percentile(walls, 0.95) * 1e3:.1f} ms"
        )

    if "profile" in parts:
        print(f"4. profile of the UI thread, nanogpt-cpu at {SIZE[0]}x{SIZE[1]}:")
        # enough steps to outlast the profile; the run is stopped when it ends
        _, _, profile = asyncio.run(
            app_run(1_000_000, args.data, args.warmup, profile_s=args.profile_seconds)
        )
        assert profile is not None
        print_profile(profile, args.profile_seconds)

    if "metrics" in parts:
        metrics_rounds(args.steps, args.data, args.warmup, args.rounds)


if __name__ == "__main__":
    main()
