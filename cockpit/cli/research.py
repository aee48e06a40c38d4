"""`cockpit research log [NAME]`: a series' research log (RUNS/research/NAME/log.tsv, one row per
experiment, as `cockpit ablate` appends them) as a table, or JSON for scripts."""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from pathlib import Path

NAME = "research"
HELP = "the research log of a series of experiments: one row each, what was tried and what became of it"
EPILOG = textwrap.dedent(
    """\
    examples:
      cockpit research log                       # the newest series' log
      cockpit research log ablate-tiny-5d67bf15 --json
      cockpit research log --runs /data/runs

    Exit status: 0 printed, 2 no such log, or not one (one line says why).
    """
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    actions = parser.add_subparsers(dest="research_action", metavar="ACTION", help="what to do")
    log = actions.add_parser(
        "log",
        help="print a series' research log (the newest series' when no NAME is given)",
        description="Print the research log of a series: each experiment's id, change (as --set "
        "spells it), parent, val bits per byte, tokens, training time, peak memory, status (kept, "
        "discarded, crashed, refused), reason, who proposed it and why it was kept or not.",
    )
    log.add_argument("name", nargs="?", metavar="NAME", help="the series (default: the newest log)")
    log.add_argument("--json", action="store_true", help="print JSON, for scripts")
    log.add_argument(
        "--runs",
        dest="runs_root",
        default="runs",
        metavar="DIR",
        help="the runs root the logs are under (default: runs)",
    )


def run(args: argparse.Namespace) -> int:
    from cockpit.ablation.research_log import find_log, read_log, to_json
    from engine.config import ConfigError

    if getattr(args, "research_action", None) != "log":
        print(
            "cockpit research: say what to do: cockpit research log [NAME] prints a series' log",
            file=sys.stderr,
        )
        return 2
    try:
        path = find_log(Path(args.runs_root), args.name)
        rows, damaged = read_log(path)
    except ConfigError as e:
        print(f"cockpit research log: {e}", file=sys.stderr)
        return 2
    try:
        if args.json:
            print(to_json(path.parent.name, path, rows, damaged))
        else:
            print(text_table(path, rows, damaged), end="")
    except BrokenPipeError:  # `cockpit research log | head`: the reader has had enough
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def text_table(path: Path, rows: list, damaged: int) -> str:
    """The log as an aligned table, then its tally and the best kept experiment."""
    from cockpit.ablation.results import fmt_bytes
    from cockpit.ablation.spec import plain_label

    lines = [f"research log {path.parent.name}: {path}", ""]
    head = [
        "id",
        "change",
        "parent",
        "val bpb",
        "tokens",
        "time",
        "peak memory",
        "status",
        "proposed by",
        "reason",
        "note",
    ]
    if not any(r.reason for r in rows):
        head.remove("reason")
    table = [head]
    for r in rows:
        cells = {
            "id": r.id,
            "change": r.change or "-",
            "parent": r.parent,
            "val bpb": f"{r.val_bpb:.4f}" if r.val_bpb is not None else "-",
            "tokens": f"{r.tokens:,}" if r.tokens is not None else "-",
            "time": f"{r.train_time_s:.1f} s" if r.train_time_s is not None else "-",
            "peak memory": fmt_bytes(r.peak_memory_bytes),
            "status": r.status,
            "proposed by": r.proposed_by,
            "reason": r.reason,
            "note": r.note,
        }
        table.append([plain_label(cells[name]) for name in head])
    if rows:
        widths = [max(len(row[i]) for row in table) for i in range(len(head))]
        right = {"val bpb", "tokens", "time", "peak memory"}
        for row in table:
            cells = [
                c.rjust(w) if h in right else c.ljust(w)
                for c, w, h in zip(row, widths, head, strict=True)
            ]
            lines.append("  ".join(cells).rstrip())
    else:
        lines.append("no experiment logged yet")
    tally = {
        s: sum(r.status == s for r in rows) for s in ("kept", "discarded", "crashed", "refused")
    }
    lines += ["", f"{len(rows)} experiments: " + ", ".join(f"{n} {s}" for s, n in tally.items())]
    measured = [r for r in rows if r.status == "kept" and r.val_bpb is not None]
    if measured:
        best = min(measured, key=lambda r: r.val_bpb)
        lines.append(f"best kept: {plain_label(best.id)}, val bpb {best.val_bpb:.4f}")
    if damaged:
        lines.append(
            f"{damaged} damaged line(s) skipped (cut short by a crash, or not rows of this log)"
        )
    return "\n".join(lines) + "\n"
