"""CPU threads: tokens/s of training and the time of `cockpit sample` at 1, 2 and torch's default
number of intra-op threads, on a quiet machine and with a competing CPU load the bench starts.

Each measurement is its own process (torch's thread pool is set once per process), training the
`default` preset's model (engine.model.gpt.GPT, AdamW from engine.optim.optimizers, random batches of its
shape: the threads change the arithmetic, not the data) for `--seconds` after a few warm-up
steps, then generating `--tokens` tokens as `cockpit sample` does (engine.model.sampling; stopped after
3x `--seconds`, the time for all of them extrapolated, marked `~`). The load is
`--load` busy Python processes (default: one per core), started before and ended after each
loaded measurement; the settings alternate within each round so other noise hits all alike.
The machine's load average is printed before and after: on a shared machine it is part of the
figure.

    python bench/threads.py [--seconds 4] [--tokens 200] [--rounds 2] [--load N]

What it decides: `train.threads = 0` (auto) in engine/config/run_config.py (engine/train/threads.py).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def spin(stop_at: float) -> None:
    """A competing load: one busy core until `stop_at` (a bound: it never outlives the bench)."""
    x = 0
    while time.time() < stop_at:
        x = (x * 1103515245 + 12345) & 0xFFFFFFFF


def child(threads: int, seconds: float, tokens: int) -> dict[str, float]:
    """Measured in this process: training tokens/s and sampling seconds at `threads` (0 =
    torch's default)."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    from engine.config import load_preset
    from engine.model import GPT, SamplingOptions, generate_tokens
    from engine.optim import build_optimizer

    cfg = load_preset("default", [])
    vocab = 65  # Tiny Shakespeare's characters: the default preset's char tokenizer
    torch.manual_seed(0)
    model = GPT(cfg.model, vocab)
    optimizer = build_optimizer(model, cfg.optim, "cpu")
    shape = (cfg.train.batch_size, cfg.model.block_size)
    x, y = torch.randint(0, vocab, shape), torch.randint(0, vocab, shape)

    def step() -> None:
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.optim.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        loss.item()

    for _ in range(3):
        step()
    steps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        step()
        steps += 1
    tokens_per_s = steps * cfg.tokens_per_step / (time.perf_counter() - t0)

    model.eval()
    options = SamplingOptions(max_new_tokens=tokens, temperature=1.0, top_k=None)
    generator = torch.Generator().manual_seed(1)
    made, t0 = 0, time.perf_counter()
    for _ in generate_tokens(model, [0], options, torch.device("cpu"), generator):
        made += 1
        if time.perf_counter() - t0 > 3 * seconds:  # bounded: the rest is extrapolated
            break
    sample_s = (time.perf_counter() - t0) * tokens / made
    return {"threads": torch.get_num_threads(), "tokens_per_s": tokens_per_s, "sample_s": sample_s,
            "sampled": made}  # fmt: skip


def measure(threads: int, args: argparse.Namespace, load: int) -> dict[str, float]:
    """One child process, under `load` busy processes started here and ended with it."""
    bound = time.time() + args.seconds + 120  # a load never outlives a stuck child
    spinners = [multiprocessing.Process(target=spin, args=(bound,), daemon=True) for _ in range(load)]
    for p in spinners:
        p.start()
    try:
        command = [sys.executable, __file__, "--child", str(threads), "--seconds", str(args.seconds),
                   "--tokens", str(args.tokens)]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        env.pop("OMP_NUM_THREADS", None)  # torch's own default, unless set here
        done = subprocess.run(command, capture_output=True, text=True, timeout=args.seconds + 110,
                              env=env, check=True)  # fmt: skip
        return json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        for p in spinners:
            p.terminate()
            p.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="training time per measurement")
    parser.add_argument("--tokens", type=int, default=200, help="tokens sampled per measurement")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--load", type=int, default=None, help="busy processes (default: one per core)")
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child, args.seconds, args.tokens)))
        return

    cores = len(os.sched_getaffinity(0))
    load = cores if args.load is None else args.load
    settings = sorted({1, 2, 0})  # 0: torch's default, whatever this machine gives
    print(f"{cores} cores usable; competing load: {load} busy processes; load average before: "
          f"{' '.join(f'{v:.1f}' for v in os.getloadavg())}")  # fmt: skip
    results: dict[tuple[int, int], list[dict[str, float]]] = {}
    for _ in range(args.rounds):
        for busy in (0, load):
            for threads in settings:
                results.setdefault((threads, busy), []).append(measure(threads, args, busy))
    print(f"load average after: {' '.join(f'{v:.1f}' for v in os.getloadavg())}")
    print(f"medians of {args.rounds} rounds; training {args.seconds:g} s, sampling {args.tokens} tokens")
    print(f"{'threads':>18} | {'train tok/s':>12} {'loaded':>12} | {'sample s':>9} {'loaded':>9}")
    for threads in settings:
        quiet, busy = results[(threads, 0)], results[(threads, load)]
        name = f"default ({int(quiet[0]['threads'])})" if threads == 0 else str(threads)

        def sample_cell(rows: list[dict[str, float]]) -> str:
            cut = any(r["sampled"] < args.tokens for r in rows)
            return f"{'~' if cut else ''}{med(rows, 'sample_s'):.2f}"

        def med(rows: list[dict[str, float]], key: str) -> float:
            return statistics.median(r[key] for r in rows)

        print(
            f"{name:>18} | {med(quiet, 'tokens_per_s'):>12,.0f} {med(busy, 'tokens_per_s'):>12,.0f} | "
            f"{sample_cell(quiet):>9} {sample_cell(busy):>9}"
        )


if __name__ == "__main__":
    main()
