"""Time to val loss 1.8922 on Tiny Shakespeare (char): `nanogpt-cpu` against `speedrun-cpu`.

Both presets train on the CPU in one invocation, alternating (nanogpt, speedrun, nanogpt, ...),
so machine noise hits both alike. Every evaluation is on the WHOLE val split. The time is the
engine's training wall time (`Eval.train_time_s`): evaluation is excluded, compilation (if a
preset compiles) is included.

    python bench/speedrun.py [--rounds 3] [--target 1.8922] [--data PATH]
    python bench/speedrun.py --ablation [--rounds 1] [--seeds 3] [--only LABEL ...]
    python bench/speedrun.py --nanogpt ~/nanoGPT [--busy] [--rounds 3]

Evaluation cadence: every `--coarse` steps, and every `--fine` steps once the last val loss is
within `--margin` of the target, so the first crossing is seen within a few steps. The time to
the target is reported two ways: at the first evaluation at or below the target ("eval"), and
linearly interpolated in train time between that evaluation and the one before ("interp").

The default target, 1.8922, is the real nanoGPT's final whole-val loss (`--nanogpt`, measured
at 3adf61e1 on 2026-12-05), the loss speedrun-cpu's schedule is made to reach.
nanogpt-cpu ends its 2000 cosine iterations near 1.90-1.91 on the whole val split; as nanoGPT
does when max_iters > lr_decay_iters, it continues at min_lr (train.max_steps raised, the decay
kept at 2000) until it reaches the target, and stops there. speedrun-cpu runs its whole (short)
schedule, so its final val loss and total time are reported too, and nanogpt's val loss at the
same train time is read off nanogpt's curve (interpolated).

The ablation runs speedrun-cpu with one technique it uses removed (-) or one it leaves out
added (+), each variant `--rounds` times for each of `--seeds` seeds (train.seed 1337, 1338,
...), and prints per variant the median and the spread (min-max) of its time to the target and
of its final val loss, and its time against the baseline's. The val loss at a step does not
depend on the machine's load (same seed, CPU), the times do: rounds measure the time's noise,
seeds the loss's.

`--nanogpt DIR` measures against the real nanoGPT instead of the `nanogpt-cpu` preset: its own
train.py from the checkout (run where it is, never copied; its char data written to a temporary
folder as its prepare.py writes them), with the CPU command of its README and torch's default
threads, alternating with `speedrun-cpu` at its default settings. nanoGPT's training time is the
sum of its iterations' times (its two evaluations' iterations counted at the median iteration's
time); its final weights are evaluated on the whole val split by cockpit's evaluator, and that
loss is the target speedrun-cpu's time is taken to (interpolated, as above). `--busy` measures
both sides a second time with one competing busy process (a spinning Python process started by
the bench, on any core), so the ratio is given quiet and under load, each a median of the rounds.

`--set KEY=VALUE` (repeatable) changes every run of the bench, e.g. to shrink it for a test.

Figures only, no pass/fail; the issue's goal is a ratio (speedrun / nanogpt time) <= 0.15.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import pickle
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from engine.config import load_preset
from engine.train import Trainer

SHAKESPEARE = (
    Path(__file__).resolve().parents[2] / "shared" / "data" / "tinyshakespeare" / "input.txt"
)

COMMON = [
    "eval.interval=0",  # the bench asks for evaluations itself (see Cadence)
    "eval.full_val=true",
    "eval.batches=1",  # the train-split estimate is not used here: keep it cheap
    "eval.batch_size=128",
    "sample.interval=0",
    "checkpoint.interval=0",
    "checkpoint.keep_best=false",
]
# nanoGPT continues at min_lr past lr_decay_iters when max_iters is larger.
BASELINE = ["train.max_steps=4000", "schedule.decay_steps=2000"]


@dataclass
class Result:
    name: str
    curve: list[tuple[int, float, float]] = field(default_factory=list)  # step, time, val
    crossed: bool = False
    wall_s: float = 0.0

    def time_to(self, target: float) -> tuple[float, float, int]:
        """(time at the first eval <= target, interpolated time, step); nan if never."""
        prev = (0, 0.0, math.inf)
        for step, t, val in self.curve:
            if val <= target:
                t0, v0 = prev[1], prev[2]
                interp = t if not math.isfinite(v0) else t0 + (t - t0) * (v0 - target) / (v0 - val)
                return t, interp, step
            prev = (step, t, val)
        return math.nan, math.nan, -1

    def val_at(self, t_query: float) -> float:
        """Val loss at train time t_query, linear between evals; nan outside the curve."""
        prev = None
        for step, t, val in self.curve:
            if t >= t_query:
                if prev is None:
                    return math.nan
                return prev[2] + (val - prev[2]) * (t_query - prev[1]) / max(t - prev[1], 1e-9)
            prev = (step, t, val)
        return math.nan

    @property
    def final(self) -> tuple[int, float, float]:
        return self.curve[-1] if self.curve else (0, math.nan, math.nan)


def timed_run(
    preset: str,
    overrides: list[str],
    data: str,
    target: float,
    stop_at_target: bool,
    coarse: int,
    fine: int,
    margin: float,
    label: str | None = None,
) -> Result:
    cfg = load_preset(preset, [*overrides, *COMMON])
    result = Result(label or preset)
    state = {"last_val": math.inf, "trainer": None}

    def sink(event) -> None:
        trainer = state["trainer"]
        if event.kind == "eval":
            result.curve.append((event.step, event.train_time_s, event.val_loss))
            state["last_val"] = event.val_loss
            if event.val_loss <= target:
                result.crossed = True
                if stop_at_target:
                    trainer.stop(checkpoint=False)
        elif event.kind == "step":
            every = fine if state["last_val"] - target <= margin else coarse
            if event.step % every == 0 and event.step < cfg.train.max_steps:
                trainer.evaluate()  # applied at the next step boundary, before the next step

    with tempfile.TemporaryDirectory() as run_dir:
        trainer = Trainer(cfg, run_dir=run_dir, data_path=data, sinks=[sink], telemetry=False)
        state["trainer"] = trainer
        t0 = time.perf_counter()
        final_state = trainer.run()
        result.wall_s = time.perf_counter() - t0
    if final_state not in ("finished", "stopped"):
        raise SystemExit(f"{preset} {overrides}: run ended {final_state}")
    return result


def fmt(x: float, spec: str = ".1f") -> str:
    return "-" if not math.isfinite(x) else format(x, spec)


def compare(args: argparse.Namespace) -> None:
    runs: dict[str, list[Result]] = {"nanogpt-cpu": [], "speedrun-cpu": []}
    for r in range(args.rounds):
        for name in runs:
            extra = BASELINE if name == "nanogpt-cpu" else []
            res = timed_run(
                name,
                [*extra, *args.set],
                args.data,
                args.target,
                stop_at_target=name == "nanogpt-cpu",
                coarse=args.coarse if name == "nanogpt-cpu" else min(args.coarse, 50),
                fine=args.fine,
                margin=args.margin,
            )
            runs[name].append(res)
            t_eval, t_int, step = res.time_to(args.target)
            fs, ft, fv = res.final
            print(
                f"round {r + 1} {name:13s} reached {args.target} at step {step:5d}: "
                f"train time {fmt(t_eval)} s (interp {fmt(t_int)} s); "
                f"last eval step {fs} val {fv:.4f} at {ft:.1f} s; wall {res.wall_s:.0f} s",
                flush=True,
            )
    base, fast = runs["nanogpt-cpu"], runs["speedrun-cpu"]
    print()
    print("per round (times in seconds of training, evaluation excluded):")
    ratios = []
    for r, (b, s) in enumerate(zip(base, fast, strict=True)):
        tb, tbi, _ = b.time_to(args.target)
        ts, tsi, _ = s.time_to(args.target)
        ratios.append(tsi / tbi)
        print(
            f"  round {r + 1}: nanogpt {fmt(tbi)} s, speedrun {fmt(tsi)} s, ratio {fmt(tsi / tbi, '.3f')};"
            f" nanogpt val at speedrun's time {fmt(b.val_at(tsi), '.4f')},"
            f" at speedrun's end ({s.final[1]:.1f} s) {fmt(b.val_at(s.final[1]), '.4f')};"
            f" speedrun val at nanogpt's time: {s.final[2]:.4f} (finished at {s.final[1]:.1f} s)"
        )
    mb = statistics.median(b.time_to(args.target)[1] for b in base)
    ms = statistics.median(s.time_to(args.target)[1] for s in fast)
    mbe = statistics.median(b.time_to(args.target)[0] for b in base)
    mse = statistics.median(s.time_to(args.target)[0] for s in fast)
    print()
    print(
        f"median time to val {args.target} (interpolated): nanogpt-cpu {mb:.1f} s, "
        f"speedrun-cpu {ms:.1f} s, ratio {ms / mb:.3f} (goal <= 0.15)"
    )
    print(
        f"median of the rounds' ratios {fmt(statistics.median(ratios), '.3f')} "
        f"(min {fmt(min(ratios), '.3f')}, max {fmt(max(ratios), '.3f')}, {len(ratios)} rounds)"
    )
    print(
        f"median time to val {args.target} (first eval at/below): nanogpt-cpu {mbe:.1f} s, "
        f"speedrun-cpu {mse:.1f} s, ratio {mse / mbe:.3f}"
    )
    print(
        f"median final val of speedrun-cpu {statistics.median(s.final[2] for s in fast):.4f} "
        f"at {statistics.median(s.final[1] for s in fast):.1f} s; nanogpt-cpu at that time "
        f"{statistics.median(b.val_at(s.final[1]) for b, s in zip(base, fast, strict=True)):.4f}"
    )


# speedrun-cpu with one technique it uses removed (-), or one it leaves out added (+): the
# overrides. The first row is the baseline the others are compared with.
ABLATIONS: list[tuple[str, list[str]]] = [
    ("speedrun-cpu", []),
    ("- bfloat16 (float32, 200 steps)", ["train.dtype=float32", "train.max_steps=200"]),
    ("- muon (AdamW everywhere)", ["optim.name=adamw"]),
    ("- fp32 Newton-Schulz (bf16)", ["optim.muon_ns=bf16"]),
    ("- Muon momentum 0.85 (0.95)", ["optim.muon_momentum=0.95"]),
    ("- Muon LR 0.04 (0.02)", ["optim.muon_lr=0.02"]),
    ("- 215 steps, decay 0.5 (300, 0.4)", ["train.max_steps=300", "schedule.decay_fraction=0.4"]),
    ("- 215 steps (200)", ["train.max_steps=200"]),
    ("- wsd (cosine to min_lr)", ["schedule.kind=cosine"]),
    ("- rotary (learned positions)", ["model.pos_emb=learned"]),
    ("- qk_norm", ["model.qk_norm=false"]),
    ("- sequence warmup (64 from step 0)", ["train.seq_start=0", "train.seq_warmup_steps=0"]),
    ("- sequence warmup over 80 steps (60)", ["train.seq_warmup_steps=60"]),
    ("+ relu2 (instead of GELU)", ["model.mlp=relu2"]),
    ("+ rmsnorm (instead of LayerNorm)", ["model.norm=rmsnorm"]),
    ("+ untied head", ["model.tie_embeddings=false"]),
    ("+ zero-init projections", ["model.zero_init_proj=true"]),
    ("+ logit softcap 15", ["model.logit_softcap=15.0"]),
    ("+ value embeddings (2 tables)", ["model.value_embeds=2"]),
    ("+ U-net skips", ["model.unet_skips=true"]),
    ("+ Polar Express (not N-S)", ["optim.muon_ns=polar"]),
    ("+ NorMuon", ["optim.muon_variant=normuon", "optim.normuon_beta2=0.9"]),
    ("+ weight decay 0.1", ["optim.weight_decay=0.1"]),
    ("+ cautious weight decay 0.1", ["optim.weight_decay=0.1", "optim.cautious_wd=true"]),
    ("+ embeddings at 3x lr", ["optim.embed_lr=9e-3"]),
    ("+ batch-size ramp 4 -> 16 (100 st)", ["train.batch_start=4", "train.batch_ramp_steps=100"]),
]


@dataclass
class Row:
    """One variant of the ablation over its rounds and seeds: medians and spreads (min, max)."""

    label: str
    runs: int
    reached: int  # runs that reached the target
    time_to: tuple[float, float, float]  # median, min, max (interpolated, reaching runs only)
    step_to: float  # median step of the first evaluation at or below the target
    final_val: tuple[float, float, float]  # median, min, max
    train_s: float  # median train time of the whole schedule
    ms_per_step: float


def spread(values: list[float]) -> tuple[float, float, float]:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return math.nan, math.nan, math.nan
    return statistics.median(finite), min(finite), max(finite)


def summarise(label: str, results: list[Result], target: float) -> Row:
    crossings = [r.time_to(target) for r in results]
    reaching = [c for c in crossings if c[2] >= 0]
    steps = [r.final[0] for r in results]
    train = [r.final[1] for r in results]
    return Row(
        label=label,
        runs=len(results),
        reached=len(reaching),
        time_to=spread([c[1] for c in reaching]),
        step_to=statistics.median(c[2] for c in reaching) if reaching else math.nan,
        final_val=spread([r.final[2] for r in results]),
        train_s=statistics.median(train),
        ms_per_step=statistics.median(
            1000 * t / max(n, 1) for t, n in zip(train, steps, strict=True)
        ),
    )


def ablation_table(rows: list[Row], target: float) -> list[str]:
    """The printed table: the first row is the baseline the time ratio is against."""
    base = rows[0].time_to[0]
    lines = [
        f"{'variant':36s} {'time to ' + str(target) + ' (min-max)':>24s} {'vs base':>8s} {'step':>6s} "
        f"{'final val (min-max)':>24s} {'train s':>8s} {'s/step':>8s}"
    ]
    for row in rows:
        t, t_lo, t_hi = row.time_to
        if row.reached == 0:
            t_txt, ratio = "not reached", "-"
        else:
            t_txt = f"{t:.1f} ({t_lo:.1f}-{t_hi:.1f})"
            if row.reached < row.runs:
                t_txt = f"{row.reached}/{row.runs}: {t_txt}"
            ratio = fmt(t / base, ".2f") if math.isfinite(base) else "-"
        v, v_lo, v_hi = row.final_val
        step = str(round(row.step_to)) if math.isfinite(row.step_to) else "-"
        lines.append(
            f"{row.label:36s} {t_txt:>24s} {ratio:>8s} {step:>6s} "
            f"{f'{v:.4f} ({v_lo:.4f}-{v_hi:.4f})':>24s} {row.train_s:8.1f} {row.ms_per_step:6.1f}ms"
        )
    return lines


def ablation(args: argparse.Namespace) -> None:
    base_cfg = load_preset("speedrun-cpu", args.set)
    budget_steps = base_cfg.train.max_steps
    seed0 = base_cfg.train.seed
    variants = [(label, ov) for label, ov in ABLATIONS if not args.only or label in args.only]
    unknown = set(args.only) - {label for label, _ in ABLATIONS}
    if unknown:
        raise SystemExit(
            f"--only: no variant named {sorted(unknown)}; the variants: "
            f"{[label for label, _ in ABLATIONS]}"
        )
    print(
        f"ablation: speedrun-cpu with one technique removed (-) or added (+); {args.rounds} "
        f"round(s) x {args.seeds} seed(s) ({seed0}..{seed0 + args.seeds - 1}) per variant; each "
        f"runs speedrun-cpu's {budget_steps}-step schedule (no early stop)"
    )
    results: dict[str, list[Result]] = {label: [] for label, _ in variants}
    for r in range(args.rounds):
        for seed in range(seed0, seed0 + args.seeds):
            for label, overrides in variants:
                res = timed_run(
                    "speedrun-cpu",
                    [*overrides, *args.set, f"train.seed={seed}"],
                    args.data,
                    args.target,
                    stop_at_target=False,
                    coarse=min(args.coarse, 50),
                    fine=args.fine,
                    margin=args.margin,
                    label=label,
                )
                results[label].append(res)
                t = res.time_to(args.target)[1]
                print(
                    f"  round {r + 1} seed {seed} {label:36s} final val {res.final[2]:.4f}, "
                    f"{args.target} at {fmt(t)} s; done in {res.wall_s:.0f} s",
                    flush=True,
                )
    print()
    rows = [summarise(label, res, args.target) for label, res in results.items()]
    print("\n".join(ablation_table(rows, args.target)))
    print(
        "(time to target: interpolated between full-val evaluations, every 10 steps near it, "
        "median and min-max over the runs that reached it; vs base: against the first row's "
        "median; step: the first evaluation at or below it; the step and the final val do not "
        "depend on the machine's speed, the times do)"
    )


# nanoGPT's README, "I only have a macbook": its CPU recipe for Tiny Shakespeare (char)
NANOGPT_CPU = [
    "--device=cpu", "--compile=False", "--eval_iters=20", "--log_interval=1", "--block_size=64",
    "--batch_size=12", "--n_layer=4", "--n_head=4", "--n_embd=128", "--max_iters=2000",
    "--lr_decay_iters=2000", "--dropout=0.0",
]  # fmt: skip
# evaluated at iterations 0 and 2000 only, the final weights saved for cockpit's evaluator
NANOGPT_OUT = ["--eval_interval=2000", "--always_save_checkpoint=True", "--wandb_log=False"]
NANOGPT_ITER = re.compile(r"^iter (\d+): loss [-\d.naninf]+, time ([\d.]+)ms", re.M)
NANOGPT_EVAL = re.compile(r"^step (\d+): train loss ([\d.]+), val loss ([\d.]+)", re.M)


@dataclass
class NanoRun:
    train_s: float  # its iterations' times, an evaluation's iteration at the median's
    iterations: int
    own_val: float  # its own estimate at the end (eval_iters batches)
    full_val: float  # its final weights on the whole val split, by cockpit's evaluator


def write_char_data(text_path: str, folder: Path) -> None:
    """nanoGPT's shakespeare_char data as its prepare.py makes them: the sorted characters as
    ids, the first 90% train, the rest val, uint16 files and a meta.pkl."""
    text = Path(text_path).read_text(encoding="utf-8")
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    cut = int(len(text) * 0.9)
    folder.mkdir(parents=True, exist_ok=True)
    for split, part in (("train", text[:cut]), ("val", text[cut:])):
        np.array([stoi[c] for c in part], dtype=np.uint16).tofile(folder / f"{split}.bin")
    meta = {"vocab_size": len(chars), "itos": dict(enumerate(chars)), "stoi": stoi}
    (folder / "meta.pkl").write_bytes(pickle.dumps(meta))


def full_val_of(ckpt: Path, data: str) -> float:
    """A nanoGPT ckpt.pt's loss on the whole val split, as cockpit evaluates speedrun-cpu's: the
    nanogpt-cpu preset started from its weights, evaluated before its first step."""
    cfg = load_preset("nanogpt-cpu", [f"model.init_from={ckpt}", "train.max_steps=1", *COMMON])
    vals: list[float] = []
    with tempfile.TemporaryDirectory() as run_dir:
        sink = lambda ev: vals.append(ev.val_loss) if ev.kind == "eval" else None  # noqa: E731
        trainer = Trainer(cfg, run_dir=run_dir, data_path=data, sinks=[sink], telemetry=False)
        trainer.evaluate()  # taken at the first step boundary, before the step trains
        state = trainer.run()
    if not vals:
        raise SystemExit(f"{ckpt}: cockpit could not evaluate nanoGPT's weights (the run {state})")
    return vals[0]


def run_real_nanogpt(checkout: Path, work: Path, data: str, extra: list[str]) -> NanoRun:
    """nanoGPT's train.py, from `work` (its data/ and a link to its configurator.py there)."""
    link = work / "configurator.py"
    if not link.exists():
        link.symlink_to(checkout / "configurator.py")
    out = work / "out"
    argv = [sys.executable, str(checkout / "train.py"), str(checkout / "config" / "train_shakespeare_char.py"),
            *NANOGPT_CPU, *NANOGPT_OUT, f"--out_dir={out}", *extra]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}  # torch's default
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # leave the checkout as it is
    done = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True)
    iters = [(int(i), float(ms) / 1e3) for i, ms in NANOGPT_ITER.findall(done.stdout)]
    evals = [(int(s), float(v)) for s, _, v in NANOGPT_EVAL.findall(done.stdout)]
    if done.returncode != 0 or not iters or not evals:
        raise SystemExit(
            f"nanoGPT's train.py exited {done.returncode}: {(done.stdout + done.stderr)[-1500:]}"
        )
    evaluated = {s for s, _ in evals}
    median = statistics.median(t for i, t in iters if i not in evaluated)
    train_s = sum(median if i in evaluated else t for i, t in iters)
    # cockpit reads a char model's vocabulary from the meta.pkl beside its ckpt.pt
    (out / "meta.pkl").write_bytes((work / "data" / "shakespeare_char" / "meta.pkl").read_bytes())
    return NanoRun(train_s, len(iters), evals[-1][1], full_val_of(out / "ckpt.pt", data))


@contextlib.contextmanager
def busy_process(on: bool) -> Iterator[None]:
    """One competing process that spins on a core for as long as the block runs."""
    if not on:
        yield
        return
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        spinner.kill()
        spinner.wait()


def against_nanogpt(args: argparse.Namespace) -> None:
    checkout = Path(args.nanogpt).expanduser().resolve()
    conditions = ["quiet", "busy"] if args.busy else ["quiet"]
    summary = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        write_char_data(args.data, work / "data" / "shakespeare_char")
        for condition in conditions:
            ratios, nano_s, fast_s = [], [], []
            with busy_process(condition == "busy"):
                for r in range(args.rounds):
                    nano = run_real_nanogpt(checkout, work, args.data, args.nanogpt_set)
                    res = timed_run("speedrun-cpu", args.set, args.data, nano.full_val, stop_at_target=False,
                                    coarse=min(args.coarse, 50), fine=args.fine, margin=args.margin)  # fmt: skip
                    _, t_int, step = res.time_to(nano.full_val)
                    ratios.append(t_int / nano.train_s)
                    nano_s.append(nano.train_s)
                    fast_s.append(t_int)
                    print(
                        f"{condition} round {r + 1}: nanoGPT {nano.iterations} iterations in {nano.train_s:.1f} s of "
                        f"training, final val {nano.full_val:.4f} on the whole split (its own estimate "
                        f"{nano.own_val:.4f}); speedrun-cpu reached it at step {step} after {fmt(t_int)} s "
                        f"(final val {res.final[2]:.4f} at {res.final[1]:.1f} s); ratio {fmt(t_int / nano.train_s, '.3f')}",
                        flush=True,
                    )  # fmt: skip
            finite = [x for x in ratios if math.isfinite(x)]
            summary.append(
                f"{condition}: median ratio {fmt(statistics.median(finite), '.3f') if finite else '-'} "
                f"(min {fmt(min(finite or [math.nan]), '.3f')}, max {fmt(max(finite or [math.nan]), '.3f')}, "
                f"{len(finite)}/{len(ratios)} rounds reached nanoGPT's val); nanoGPT median {statistics.median(nano_s):.1f} s, "
                f"speedrun-cpu median {fmt(statistics.median(fast_s))} s"
            )  # fmt: skip
    print()
    print(
        "speedrun-cpu (default settings) / nanoGPT's CPU recipe, training time to nanoGPT's final val:"
    )
    for line in summary:
        print("  " + line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="alternating rounds (default 3; 1 for the ablation)",
    )
    parser.add_argument("--seeds", type=int, default=1, help="ablation: seeds per variant")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="LABEL",
        help="ablation: run only this variant (repeatable; the first one run is "
        "the baseline of the ratios)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an override for every run (repeatable)",
    )
    parser.add_argument("--target", type=float, default=1.8922)
    parser.add_argument("--coarse", type=int, default=100, help="steps between evals far away")
    parser.add_argument("--fine", type=int, default=10, help="steps between evals near target")
    parser.add_argument("--margin", type=float, default=0.04, help="'near' = within this much")
    parser.add_argument("--ablation", action="store_true", help="one technique removed at a time")
    parser.add_argument(
        "--nanogpt", metavar="DIR", help="a nanoGPT checkout: compare with its own train.py"
    )
    parser.add_argument(
        "--busy", action="store_true", help="with --nanogpt: also under one busy process"
    )
    parser.add_argument(
        "--nanogpt-set",
        action="append",
        default=[],
        metavar="--KEY=VALUE",
        help="with --nanogpt: an extra argument to its train.py (e.g. to shrink it for a test)",
    )
    parser.add_argument(
        "--data", default=os.environ.get("COCKPIT_TINYSHAKESPEARE", str(SHAKESPEARE))
    )
    args = parser.parse_args()
    if args.nanogpt and not (Path(args.nanogpt).expanduser() / "train.py").is_file():
        parser.error(f"--nanogpt {args.nanogpt}: no train.py there (give a nanoGPT checkout)")
    if args.busy and not args.nanogpt:
        parser.error("--busy measures against the real nanoGPT: give --nanogpt DIR too")
    if args.rounds is None:
        args.rounds = 1 if args.ablation else 3
    os.environ.setdefault("COCKPIT_CACHE_DIR", str(Path(tempfile.gettempdir()) / "speedrun-cache"))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, data {args.data}")
    if args.nanogpt:
        against_nanogpt(args)
    else:
        ablation(args) if args.ablation else compare(args)


if __name__ == "__main__":
    main()
