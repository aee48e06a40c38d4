"""Causal attention on the CPU: torch's fused kernel (scaled_dot_product_attention) against the
same arithmetic written out as three ops, forward and backward, in bfloat16 and float32.

    python bench/attention_cpu.py [--rounds 5] [--threads N]

The two are timed alternately, round by round, so the machine's noise hits both alike; each
shape prints the median time of each and their ratio. The model (engine/model/gpt.py) writes the
attention out on a CPU in bfloat16 up to CPU_BFLOAT16_UNFUSED_MAX_TOKENS tokens, where this
bench finds the written-out form faster. Figures only, no pass/fail.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from engine.model.gpt import (
    CPU_BFLOAT16_UNFUSED_MAX_TOKENS,
    causal_attention,
    unfused_causal_attention,
)

# (batch, heads, tokens, head dim): speedrun-cpu's layer, then longer sequences at GPT-2's heads
SHAPES = ((16, 4, 64, 32), (8, 6, 128, 64), (4, 8, 256, 64), (2, 12, 512, 64), (1, 12, 1024, 64))


def fused(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def seconds(fn, q, k, v, grad: torch.Tensor, repeats: int) -> float:
    """Mean seconds of one forward and backward."""
    start = time.perf_counter()
    for _ in range(repeats):
        fn(q, k, v).backward(grad)
    return (time.perf_counter() - start) / repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: its default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"{torch.get_num_threads()} threads; {args.rounds} alternating rounds, medians")
    print(f"{'dtype':9s} {'shape (b, h, t, d)':22s} {'fused ms':>9s} {'3 ops ms':>9s} {'fused/3 ops':>12s}")
    for dtype in (torch.bfloat16, torch.float32):
        for shape in SHAPES:
            q, k, v = (torch.randn(shape, dtype=dtype, requires_grad=True) for _ in range(3))
            grad = torch.randn(shape, dtype=dtype)
            # the model's own choice must give the fused kernel's result
            torch.testing.assert_close(
                causal_attention(q, k, v, 0.0), fused(q, k, v), atol=2e-2, rtol=2e-2
            )
            repeats = max(1, 2048 // shape[2])
            times: dict[str, list[float]] = {"fused": [], "3 ops": []}
            for fn in (fused, unfused_causal_attention):  # warm up both
                seconds(fn, q, k, v, grad, 1)
            for _ in range(args.rounds):
                times["fused"].append(seconds(fused, q, k, v, grad, repeats))
                times["3 ops"].append(seconds(unfused_causal_attention, q, k, v, grad, repeats))
            a, b = (statistics.median(times[key]) * 1e3 for key in ("fused", "3 ops"))
            print(f"{str(dtype)[6:]:9s} {str(shape):22s} {a:9.2f} {b:9.2f} {a / b:12.2f}")
    print(
        f"the model writes attention out on a CPU in bfloat16 up to "
        f"{CPU_BFLOAT16_UNFUSED_MAX_TOKENS} tokens"
    )


if __name__ == "__main__":
    main()
