"""The runs table: one row per listed run, fitted to the terminal's width (`cockpit runs` and the
runs screen). Pure text, no Textual."""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from cockpit.figures.durations import fmt_duration
from cockpit.figures.numbers import fmt_int, fmt_loss, fmt_si, fmt_tick
from engine.rundir import ListedRun

GAP = "  "
MIN_NAME_WIDTH = 20  # a run's name is shortened no further (then the table is wider)
# every column, in order; the optional ones give way, first to last, until the table fits: the
# first five before the run's name is shortened (None), the others before it goes below the minimum
HEADERS = ("RUN", "PRESET", "FROM", "STATE", "STEP", "BEST VAL", "BPB", "TOKENS", "TRAIN", "WHEN",
           "SIZE", "CKPT")  # fmt: skip
RIGHT_ALIGNED = {"STEP", "BEST VAL", "BPB", "TOKENS", "TRAIN", "WHEN", "SIZE"}
DROP_ORDER = (("CKPT", None), ("SIZE", None), ("TOKENS", None), ("FROM", None), ("BPB", None),
              ("TRAIN", MIN_NAME_WIDTH), ("PRESET", MIN_NAME_WIDTH))  # fmt: skip
# Shown only when a listed run has a value: runs recorded before bits per byte have none ("-"),
# runs trained from scratch no weights they started from (FROM).
SHOWN_IF_ANY = {"BPB", "FROM"}


def printable(text: str) -> str:
    """`text` safe for one table line: a name is anyone's to choose (no newlines or terminal
    escapes reach the screen)."""
    return "".join(c if c.isprintable() else "?" for c in text)


def fmt_uptime(seconds: float | None) -> str:
    """'42s', '12m 05s', '1h 02m', '2d 03h' (a process listing's age: two units at most)."""
    if seconds is None or seconds < 60 or seconds >= 86_400:
        return fmt_duration(seconds)  # '-', '42s', '2d 03h'
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m" if hours else f"{minutes}m {secs:02d}s"


def fmt_steps(step: int, max_steps: int | None) -> str:
    """'1,234/100k': the step exact, the planned total short."""
    return f"{fmt_int(step)}/{fmt_tick(max_steps)}" if max_steps else fmt_int(step)


def fmt_ago(seconds: float | None) -> str:
    """'just now', '42s ago', '5m ago', '2h ago', '3d ago', '14w ago'."""
    if seconds is None:
        return "-"
    s = max(0, int(seconds))
    for unit, size in (("w", 7 * 86_400), ("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)):
        if s >= size:
            return f"{s // size}{unit} ago"
    return "just now"


def fmt_best(summary: dict[str, Any]) -> str:
    """'2.576@300': the best val loss and its step."""
    best = summary["best_val"]
    return "-" if best is None else f"{fmt_loss(best['value'])}@{fmt_tick(best['step'])}"


def fmt_bpb(summary: dict[str, Any]) -> str:
    """'1.234': the lowest val loss in bits per byte of text (comparable across tokenizers);
    '-' for a run that recorded none."""
    best = summary.get("best_val_bpb")
    return "-" if best is None else f"{best['value']:.3f}"


def fmt_from(source: str | None) -> str:
    """The weights a run started from, short: a Hugging Face cache's model name (`gpt2`), a
    checkpoint with its run (`run-a/best.pt`), else the last name of the path; '-' for none."""
    if not source:
        return "-"
    parts = source.rstrip("/").split("/")
    cached = [p for p in parts if p.startswith("models--")]
    if cached:  # ~/.cache/huggingface/hub/models--openai-community--gpt2/snapshots/HASH
        return cached[-1].removeprefix("models--").split("--")[-1]
    if parts[-1].endswith((".pt", ".dcp")) and len(parts) > 1:
        return "/".join(parts[-2:])
    return parts[-1]


def fmt_size(n: int) -> str:
    """'812K', '1.2G': a listing's size, short."""
    for unit, scale in (("T", 2**40), ("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if n >= scale:
            v = n / scale
            return f"{v:.1f}{unit}" if v < 10 else f"{v:.0f}{unit}"
    return f"{n}B"


def family_name(listed: ListedRun) -> str:
    """A branch names its parent and the step it left it at: `child <- parent@3000`."""
    parent = listed.summary.get("parent")
    if not parent:
        return listed.name
    return f"{listed.name} <- {os.path.basename(parent['run'])}@{parent['step']}"


def row(listed: ListedRun, now: float) -> dict[str, str]:
    s = listed.summary
    saved = s["last_checkpoint"]
    if listed.problem is not None:  # what is wrong follows the state (table, problem_line)
        return {**dict.fromkeys(HEADERS, "-"), "RUN": printable(listed.name), "STATE": listed.state}
    return {
        "RUN": printable(family_name(listed)),
        "PRESET": printable(s["preset"] or "-"),
        "FROM": printable(fmt_from(listed.weights_from)),
        "STATE": listed.state,
        "STEP": fmt_steps(s["step"], s["max_steps"]),
        "BEST VAL": fmt_best(s),
        "BPB": fmt_bpb(s),
        "TOKENS": fmt_si(s["tokens"]) if s["tokens"] else "-",
        "TRAIN": fmt_uptime(s["train_time_s"]) if s["train_time_s"] else "-",
        "WHEN": fmt_ago(None if s["started"] is None else now - s["started"]),
        "SIZE": fmt_size(listed.size_bytes),
        "CKPT": printable(os.path.basename(str(saved["path"]))) if saved and saved["path"] else "-",
    }


def table(runs: Sequence[ListedRun], now: float, width: int = 80) -> list[str]:
    """A header and one row per run, fitted to `width` by leaving columns out (the checkpoint,
    size, tokens, weights, bits per byte, training time, preset, in that order). A run's name
    is never cut: it is what `cockpit attach`, `--resume`, `fork` and `compare` are given, and
    a name cut in the middle cannot be copied; a name too long for `width` makes the row wider."""
    rows = [row(r, now) for r in runs]
    columns, widths = fit_columns(rows, width, cut_name=False)
    lines = [aligned_line({h: h for h in columns}, columns, widths)]
    for listed, cells in zip(runs, rows, strict=True):
        if listed.problem is not None:
            lines.append(problem_line(cells, columns, widths, listed.problem, width))
        else:
            lines.append(aligned_line(cells, columns, widths))
    return lines


def problem_line(
    cells: dict[str, str], columns: list[str], widths: dict[str, int], problem: str, width: int
) -> str:
    """An unreadable run's row: its name and state as every row has them, then what is wrong
    in place of the figures it does not have."""
    upto = columns[: columns.index("STATE") + 1]
    start = aligned_line(cells, upto, widths) + GAP
    text = printable(problem)
    room = max(width - len(start), 30)
    return start + (text if len(text) <= room else text[: room - 3] + "...")


def fit_columns(
    rows: Sequence[dict[str, str]], width: int, cut_name: bool = True
) -> tuple[list[str], dict[str, int]]:
    """The columns kept and each one's width for `rows` to fit in `width` characters, a GAP
    between columns; the runs screen fits its table with it too. With `cut_name` the name's
    width may be less than the longest name's (`shorten_run_name` then cuts the names to it);
    without, every optional column goes before a name is cut, and then none is."""
    columns = [h for h in HEADERS if h not in SHOWN_IF_ANY or any(r[h] != "-" for r in rows)]
    widths = {h: max(len(h), *(len(r[h]) for r in rows)) for h in HEADERS}
    full_name = widths["RUN"]

    def excess(name_width: int) -> int:
        others = sum(widths[h] for h in columns if h != "RUN")
        return others + name_width + len(GAP) * (len(columns) - 1) - width

    for header, name_floor in DROP_ORDER:
        floor = name_floor if cut_name and name_floor else full_name
        if excess(min(full_name, floor)) <= 0:
            break
        if header in columns:
            columns.remove(header)
    if cut_name:
        widths["RUN"] = max(min(full_name, MIN_NAME_WIDTH), full_name - max(0, excess(full_name)))
    return columns, widths


def shorten_run_name(text: str, width: int) -> str:
    """A RUN cell in `width` characters: a branch's `child <- parent@STEP` keeps its ` <- ` and
    `@STEP` whatever the width (the child's name and the parent's are shortened instead)."""
    child, arrow, parent = text.rpartition(" <- ")
    base, at, step = parent.rpartition("@")
    if len(text) <= width or not arrow or not at:
        return shorten_middle(text, width)
    room = max(2, width - len(arrow) - len(at + step))  # for both names
    parent_width = min(len(base), max(1, room // 3))
    child_width = max(1, room - parent_width)
    if len(child) < child_width:  # a short child leaves the rest to the parent
        parent_width, child_width = min(len(base), parent_width + child_width - len(child)), len(child)
    return f"{shorten_middle(child, child_width)}{arrow}{shorten_middle(base, parent_width)}{at}{step}"


def shorten_middle(text: str, width: int) -> str:
    """`text` in `width` characters, its middle cut: 'shakespear...0-213600'."""
    if len(text) <= width:
        return text
    if width <= 3:
        return text[len(text) - width :]
    tail = (width - 3) // 2 + (width - 3) % 2
    return text[: width - 3 - tail] + "..." + text[len(text) - tail :]


def aligned_line(
    cells: Mapping[str, str],
    columns: Sequence[str],
    widths: Mapping[str, int],
    right_aligned: Collection[str] = RIGHT_ALIGNED,
) -> str:
    """A table's line: the `columns` of `cells`, each padded to its width (the numbers' to the
    right), a GAP between them; `cockpit ps` lays its table out with it too."""
    padded = [
        cells[h].rjust(widths[h]) if h in right_aligned else cells[h].ljust(widths[h])
        for h in columns
    ]
    return GAP.join(padded).rstrip()
