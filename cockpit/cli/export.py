"""`cockpit export`: a run's model or metrics in the formats other tools read."""

from __future__ import annotations

import argparse
from pathlib import Path

from engine.export import FORMATS

NAME = "export"
HELP = (
    "write a run's model (safetensors, hf, nanogpt) or metrics (csv, tensorboard) for other tools"
)
EPILOG = "Example: cockpit export runs/tiny-20260101-120000 --format hf"


def _formats_help() -> str:
    listed = "; ".join(f"{name}: {line}" for name, (_, _, line) in FORMATS.items())
    return f"what to write ({listed})"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.add_argument(
        "target",
        metavar="RUN_DIR|CKPT",
        help="a run directory (its best.pt, else its latest checkpoint) or a checkpoint file",
    )
    parser.add_argument(
        "--format", required=True, choices=list(FORMATS), metavar="FORMAT", help=_formats_help()
    )
    parser.add_argument(
        "--out",
        metavar="PATH",
        help="where to write (default: RUN_DIR/export/NAME, NAME depending on the format)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="write even if --out already exists and is not empty (a file or folder of yours, "
        "never a link)",
    )


def refuse_existing(out: Path, force: bool) -> None:
    """An ExportError when `out` holds something and --force was not given (a link is refused
    whatever --force says: see engine.export.place)."""
    from engine.export import ExportError

    if force or out.is_symlink() or not out.exists():
        return
    holds_something = any(out.iterdir()) if out.is_dir() else out.stat().st_size > 0
    if holds_something:
        raise ExportError(
            f"--out {out} already exists; pass --force to overwrite it, or another --out"
        )


def _missing_package_line(fmt: str, e: ImportError) -> str:
    name = (e.name or "").split(".")[0]
    if name in ("", "engine", "cockpit"):  # part of cockpit itself is missing
        return f"export --format {fmt} is not available in this install ({e}); reinstall cockpit"
    return f"export --format {fmt} needs the {name} package ({e}); pip install {name}"


def run(args: argparse.Namespace) -> int:
    from engine.checkpoint import CheckpointError
    from engine.export import (
        ExportError,
        check_export_folder,
        check_out,
        default_out,
        refuse_run_files,
        run_dir_of,
    )

    target = Path(args.target).expanduser()
    try:
        if not target.exists():
            raise ExportError(f"{target}: no such run directory or checkpoint file; give one")
        if args.out:
            out = Path(args.out).expanduser()
        else:
            check_export_folder(run_dir_of(target))
            out = default_out(target, args.format)
        check_out(out)  # never a link, ours, below folders no one else can change
        refuse_run_files(out)  # even with --force: a run's own files are never replaced
        refuse_existing(out, args.force)
        from engine.export import format_module

        result = format_module(args.format).export(target, out)
    except (ExportError, CheckpointError) as e:
        return _fail(str(e))
    except ImportError as e:
        return _fail(_missing_package_line(args.format, e))
    except OSError as e:  # what the export's own checks did not turn into one line
        where = e.filename or "the output"
        return _fail(
            f"cannot write {where} ({e.strerror or e}); free space or choose another --out"
        )
    for path in result.written:
        print(f"wrote {path}")
    for note in result.notes:
        print(note)
    return 0


def _fail(line: str) -> int:
    import sys

    print(f"cockpit: {line}", file=sys.stderr)
    return 2
