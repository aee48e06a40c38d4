"""One prepared GPU bench, side by side: cockpit against nanoGPT, local-300m in 24 GB, a viewer's cost.

    python bench/gpu_side_by_side.py --nanogpt ~/nanoGPT [--data PATH/input.txt] [--out DIR]
    python bench/gpu_side_by_side.py --cpu ...   (the tiny CPU configuration, also what runs without CUDA)

Three parts, each measured in this one invocation, back to back (about 8 minutes on an H200,
compilation included):

(a) gpt2-small (12x768, block 1024, micro-batch 16, bf16, torch.compile, AdamW, GPT-2's BPE on
    Tiny Shakespeare): nanoGPT's own train.py from the checkout given with --nanogpt (run where
    it is, never copied: its tokens, the same cockpit trains on, are written to a temporary
    folder as data/cockpit/train.bin and val.bin), then `cockpit train --headless` at the same
    config. Both skip their first 10 optimizer steps (2 on CPU: compilation, the first read-back).
    tokens/s is each tool's own: nanoGPT's `iter N: ... time Yms` lines (tokens per iteration
    over the summed times), cockpit's step records in metrics.jsonl (their tokens over their
    summed step times: the engine's own clock, from one loss read-back to the next). MFU of
    both is tokens/s x cockpit's FLOPs per token / cockpit's peak (the same yardstick; nanoGPT's
    own printed MFU, against an A100's 312 TFLOP/s whatever the GPU, is shown beside).
(b) local-300m in a process whose CUDA allocator is capped to --cap-gib (24):
    `torch.cuda.set_per_process_memory_fraction(cap / total)` is called in the training process
    itself, which then runs the ordinary `cockpit train` command line (CAPPED_COCKPIT below).
    The preset as it is, then the same with `model.grad_checkpoint` set to full recompute (today's
    configuration before selective recompute): fits (no out-of-memory retry at micro-batch 16),
    tokens/s, MFU, the peak the engine measured (torch.cuda.max_memory_allocated, in its memory
    breakdown) against the planner's figure, and the ratio of the two throughputs.
(c) the gpt2-small run of (a) is one live process serving its control socket: windows with no
    viewer (they give (a)'s cockpit figure) alternate with windows with the cockpit app attached
    (`--viewer app`: the real app, attached, drawing through Textual's headless driver in its own
    process; `--viewer tmux`: `cockpit attach` in tmux at 160x48). The ratio attached / headless.

On CPU (no CUDA, or --cpu) the same steps run a tiny configuration (2x64, block 32, float32, no
compile, no memory cap) so that the code is tested; its figures say nothing of the goals. The
summary prints every figure beside its goal: gpt2-small >= 1.1x nanoGPT's tokens/s and MFU
>= 45%; local-300m fits 24 GB at >= 1.25x full recompute's tokens/s; attached >= 0.97x headless.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # `python bench/X.py` puts bench/ first, not the root
    sys.path.insert(0, str(REPO))

import tests.live_process as live_process  # noqa: E402
from bench.attach import AppViewer, detach_viewers, end_of_window, viewer_count, wait_until  # noqa: E402
from engine.control import RemoteEngine  # noqa: E402
from tests.live_process import LiveRun  # noqa: E402

# the shared data: a shared/ folder in the checkout first (what travels to a device machine),
# else the one beside it
SHARED_DATA = next(
    (d for d in (REPO / "shared" / "data", REPO.parent / "shared" / "data") if d.is_dir()),
    REPO.parent / "shared" / "data",
)
SHAKESPEARE = SHARED_DATA / "tinyshakespeare" / "input.txt"
TIKTOKEN_CACHE = SHARED_DATA / "tiktoken-cache"
SIZE = (160, 48)
QUIET = ("eval.interval=0", "sample.interval=0", "checkpoint.interval=0")
GiB = 2**30
GOALS = {"vs_nanogpt": 1.1, "mfu": 0.45, "recompute": 1.25, "attached": 0.97}
NANOGPT_PEAK = 312e12  # nanoGPT's estimate_mfu divides by an A100's bf16 peak on any device
NANOGPT_ITER = re.compile(r"^iter (\d+): loss ([-\d.naninf]+), time ([\d.]+)ms, mfu (-?[\d.]+)%", re.M)

# The training process with its allocator capped, then the ordinary command line: argv[1] is
# the cap in bytes (0: none), the rest what `cockpit` is given.
CAPPED_COCKPIT = """\
import runpy, sys
cap = int(sys.argv[1])
if cap:
    import torch
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, cap / total), 0)
    print(f"allocator capped to {cap / 2**30:.1f} GiB of {total / 2**30:.1f} GiB", flush=True)
sys.argv = ["cockpit", *sys.argv[2:]]
runpy.run_module("cockpit", run_name="__main__", alter_sys=True)
"""


# ------------------------------------------------------------------ configurations
@dataclass
class Shape:
    """One training configuration, said both ways: cockpit's --set and nanoGPT's --key=value."""

    n_layer: int
    n_head: int
    n_embd: int
    block_size: int
    batch_size: int
    grad_accum: int
    dtype: str  # bfloat16 or float32
    compile: bool
    device: str  # cuda or cpu

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.block_size * self.grad_accum

    def cockpit(self, model: bool = True) -> list[str]:
        """`--set` overrides; `model=False` keeps the preset's model (only the batch and device)."""
        sets = [
            f"train.batch_size={self.batch_size}", f"train.grad_accum={self.grad_accum}",
            f"train.dtype={self.dtype}", f"train.compile={str(self.compile).lower()}",
            f"train.device={self.device}", *QUIET,
        ]  # fmt: skip
        if model:
            sets += [
                f"model.n_layer={self.n_layer}", f"model.n_head={self.n_head}",
                f"model.n_embd={self.n_embd}", f"model.block_size={self.block_size}",
                "model.dropout=0.0", "model.bias=false",
            ]  # fmt: skip
        return sets

    def nanogpt(self, dataset: Path, out_dir: Path, iterations: int) -> list[str]:
        """nanoGPT's overrides: the same model, batch and optimizer as gpt2-small's preset
        (AdamW 6e-4, betas 0.9/0.95, weight decay 0.1, clip 1.0), `iterations` optimizer steps,
        the one evaluation it always makes at iteration 0 kept to one batch, no checkpoint."""
        return [
            f"--dataset={dataset}", f"--out_dir={out_dir}", f"--n_layer={self.n_layer}",
            f"--n_head={self.n_head}", f"--n_embd={self.n_embd}", f"--block_size={self.block_size}",
            f"--batch_size={self.batch_size}", f"--gradient_accumulation_steps={self.grad_accum}",
            f"--dtype={self.dtype}", f"--compile={self.compile}", f"--device={self.device}",
            "--dropout=0.0", "--bias=False", "--learning_rate=0.0006", "--weight_decay=0.1",
            "--beta1=0.9", "--beta2=0.95", "--grad_clip=1.0", f"--max_iters={iterations - 1}",
            "--eval_iters=1", f"--eval_interval={10**9}", "--log_interval=1",
            "--always_save_checkpoint=False", "--wandb_log=False",
        ]  # fmt: skip


@dataclass
class Budget:
    """Steps and seconds of each part: what makes the whole fit about 8 minutes on an H200."""

    warmup: int  # optimizer steps skipped by both tools (compilation, the first read-back)
    steps: int  # optimizer steps measured in nanoGPT's run (a)
    fit_steps: int  # optimizer steps measured per local-300m run (b)
    window_s: float  # each window of (c)
    settle_s: float  # after a viewer came or went, before a window
    rounds: int  # windows with the app in (c), each between two without
    memory_records: int  # local-300m runs go on until this many memory breakdowns are written
    start_timeout_s: float  # a process to its first steps (imports, compilation)
    part_timeout_s: float  # a fixed-length run to its last measured step


# The engine writes a memory breakdown at step 1 and then every 20 s; step 1's counts the
# optimizer state that step creates on top of its peak, so on CUDA a run waits for the second.
GPU_BUDGET = Budget(
    warmup=10, steps=40, fit_steps=20, window_s=10.0, settle_s=3.0, rounds=2, memory_records=2,
    start_timeout_s=300, part_timeout_s=240,
)  # fmt: skip
CPU_BUDGET = Budget(
    warmup=2, steps=5, fit_steps=5, window_s=1.0, settle_s=0.3, rounds=1, memory_records=1,
    start_timeout_s=120, part_timeout_s=120,
)  # fmt: skip


def gpt2_small(cuda: bool, grad_accum: int) -> Shape:
    if cuda:
        return Shape(12, 12, 768, 1024, 16, grad_accum, "bfloat16", True, "cuda")
    return Shape(2, 2, 64, 32, 2, 2, "float32", False, "cpu")


def local_300m(cuda: bool, grad_accum: int) -> Shape:
    if cuda:
        return Shape(20, 16, 1024, 1024, 16, grad_accum, "bfloat16", True, "cuda")
    return Shape(2, 2, 64, 32, 2, 2, "float32", False, "cpu")


def full_recompute_value() -> str:
    """The value of model.grad_checkpoint that recomputes every block: `full` where it takes
    modes, `true` where it is still a switch."""
    from engine.config import ConfigError, load_preset

    try:
        load_preset("local-300m", ["model.grad_checkpoint=full"])
    except (ConfigError, ValueError, TypeError):
        return "true"
    return "full"


# ------------------------------------------------------------------ figures from records
@dataclass
class Figures:
    """Throughput of measured optimizer steps, and what it is against."""

    tokens_per_s: float
    steps: int
    mfu: float | None = None  # 0..1 against cockpit's peak
    notes: list[str] = field(default_factory=list)


def cockpit_rate(steps: list[dict[str, Any]], tokens_per_step: int) -> float:
    """The step records' tokens over their summed step times: each record's step_time_s is its
    share of the time from one loss read-back to the next, as the engine measures it."""
    seconds = sum(r["step_time_s"] for r in steps)
    return len(steps) * tokens_per_step / seconds if seconds > 0 else float("nan")


def peak_flops(started: dict[str, Any], steps: list[dict[str, Any]]) -> float:
    """The peak cockpit's MFU was measured against: the run's, or the one it corrected to on the
    way (a measured peak is raised when a step beats it)."""
    fpt = started.get("flops_per_token") or 0.0
    implied = [r["tokens_per_s"] * fpt / r["mfu"] for r in steps if 0 < r.get("mfu", 0) < 1]
    return statistics.median(implied) if implied else float(started.get("peak_flops") or 0.0)


def mfu_of(tokens_per_s: float, started: dict[str, Any], peak: float) -> float | None:
    fpt = started.get("flops_per_token") or 0.0
    return tokens_per_s * fpt / peak if peak > 0 and fpt > 0 else None


def fmt_rate(figures: Figures | None) -> str:
    if figures is None:
        return "-"
    mfu = "" if figures.mfu is None else f", MFU {figures.mfu * 100:.1f}%"
    return f"{figures.tokens_per_s:,.0f} tok/s{mfu} ({figures.steps} steps)"


def ratio(a: Figures | None, b: Figures | None) -> float | None:
    if a is None or b is None or not b.tokens_per_s:
        return None
    return a.tokens_per_s / b.tokens_per_s


# ------------------------------------------------------------------ nanoGPT
def prepared_corpus(data_path: str) -> Any:
    """The corpus as every run here trains on it: GPT-2's BPE (the gpt2-small and local-300m
    presets' tokenizer), prepared once into cockpit's cache, which the runs then reuse."""
    from engine.config import load_preset
    from engine.data import prepare

    return prepare(load_preset("gpt2-small").data, data_path=data_path)


def write_tokens(folder: Path, data: Any) -> tuple[Path, str]:
    """The corpus cockpit trains on, as nanoGPT reads it: folder/train.bin and val.bin (uint16),
    the same GPT-2 BPE tokens of the same splits."""
    import numpy as np

    folder.mkdir(parents=True, exist_ok=True)
    for split, tokens in (("train", data.train), ("val", data.val)):
        np.asarray(tokens).astype(np.uint16).tofile(folder / f"{split}.bin")
    return folder, f"{len(data.train):,} train and {len(data.val):,} val tokens of {data.source}"


def parse_nanogpt(output: str) -> list[tuple[int, float, float]]:
    """(iteration, seconds, nanoGPT's running MFU 0..1) of each `iter N: ...` line."""
    return [(int(m[1]), float(m[3]) / 1e3, float(m[4]) / 100) for m in NANOGPT_ITER.finditer(output)]


def run_nanogpt(checkout: Path, work: Path, shape: Shape, data: Any, budget: Budget) -> tuple[Figures, float | None]:
    """nanoGPT's train.py run where it lives: the tokens and its out_dir in `work`, a link to
    its configurator.py there too (train.py reads it from the working directory). Returns the
    measured iterations' figures (MFU unset: cockpit's yardstick is applied later) and
    nanoGPT's own last printed MFU."""
    dataset, described = write_tokens(work / "data" / "cockpit", data)
    print(f"   nanoGPT's data: {described}, in {dataset}", flush=True)
    link = work / "configurator.py"
    if not link.exists():
        link.symlink_to(checkout / "configurator.py")
    iterations = budget.warmup + budget.steps
    argv = [sys.executable, str(checkout / "train.py"), *shape.nanogpt(dataset, work / "out", iterations)]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}  # leave the checkout as it is
    if shape.device == "cpu" and "OMP_NUM_THREADS" not in env:
        from engine.train.threads import chosen_threads

        # the threads cockpit trains with on this CPU (one core left free), not torch's one per core
        env["OMP_NUM_THREADS"] = str(chosen_threads(0, "cpu"))
    t0 = time.perf_counter()
    done = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=budget.start_timeout_s + budget.part_timeout_s)
    (work / "nanogpt.log").write_text(done.stdout + done.stderr)
    iters = parse_nanogpt(done.stdout)
    if done.returncode != 0 or len(iters) < iterations:
        raise RuntimeError(
            f"nanoGPT's train.py exited {done.returncode} after {len(iters)} of {iterations} iterations:"
            f" {(done.stdout + done.stderr)[-1500:]}"
        )
    measured = [seconds for i, seconds, _ in iters if i >= budget.warmup]
    tokens_per_s = len(measured) * shape.tokens_per_step / sum(measured)
    own_mfu = iters[-1][2] if iters[-1][2] > 0 else None
    print(f"   nanoGPT ran {len(iters)} iterations in {time.perf_counter() - t0:.0f} s (compile included)", flush=True)
    return Figures(tokens_per_s, len(measured)), own_mfu


# ------------------------------------------------------------------ cockpit processes
def cockpit_process(run_dir: Path, preset: str, sets: list[str], data_path: str, cap_bytes: int | None = None) -> LiveRun:
    """`cockpit train --headless` (telemetry on, as a person runs it), serving its socket; with
    `cap_bytes`, through CAPPED_COCKPIT, its allocator capped to that (0: the same process
    without a cap, as on CPU)."""
    run = LiveRun(run_dir, *sets, preset=preset, steps=10**8)
    run.argv.remove("--no-telemetry")
    run.argv += ["--data", data_path]
    if cap_bytes is not None:
        assert run.argv[1:3] == ["-m", "cockpit"], run.argv
        run.argv = [run.argv[0], "-c", CAPPED_COCKPIT, str(cap_bytes), *run.argv[3:]]
    return run


def stop_without_checkpoint(run: LiveRun) -> None:
    """Ask the run to stop without writing a checkpoint (nothing here needs one: gigabytes
    saved), then let LiveRun make sure the process is gone."""
    if run.process is not None and run.process.poll() is None:
        try:
            engine = RemoteEngine(run.run_dir, who="bench gpu_side_by_side")
            try:
                engine.stop(checkpoint=False, reason="bench done")
                run.process.wait(60)
            finally:
                engine.close()  # after the run ended: the command is surely out
        except Exception as e:  # noqa: BLE001 - then SIGTERM, which saves a checkpoint
            print(f"   (the run did not stop through its socket: {type(e).__name__}: {e}; SIGTERM)", flush=True)
    run.close()


def step_records_after(run: LiveRun, step: int, timeout_s: float) -> list[dict[str, Any]]:
    """The run's step records once one past `step` is on disk; an error as soon as the run
    ended or paused (on an out-of-memory it cannot retry smaller, say) before it."""

    def held_up() -> str:
        if run.process is not None and run.process.poll() is not None:
            return "ended"
        states = run.records("state")
        return "paused" if states and states[-1]["state"] in ("paused", "failed") else ""

    wait_until(lambda: run.step() >= step or bool(held_up()), timeout_s, f"step {step} of {run.run_dir.name}")
    if run.step() < step:
        alerts = "; ".join(a["message"] for a in run.records("alert")[-2:])
        raise RuntimeError(f"the run {held_up()} at step {run.step()} ({alerts}): {run.output()[-800:]}")
    return run.records("step")


def memory_peak(records: list[dict[str, Any]]) -> tuple[int | None, int | None, list[str]]:
    """Bytes allocated at a step's peak and reserved by the allocator after it, from the
    engine's memory breakdowns (their largest), and what to say of them. On CUDA a breakdown's
    weights + gradients + optimizer + activations is torch.cuda.max_memory_allocated within the
    step when the optimizer state existed at its start: not at step 1, whose figure also counts
    the state created in it, so step 1's is used only when it is the only one."""
    notes = []
    steady = [m for m in records if m["step"] > 1]
    if records and not steady:
        steady = records
        if records[0].get("activations_measured"):
            notes.append("only step 1's memory breakdown: its peak counts the optimizer state created then")
    if not steady:
        return None, None, ["no memory breakdown"]
    held = [m["weights"] + m["gradients"] + m["optimizer"] for m in steady]
    peak, i = max((h + m["activations"], i) for i, (h, m) in enumerate(zip(held, steady, strict=True)))
    if not steady[i].get("activations_measured"):
        notes.append("peak estimated, not measured (not CUDA)")
    return peak, held[i] + steady[i]["cache"], notes


@dataclass
class FitResult:
    label: str
    figures: Figures | None = None
    fits: bool | None = None
    peak: int | None = None  # bytes allocated at the step's peak (the engine's breakdown)
    reserved: int | None = None  # the allocator's reservation then (what the cap limits)
    planned: int | None = None  # the planner's total
    error: str = ""


def capped_run(run_dir: Path, label: str, sets: list[str], data_path: str, cap_bytes: int, budget: Budget) -> FitResult:
    """local-300m (as `sets` make it) with the allocator capped: its steps, memory and plan."""
    result = FitResult(label)
    run = cockpit_process(run_dir, "local-300m", sets, data_path, cap_bytes)  # capped (0: not)
    try:
        run.start()
        last = budget.warmup + budget.fit_steps
        steps = step_records_after(run, last, budget.part_timeout_s)
        with contextlib.suppress(RuntimeError):  # without it, step 1's breakdown is used
            wait_until(lambda: len(run.records("memory")) >= budget.memory_records, 60, "a memory breakdown")
    except (AssertionError, RuntimeError) as e:
        result.error = str(e).strip()[-600:] or type(e).__name__
        return result
    finally:
        stop_without_checkpoint(run)
    started = run.records("run_started")[-1]
    measured = [r for r in steps if budget.warmup < r["step"] <= last]
    tokens = cockpit_rate(measured, started["tokens_per_step"])
    result.figures = Figures(tokens, len(measured), mfu_of(tokens, started, peak_flops(started, measured)))
    oom = [a["message"] for a in run.records("alert") if a.get("code") == "oom"]
    result.peak, result.reserved, notes = memory_peak(run.records("memory"))
    result.figures.notes += notes
    plan = started.get("memory_plan") or {}
    result.planned = plan.get("total")
    result.fits = not oom and (not cap_bytes or result.peak is None or result.peak <= cap_bytes)
    result.figures.notes += [f"out of memory: {m}" for m in oom[:2]]
    return result


# ------------------------------------------------------------------ viewers
class HeadlessAppViewer:
    """The cockpit app attached to the run, drawing through Textual's headless driver (layout,
    plots and compositing all run; only the terminal writes are dropped) in its own process, as
    `cockpit attach` would be: this script run with --app-viewer RUN_DIR READY_FILE."""

    def __init__(self, run_dir: Path) -> None:
        folder = Path(tempfile.mkdtemp(prefix="cockpit-viewer-"))
        self.ready_file, self.log_file = folder / "drawn", folder / "viewer.log"
        with self.log_file.open("wb") as log:
            self.process = live_process.popen(  # a new interpreter (started warm under a test)
                [sys.executable, str(Path(__file__).resolve()), "--app-viewer", str(run_dir), str(self.ready_file)],
                cwd=REPO, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip

    def ready(self) -> bool:
        if self.process.poll() is not None:
            log = self.log_file.read_text(errors="replace")[-1500:]
            raise RuntimeError(f"the app viewer exited {self.process.returncode}: {log}")
        return self.ready_file.exists()

    def pid(self) -> int:
        return self.process.pid

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.process.stdin.close()  # type: ignore[union-attr]  # the viewer detaches
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.ready_file.parent, ignore_errors=True)


def app_viewer_main(run_dir: str, ready_file: str) -> int:
    """The viewer process: attach, say when the loss panel is drawn, detach when stdin closes."""
    from cockpit.cli.attach import attached_app

    app = attached_app(RemoteEngine(Path(run_dir), who="bench gpu_side_by_side app"))

    async def go() -> None:
        async with app.run_test(size=SIZE) as pilot:
            while not app.main_screen.loss_panel.has_data():
                await pilot.pause(0.05)
            Path(ready_file).touch()
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
            app.detach()

    asyncio.run(go())
    return 0


def new_viewer(kind: str, run_dir: Path) -> Any:
    return AppViewer(run_dir) if kind == "tmux" else HeadlessAppViewer(run_dir)


def window(run: LiveRun, viewer: str | None, budget: Budget) -> list[dict[str, Any]]:
    """The step records of one window with `viewer` attached (None: no viewer)."""
    viewers = []
    try:
        if viewer:
            viewers.append(new_viewer(viewer, run.run_dir))
            wait_until(lambda: all(v.ready() for v in viewers), 120, f"the {viewer} viewer drawn")
            wait_until(lambda: viewer_count(run.run_dir) == 1, 30, "the viewer on the socket")
        time.sleep(budget.settle_s)
        t0 = time.time()
        time.sleep(budget.window_s)
        t1 = end_of_window(run, t0)
    finally:
        if viewers:
            detach_viewers(viewers, run.run_dir)
    # the run writes metrics.jsonl about once a second, and reads losses back in groups
    wait_until(lambda: any(r["time"] > t1 for r in run.records("step")[-5:]), 60, "the window's steps on disk")
    return [r for r in run.records("step") if t0 <= r["time"] <= t1]


@dataclass
class LiveResult:
    headless: Figures | None = None
    attached: Figures | None = None
    rounds: list[tuple[float, float]] = field(default_factory=list)  # (headless, attached) tok/s
    started: dict[str, Any] = field(default_factory=dict)
    peak: float = 0.0
    error: str = ""


def live_gpt2(run_dir: Path, shape: Shape, data_path: str, budget: Budget, viewer: str | None) -> LiveResult:
    """gpt2-small headless, with windows without a viewer and (when `viewer`) with the app
    attached, alternating: none, app, none, ... none."""
    result = LiveResult()
    run = cockpit_process(run_dir, "gpt2-small", shape.cockpit(), data_path)
    try:
        run.start()
        step_records_after(run, budget.warmup + 1, budget.part_timeout_s)
        kinds = [None] + [k for _ in range(budget.rounds if viewer else 0) for k in (viewer, None)]
        windows = [(kind, window(run, kind, budget)) for kind in kinds]
    except (AssertionError, RuntimeError) as e:
        result.error = str(e).strip()[-600:]
        return result
    finally:
        stop_without_checkpoint(run)
    result.started = started = run.records("run_started")[-1]
    tps = started["tokens_per_step"]
    every = [r for _, records in windows for r in records]
    result.peak = peak_flops(started, every)

    def figures(kind: str | None) -> Figures | None:
        records = [r for k, rs in windows if k == kind for r in rs]
        if not records:
            return None
        rate = cockpit_rate(records, tps)
        return Figures(rate, len(records), mfu_of(rate, started, result.peak))

    result.headless, result.attached = figures(None), figures(viewer) if viewer else None
    rates = [cockpit_rate(rs, tps) for _, rs in windows]
    result.rounds = [((rates[i] + rates[i + 2]) / 2, rates[i + 1]) for i in range(0, len(rates) - 2, 2)]
    return result


# ------------------------------------------------------------------ the bench
def verdict(value: float | None, goal: float, judged: bool) -> str:
    if value is None:
        return "not measured"
    if not judged:
        return "not judged on CPU"
    return "PASS" if value >= goal else "FAIL"


def fmt(value: float | None, spec: str = ".3f", suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def flops(n: float) -> str:
    """FLOP counts or rates in the unit that reads best: 312.0 TFLOP, 20.1 MFLOP."""
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}FLOP"
    return f"{n:.0f} FLOP"


def gib(n: int | None) -> str:
    return "-" if n is None else f"{n / GiB:.2f} GiB"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nanogpt", metavar="DIR", help="a nanoGPT checkout (its train.py is run where it is); without it part (a)'s nanoGPT side is skipped")
    parser.add_argument("--data", default=os.environ.get("COCKPIT_TINYSHAKESPEARE", str(SHAKESPEARE)), help="the text corpus (default: Tiny Shakespeare from ../shared/data)")
    parser.add_argument("--parts", default="nanogpt,fit,attach", help="comma-separated, from nanogpt (a), fit (b), attach (c)")
    parser.add_argument("--cpu", action="store_true", help="the tiny CPU configuration even where CUDA is present")
    parser.add_argument("--cap-gib", type=float, default=24.0, help="part (b)'s allocator cap (GiB; CUDA only)")
    parser.add_argument("--grad-accum", type=int, default=8, help="micro-batches per optimizer step on the GPU (both tools alike)")
    parser.add_argument("--viewer", choices=("app", "tmux"), default="app", help="part (c)'s viewer: the app in its own process on Textual's headless driver, or `cockpit attach` in tmux")
    parser.add_argument("--out", help="keep the runs and logs here (default: a temporary folder, removed)")
    parser.add_argument("--app-viewer", nargs=2, metavar=("RUN_DIR", "READY_FILE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    if unknown := sorted(set(args.parts) - {"nanogpt", "fit", "attach"}):
        parser.error(f"unknown part {', '.join(unknown)}: choose from nanogpt, fit, attach")
    if args.app_viewer is None and not Path(args.data).is_file():
        parser.error(f"no corpus at {args.data}: pass --data PATH (Tiny Shakespeare's input.txt)")
    if args.nanogpt and not (Path(args.nanogpt).expanduser() / "train.py").is_file():
        parser.error(f"--nanogpt {args.nanogpt}: no train.py there (give a nanoGPT checkout)")
    if args.viewer == "tmux" and shutil.which("tmux") is None:
        parser.error("--viewer tmux: tmux is not installed (the default, --viewer app, needs no terminal)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.app_viewer:
        return app_viewer_main(*args.app_viewer)
    # the runs are their own sessions: a SIGTERM (`timeout`, a job's time limit) must unwind
    # through the code that stops them, as ctrl+c does, or they would train on alone
    signal.signal(signal.SIGTERM, lambda _sig, _frame: sys.exit(128 + signal.SIGTERM))
    if "TIKTOKEN_CACHE_DIR" not in os.environ and TIKTOKEN_CACHE.is_dir():
        os.environ["TIKTOKEN_CACHE_DIR"] = str(TIKTOKEN_CACHE)  # GPT-2's BPE ranks, offline
    import torch

    from engine.config import load_preset

    cuda = torch.cuda.is_available() and not args.cpu
    budget = GPU_BUDGET if cuda else CPU_BUDGET
    live_process.TIMEOUT_S = max(live_process.TIMEOUT_S, budget.start_timeout_s)  # compilation
    small = gpt2_small(cuda, args.grad_accum)
    args.tokens_per_step = small.tokens_per_step
    device = torch.cuda.get_device_name() if cuda else "CPU (tiny configuration: the code is tested, the goals are not judged)"
    print(f"torch {torch.__version__} on {device}; corpus {args.data}")
    print(
        f"budget: skip {budget.warmup} steps, then measure {budget.steps} of nanoGPT, {budget.fit_steps} of each local-300m run,"
        f" windows of {budget.window_s:g} s;"
        f" {small.tokens_per_step:,} tokens per optimizer step ({small.batch_size} x {small.block_size} x {small.grad_accum})",
        flush=True,
    )
    t_start = time.perf_counter()
    from engine.data import DataError

    try:
        corpus = prepared_corpus(args.data)
    except DataError as e:
        print(f"gpu_side_by_side: the corpus could not be prepared: {e}", file=sys.stderr)
        return 2
    out = Path(args.out).resolve() if args.out else Path(tempfile.mkdtemp(prefix="cockpit-gpu-side-by-side-"))
    out.mkdir(parents=True, exist_ok=True)
    nano: Figures | None = None
    nano_own_mfu: float | None = None
    live = LiveResult()
    fit: list[FitResult] = []
    try:
        # ---- (a) nanoGPT's side
        if "nanogpt" in args.parts:
            if args.nanogpt:
                print(f"(a) nanoGPT's train.py ({Path(args.nanogpt).expanduser()}): {small.n_layer}x{small.n_embd}, {small.dtype}, compile {small.compile}", flush=True)
                try:
                    nano, nano_own_mfu = run_nanogpt(Path(args.nanogpt).expanduser().resolve(), out / "nanogpt", small, corpus, budget)
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    print(f"   nanoGPT failed: {str(e)[-800:]}")
                print(f"   ({time.perf_counter() - t_start:.0f} s so far)", flush=True)
            else:
                print("(a) nanoGPT skipped: no --nanogpt DIR given (a checkout of github.com/karpathy/nanoGPT)")
        # ---- (a) cockpit's side and (c), one live run
        if {"nanogpt", "attach"} & set(args.parts):
            viewer = args.viewer if "attach" in args.parts else None
            print(f"(a/c) cockpit gpt2-small headless{', windows with the app attached between' if viewer else ''}", flush=True)
            live = live_gpt2(out / "gpt2-small", small, args.data, budget, viewer)
            if live.error:
                print(f"   cockpit's gpt2-small run failed: {live.error}")
            if nano is not None and live.started:
                nano.mfu = mfu_of(nano.tokens_per_s, live.started, live.peak)
            print(f"   ({time.perf_counter() - t_start:.0f} s so far)", flush=True)
        # ---- (b) local-300m capped
        if "fit" in args.parts:
            cap = int(args.cap_gib * GiB) if cuda else 0
            full = full_recompute_value()
            preset_mode = str(load_preset("local-300m").model.grad_checkpoint).lower()
            big = local_300m(cuda, max(1, args.grad_accum // 2))
            sets = big.cockpit(model=not cuda)
            print(
                f"(b) local-300m, {big.tokens_per_step:,} tokens per step, allocator {'capped to ' + gib(cap) if cap else 'not capped (CPU)'}:"
                f" the preset (grad_checkpoint={preset_mode}), then model.grad_checkpoint={full}",
                flush=True,
            )
            runs = ((f"preset (grad_checkpoint={preset_mode})", []), (f"grad_checkpoint={full}", [f"model.grad_checkpoint={full}"]))
            for label, extra in runs:
                result = capped_run(out / f"local-300m-{len(fit)}", label, sets + extra, args.data, cap, budget)
                fit.append(result)
                if result.error:
                    print(f"   {label}: failed: {result.error}")
                print(f"   ({time.perf_counter() - t_start:.0f} s so far)", flush=True)
    finally:
        if not args.out:
            shutil.rmtree(out, ignore_errors=True)
    summary(cuda, args, nano, nano_own_mfu, live, fit, time.perf_counter() - t_start)
    return 0


def summary(
    cuda: bool,
    args: argparse.Namespace,
    nano: Figures | None,
    nano_own_mfu: float | None,
    live: LiveResult,
    fit: list[FitResult],
    wall_s: float,
) -> None:
    judged = cuda
    print(f"\n== summary ({'GPU' if cuda else 'CPU, tiny configuration'}; {wall_s:.0f} s in all) ==")
    if "nanogpt" in args.parts:
        own = f"; nanoGPT's own printed MFU {nano_own_mfu * 100:.1f}% (against an A100's 312 TFLOP/s)" if nano_own_mfu else ""
        print(f"(a) nanoGPT train.py:      {fmt_rate(nano) if args.nanogpt else 'skipped (no --nanogpt DIR)'}{own}")
        print(f"    cockpit headless:      {fmt_rate(live.headless)}")
        if live.started:
            print(
                f"    tokens per optimizer step: cockpit {live.started['tokens_per_step']:,}, nanoGPT {args.tokens_per_step:,};"
                f" MFU of both against cockpit's peak {flops(live.peak)}/s ({live.started.get('peak_source', '')})"
                f" at {flops(live.started.get('flops_per_token', 0))}/token (so the MFU ratio is the tokens/s ratio)"
            )
        r = ratio(live.headless, nano)
        print(f"    tokens/s cockpit / nanoGPT: {fmt(r)}  (goal >= {GOALS['vs_nanogpt']}: {verdict(r, GOALS['vs_nanogpt'], judged)})")
        m = live.headless.mfu if live.headless else None
        print(f"    cockpit MFU: {fmt(m and m * 100, '.1f', '%')}  (goal >= {GOALS['mfu'] * 100:.0f}%: {verdict(m, GOALS['mfu'], judged)})")
    if "fit" in args.parts:
        cap = f"{args.cap_gib:g} GiB" if cuda else "no cap on CPU"
        for result in fit:
            figures = fmt_rate(result.figures) if result.figures else f"failed: {result.error}"
            fits = {True: "fits", False: "does NOT fit", None: "-"}[result.fits]
            print(
                f"(b) local-300m {result.label}: {figures}; {fits} ({cap}); peak allocated {gib(result.peak)},"
                f" reserved {gib(result.reserved)}, planned {gib(result.planned)}"
                + (f" (measured / planned {result.peak / result.planned:.3f})" if result.peak and result.planned else "")
            )
            for note in result.figures.notes if result.figures else []:
                print(f"    {note}")
        if len(fit) == 2:
            r = ratio(fit[0].figures, fit[1].figures)
            goal = GOALS["recompute"]
            same = " (the preset recomputes every block already: the same configuration twice)" if fit[0].label.endswith(("=true)", "=full)")) else ""
            judgement = "FAIL (does not fit)" if judged and fit[0].fits is False else verdict(r, goal, judged)
            print(f"    tokens/s preset / full recompute: {fmt(r)}{same}  (goal: fits {cap} and >= {goal}: {judgement})")
    if "attach" in args.parts:
        print(f"(c) gpt2-small attached ({args.viewer}): {fmt_rate(live.attached)}; headless {fmt_rate(live.headless)}")
        for i, (headless, attached) in enumerate(live.rounds, 1):
            print(f"    round {i}: headless {headless:,.0f} tok/s (the windows either side), attached {attached:,.0f}: {attached / headless:.3f}")
        r = ratio(live.attached, live.headless)
        print(f"    tokens/s attached / headless: {fmt(r)}  (goal >= {GOALS['attached']}: {verdict(r, GOALS['attached'], judged)})")


if __name__ == "__main__":
    sys.exit(main())
