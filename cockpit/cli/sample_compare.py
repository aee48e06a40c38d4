"""`cockpit sample RUN --compare OTHER...`'s table: the same prompt(s) sampled from each run or
checkpoint, a column per source on a terminal wide enough, else (and when piped) a block per
source under each prompt.
"""

from __future__ import annotations

import shutil
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
    """Every prompt's texts (texts[p][s]: prompt p, source s) as one table; `prompts` as
    shown (shell-quoted); `width` None (piped) or too narrow for a column each: a block per
    source."""
    out: list[str] = []
    for prompt, row in zip(prompts, texts, strict=True):
        if out:
            out.append("")  # a blank line between prompts
        out.append(f"prompt {prompt}")
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
