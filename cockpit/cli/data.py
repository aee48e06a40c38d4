"""`cockpit data prepare|ls|rm`: prepare a corpus ahead of time, list the prepared ones with
their token counts and size on disk, remove one. Runs and presets that share a source, a
tokenizer and a split share its prepared tokens, so preparing once serves them all."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from cockpit.cli.options import add_presets_dir_option, add_set_option
from engine.config import DEFAULT_PRESET

NAME = "data"
HELP = "prepare corpora ahead of time, list the prepared ones, remove one"
EPILOG = (
    "Examples: cockpit data prepare --data ~/corpora/fineweb-edu --tokenizer r50k_base; "
    "cockpit data ls; cockpit data rm fineweb-edu"
)
PROGRESS_EVERY_S = 2.0
EXIT_INTERRUPTED = 130


def _add_cache_dir_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cache-dir",
        metavar="DIR",
        default=None,
        help="the folder of prepared corpora (default: $COCKPIT_CACHE_DIR, else data/cache in a "
        "checkout, else ~/.cache/cockpit)",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    actions = parser.add_subparsers(
        dest="data_action", metavar="ACTION", help="what to do (default: ls)"
    )
    prepare = actions.add_parser(
        "prepare",
        help="tokenize a corpus into the cache now, so runs on it start at once",
        description="Tokenize a corpus into the cache, as `cockpit train` with the same preset "
        "and --data would: the run then finds it prepared.",
    )
    prepare.add_argument(
        "--data",
        metavar="PATH",
        help="text file, folder, JSON lines or Parquet to prepare (default: the preset's "
        "data.source)",
    )
    prepare.add_argument(
        "--tokenizer",
        metavar="NAME",
        help="'char' or a tiktoken encoding such as r50k_base (default: the preset's)",
    )
    prepare.add_argument(
        "--text-field",
        metavar="F",
        help="JSON lines and Parquet: the field holding each document's text (default: the "
        "preset's data.text_field, 'text')",
    )
    prepare.add_argument(
        "--preset",
        default=None,
        help=f"the preset whose [data] settings (split, separator) apply (default: "
        f"'{DEFAULT_PRESET}'); use the preset you will train with",
    )
    add_set_option(prepare, "data.val_tokens=10_000_000")
    add_presets_dir_option(prepare)
    _add_cache_dir_option(prepare)

    ls = actions.add_parser(
        "ls",
        help="list the prepared corpora: source, tokenizer, tokens, documents, size, when",
        description="List the prepared corpora in the cache with their figures.",
    )
    ls.add_argument("--json", action="store_true", help="print JSON, for scripts")
    _add_cache_dir_option(ls)

    rm = actions.add_parser(
        "rm",
        help="remove one prepared corpus from the cache",
        description="Remove one prepared corpus (its token files and meta.json) from the cache. "
        "The source files are never touched.",
    )
    rm.add_argument("name", metavar="NAME", help="its name in `cockpit data ls`, or a unique prefix")
    rm.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    _add_cache_dir_option(rm)


def run(args: argparse.Namespace) -> int:
    from engine.data import CacheError, default_cache_dir

    raw = getattr(args, "cache_dir", None)
    cache_dir = Path(raw).expanduser() if raw else default_cache_dir()
    action = getattr(args, "data_action", None) or "ls"
    try:
        if action == "prepare":
            return run_prepare(args, cache_dir)
        if action == "rm":
            return run_rm(args, cache_dir)
        return run_ls(args, cache_dir)
    except CacheError as e:
        print(f"cockpit: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `cockpit data ls --json | head`: the reader has had enough
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


# ---------------------------------------------------------------------------------------------
# prepare


def data_config(args: argparse.Namespace) -> Any:
    """The preset's DataConfig with --set, then --tokenizer and --text-field, applied."""
    from dataclasses import replace

    from engine.config import load_preset

    cfg = load_preset(args.preset or DEFAULT_PRESET, args.overrides, args.presets_dir).data
    # Applied as strings, not through --set's TOML parsing: a text field named "123" stays one.
    if args.tokenizer is not None:
        cfg = replace(cfg, tokenizer=args.tokenizer)
    if args.text_field is not None:
        cfg = replace(cfg, text_field=args.text_field)
    return cfg


class ThrottledPrinter:
    """Prints a DataProgress line at most every `every_s` seconds, and always the final one."""

    def __init__(self, every_s: float = PROGRESS_EVERY_S, clock: Any = time.monotonic):
        self.every_s = every_s
        self.clock = clock
        self.last: float | None = None
        self.printed_final = False

    def __call__(self, event: Any) -> None:
        from cockpit.figures.data_progress_text import progress_line

        now = self.clock()
        final = bool(event.done or event.reused)
        if not final and self.last is not None and now - self.last < self.every_s:
            return
        self.last = now
        self.printed_final = self.printed_final or final
        print(progress_line(event), flush=True)


def run_prepare(args: argparse.Namespace, cache_dir: Path) -> int:
    from engine.data import DataError, PreparationStopped, prepare
    cfg = data_config(args)  # a bad preset or --set: ConfigError, one line from main
    stop = threading.Event()
    printer = ThrottledPrinter()
    stopped_by: list[int] = []

    def on_signal(signum: int, _frame: Any) -> None:
        stopped_by.append(signum)
        stop.set()  # prepare() polls it and stops within a fraction of a second

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    what = args.data if args.data is not None else cfg.source
    print(f"data      | preparing {what} ({cfg.tokenizer}) in {cache_dir}; ctrl+c stops", flush=True)
    try:
        prepared = prepare(
            cfg,
            data_path=args.data,
            cache_dir=cache_dir,
            progress=printer,
            should_stop=stop.is_set,
        )
    except DataError as e:
        print(f"cockpit: {e}", file=sys.stderr)
        return 2
    except (PreparationStopped, KeyboardInterrupt):
        name = signal.Signals(stopped_by[0]).name if stopped_by else "SIGINT"
        print(
            f"cockpit: preparation stopped ({name}): nothing was kept that a run would take for "
            f"complete; run the same command again to prepare it",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print(prepared_summary(prepared, cache_dir))
    return 0


def prepared_dir(prepared: Any, cache_dir: Path) -> Path | None:
    """The directory prepare() filled: the memory-mapped files' folder, else the cache entry
    whose meta.json describes this corpus."""
    for split in (prepared.train, prepared.val):
        filename = getattr(split, "filename", None)
        if filename:
            return Path(filename).parent
    from engine.data import list_prepared

    meta = prepared.meta
    for corpus in list_prepared(cache_dir):
        if corpus.complete and corpus.source == meta.get("source") and (
            corpus.tokenizer == meta.get("tokenizer", {}).get("name")
        ):
            return corpus.path
    return None


def prepared_summary(prepared: Any, cache_dir: Path) -> str:
    """Where the tokens are and how many: the last lines of `cockpit data prepare`."""
    meta = prepared.meta
    train, val = meta.get("train_tokens"), meta.get("val_tokens")
    total = meta.get("total_tokens")
    if total is None and isinstance(train, int) and isinstance(val, int):
        total = train + val
    tokenizer = meta.get("tokenizer", {}).get("name", "-")
    where = prepared_dir(prepared, cache_dir)
    lines = [
        f"prepared  {prepared.source}",
        f"tokenizer {tokenizer} (vocabulary {_count(meta.get('vocab_size'))})",
        f"tokens    {_count(total)} (train {_count(train)}, val {_count(val)})",
    ]
    if isinstance(meta.get("documents"), int):
        lines.append(f"documents {_count(meta['documents'])} ({_count(meta.get('skipped', 0))} skipped)")
    lines.append(f"in        {where if where is not None else cache_dir}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# ls


def _count(n: Any) -> str:
    return f"{n:,}" if isinstance(n, int) and not isinstance(n, bool) else "-"


def _size(n: int) -> str:
    from cockpit.figures.numbers import fmt_bytes

    return fmt_bytes(n)


def _when(iso: str | None) -> str:
    """'2026-11-30 14:02' from an ISO time (seconds and zone dropped); '-' when unknown."""
    if not iso:
        return "-"
    return iso.replace("T", " ")[:16]


def _tokens_cell(corpus: Any) -> str:
    total = _count(corpus.total_tokens)
    if corpus.train_tokens is None or corpus.val_tokens is None:
        return total
    return f"{total} ({_count(corpus.train_tokens)}/{_count(corpus.val_tokens)})"


def ls_rows(corpora: list[Any]) -> list[list[str]]:
    """The table's cells, header first; a corpus that is not ready says why in place of its
    source (an interrupted preparation has no figures to show)."""
    from cockpit.figures.run_table import printable  # meta.json's text is anyone's: no escapes

    rows = [["NAME", "TOKENIZER", "TOKENS (TRAIN/VAL)", "DOCS", "SIZE", "PREPARED", "SOURCE"]]
    for c in corpora:
        source = c.source or "-"
        if not c.complete:
            source = f"{c.status}: {c.source}" if c.source else c.status
        cells = [
            c.name, c.tokenizer or "-", _tokens_cell(c), _count(c.documents),
            _size(c.disk_bytes), _when(c.prepared_at), source,
        ]  # fmt: skip
        rows.append([printable(cell) for cell in cells])
    return rows


def format_table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = []
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    return "\n".join(lines)


def run_ls(args: argparse.Namespace, cache_dir: Path) -> int:
    from engine.data import list_prepared

    corpora = list_prepared(cache_dir)
    if getattr(args, "json", False):
        record = {"cache_dir": str(cache_dir), "corpora": [c.to_json() for c in corpora]}
        print(json.dumps(record, indent=2))
        return 0
    if not corpora:
        print(
            f"no prepared corpora in {cache_dir}; prepare one with "
            f"`cockpit data prepare --data PATH [--tokenizer r50k_base]` (or just train on it)"
        )
        return 0
    print(format_table(ls_rows(corpora)))
    total = sum(c.disk_bytes for c in corpora)
    print(f"\n{len(corpora)} in {cache_dir}, {_size(total)} on disk; remove one: cockpit data rm NAME")
    return 0


# ---------------------------------------------------------------------------------------------
# rm


def confirm(question: str) -> bool:
    try:
        answer = input(question)
    except (EOFError, KeyboardInterrupt):
        print()
        return False
    return answer.strip().lower() in ("y", "yes")


def run_rm(args: argparse.Namespace, cache_dir: Path) -> int:
    from engine.data import find_prepared, remove_prepared

    corpus = find_prepared(cache_dir, args.name)
    what = f"{corpus.name} ({_size(corpus.disk_bytes)}, {corpus.source or corpus.status})"
    if not args.yes and sys.stdin.isatty():
        if not confirm(f"remove {what} from {cache_dir}? [y/N] "):
            print("nothing removed")
            return 1
    try:
        remove_prepared(cache_dir, corpus)
    except OSError as e:
        print(
            f"cockpit: cannot remove {corpus.path} ({e.strerror or e}); check its permissions",
            file=sys.stderr,
        )
        return 2
    print(f"removed {what}")
    return 0
