"""`cockpit sample RUN --compare OTHER...`: the same prompt(s), with the same settings and seed,
sampled from each run or checkpoint and printed as one table, so the differences are the
models'. A column per source on a terminal wide enough, else (and when piped) a block per
source under each prompt.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

MIN_COLUMN = 24  # narrower columns wrap a sample into a ribbon: one block per source instead
GAP = " │ "


def source_name(target: str, trained: Any) -> str:
    """How a source is called in the table: a run's directory name, or run/checkpoint file,
    with the step its weights are from."""
    path = Path(target)
    name = path.name if path.is_dir() else f"{path.resolve().parent.name}/{path.name}"
    return f"{name} @ {trained.step:,}"


def wrapped(text: str, width: int) -> list[str]:
    """`text` wrapped to `width`, its own line breaks kept."""
    lines: list[str] = []
    for line in text.splitlines() or [""]:
        lines += textwrap.wrap(line, width, replace_whitespace=False, drop_whitespace=False) or [""]
    return lines


def columns(names: Sequence[str], texts: Sequence[str], width: int) -> list[str]:
    """One row of columns: a header of the names, a rule, then the texts side by side."""
    column = (width - len(GAP) * (len(names) - 1)) // len(names)
    cells = [wrapped(t, column) for t in texts]
    lines = [GAP.join(n[:column].ljust(column) for n in names).rstrip()]
    lines.append("─┼─".join("─" * column for _ in names))
    for i in range(max(len(c) for c in cells)):
        row = GAP.join((c[i] if i < len(c) else "").ljust(column) for c in cells)
        lines.append(row.rstrip())
    return lines


def blocks(names: Sequence[str], texts: Sequence[str]) -> list[str]:
    """A block per source: its name on a rule, then its text."""
    lines: list[str] = []
    for name, text in zip(names, texts, strict=True):
        lines += [f"── {name} ──", *text.splitlines()]
    return lines


def table(
    prompts: Sequence[str], names: Sequence[str], texts: Sequence[Sequence[str]], width: int | None
) -> str:
    """Every prompt's continuations (texts[p][s]: prompt p, source s) as one table; `width`
    None (piped) or too narrow for a column each: a block per source."""
    from cockpit.cli.sample import shell_quote

    out: list[str] = []
    for prompt, row in zip(prompts, texts, strict=True):
        if out:
            out.append("")  # a blank line between prompts
        out.append(f"prompt {shell_quote(prompt)}")
        if width is not None and (width - len(GAP) * (len(names) - 1)) // len(names) >= MIN_COLUMN:
            out += columns(names, row, width)
        else:
            out += blocks(names, row)
    return "\n".join(out) + "\n"


def terminal_width(out: TextIO) -> int | None:
    """The terminal's width when `out` is one, else None (piped: plain blocks)."""
    try:
        return shutil.get_terminal_size().columns if out.isatty() else None
    except (AttributeError, ValueError):
        return None


def sample_compare(args: argparse.Namespace) -> int:
    """Load each source, sample each prompt with the same settings and seed, print the table."""
    import secrets

    import torch

    from cockpit.cli.sample import header, pick_device, reproduce_command
    from engine.checkpoint import load_trained
    from engine.model import SamplingOptions, encode_prompt, stream_text
    from engine.train import apply_threads, autocast_context, select_dtype

    device = pick_device(args.device)
    targets = [args.target, *args.compare]
    models = [load_trained(t, device=str(device)) for t in targets]  # every one before any text
    cfg = models[0].cfg  # the first source's settings for all: the same sampling for each
    apply_threads(cfg.train.threads if args.threads is None else args.threads, device.type)
    options = SamplingOptions(
        max_new_tokens=cfg.sample.max_new_tokens if args.tokens is None else args.tokens,
        temperature=cfg.sample.temperature if args.temperature is None else args.temperature,
        top_k=cfg.sample.top_k if args.top_k is None else args.top_k,
    )
    if args.prompt is not None:
        prompts = [args.prompt]
    else:
        prompts = list(cfg.sample.prompts) or [""]
    for trained in models:  # a prompt a source cannot encode is one line, before any sampling
        for prompt in prompts:
            encode_prompt(trained.tokenizer, prompt, trained.cfg.model.block_size)
    for trained in models:
        print(header(trained, device, options), file=sys.stderr)
    greedy = options.temperature == 0
    seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
    texts: list[list[str]] = []
    for prompt in prompts:
        row = []
        for trained in models:
            encoded = encode_prompt(trained.tokenizer, prompt, trained.cfg.model.block_size)
            generator = None if greedy else torch.Generator(device=device).manual_seed(seed)
            autocast = autocast_context(device, select_dtype(trained.cfg.train.dtype, device))
            pieces = stream_text(trained.model, trained.tokenizer, encoded.ids, options, device,
                                 generator, autocast)  # fmt: skip
            row.append(prompt + "".join(pieces))
        texts.append(row)
    names = [source_name(t, m) for t, m in zip(targets, models, strict=True)]
    sys.stdout.write(table(prompts, names, texts, terminal_width(sys.stdout)))
    sys.stdout.flush()
    if not greedy and args.seed is None:
        print(
            f"seed {seed}: {reproduce_command(args, options, args.prompt, seed)}", file=sys.stderr
        )
    return 0
