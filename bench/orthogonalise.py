"""Muon's orthogonalisation of one step's updates, on the matrix against on its Gram matrix.

    python bench/orthogonalise.py [--preset speedrun-cpu] [--rounds 5] [--repeat 20] [--threads N]

For each shape of the preset's block matrices (as Muon batches them: every block's matrix of
that shape at once; a tall one is iterated as its transpose), times 5 Newton-Schulz steps both ways in
float32, alternating round by round so machine noise hits both alike, and prints the median
time of each, their ratio, which one Muon takes (`gram_is_cheaper`) and the largest difference
between the two results. Figures only, no pass/fail.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from engine.config import load_preset
from engine.model import GPT
from engine.optim.muon import gram_is_cheaper, quintic_steps

JORDAN = (3.4445, -4.7750, 2.0315)  # torch.optim.Muon's Newton-Schulz coefficients
STEPS = 5


def batches(preset: str) -> dict[tuple[int, int], torch.Tensor]:
    """One random (normalised) update per block matrix, stacked by its shape, as Muon stacks
    them; each batch wide (m <= n), as Newton-Schulz iterates a tall one's transpose."""
    cfg = load_preset(preset, [])
    model = GPT(cfg.model, 65)
    shapes: dict[tuple[int, int], int] = {}
    for name, p in model.named_parameters():
        if p.dim() == 2 and name.startswith("blocks."):
            shapes[tuple(p.shape)] = shapes.get(tuple(p.shape), 0) + 1
    torch.manual_seed(0)
    out = {}
    for (rows, cols), count in shapes.items():
        x = torch.randn(count, min(rows, cols), max(rows, cols))
        out[(rows, cols)] = x / x.norm(dim=(-2, -1), keepdim=True)
    return out


def timed(x: torch.Tensor, on_gram: bool, repeat: int) -> float:
    t0 = time.perf_counter()
    for _ in range(repeat):
        quintic_steps(x, [JORDAN] * STEPS, on_gram=on_gram)
    return (time.perf_counter() - t0) / repeat * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="speedrun-cpu")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the trainer's on 2 cores: 1)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s), {args.preset}, {STEPS} steps, float32")
    total = {False: 0.0, True: 0.0, "taken": 0.0}
    for (rows, cols), x in batches(args.preset).items():
        m, n = x.shape[-2:]
        times: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(2):  # warm both paths up
            timed(x, False, 1), timed(x, True, 1)
        for r in range(args.rounds):
            for on_gram in ((False, True) if r % 2 == 0 else (True, False)):
                times[on_gram].append(timed(x, on_gram, args.repeat))
        direct, gram = statistics.median(times[False]), statistics.median(times[True])
        diff = (quintic_steps(x, [JORDAN] * STEPS, on_gram=False)
                - quintic_steps(x, [JORDAN] * STEPS, on_gram=True)).abs().max().item()  # fmt: skip
        taken = gram_is_cheaper(m, n, STEPS)
        total[False] += direct
        total[True] += gram
        total["taken"] += gram if taken else direct
        print(
            f"  {x.size(0)} x ({rows}, {cols}): direct {direct:6.2f} ms, on the Gram matrix {gram:6.2f} ms,"
            f" ratio {gram / direct:.2f}; Muon takes {'the Gram' if taken else 'the direct'} one;"
            f" largest difference {diff:.1e}"
        )
    print(
        f"a step's orthogonalisation: all direct {total[False]:.2f} ms, as Muon takes them "
        f"{total['taken']:.2f} ms (ratio {total['taken'] / total[False]:.2f})"
    )


if __name__ == "__main__":
    main()
