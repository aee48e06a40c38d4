"""`cockpit export`: a run's model or metrics in the formats other tools read (the formats are in
docs/guide/checkpoints.md). One module per format, each with `export(target, out)` and a
`DEFAULT_NAME`; each writes through `place`: never through a link, whole or not at all.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from engine import lazy_exports

__all__ = [
    "FORMATS",
    "ExportError",
    "ExportResult",
    "check_export_folder",
    "check_out",
    "default_out",
    "format_module",
    "refuse_run_files",
    "run_dir_of",
]
# where an export may write (engine.export.place, which imports this module): on first use
_EXPORTS = {"engine.export.place": ("check_export_folder", "check_out")}
_, __getattr__, _ = lazy_exports(__name__, _EXPORTS)

# format -> (module, what it reads, one line for --help)
FORMATS: dict[str, tuple[str, str, str]] = {
    "safetensors": (
        "engine.export.safetensors_file",
        "weights",
        "the weights as one .safetensors file, the model config in its metadata",
    ),
    "hf": (
        "engine.export.hf",
        "weights",
        "a Hugging Face transformers GPT-2 directory (config.json, model.safetensors, tokenizer)",
    ),
    "nanogpt": (
        "engine.export.nanogpt",
        "weights",
        "a checkpoint nanoGPT's sample.py loads (ckpt.pt with model and model_args)",
    ),
    "csv": ("engine.export.csv_metrics", "metrics", "the metrics as CSV files, one per kind"),
    "tensorboard": (
        "engine.export.tensorboard_events",
        "metrics",
        "the metrics as TensorBoard event files",
    ),
}


class ExportError(RuntimeError):
    """An export that cannot be done as asked; the message (one line) says why and what to do."""


@dataclass
class ExportResult:
    written: list[Path]  # the files or directories created
    notes: list[str] = field(default_factory=list)  # what the user should know (one line each)


def format_module(fmt: str) -> ModuleType:
    if fmt not in FORMATS:
        raise ExportError(f"unknown export format {fmt!r}; use one of {', '.join(FORMATS)}")
    return importlib.import_module(FORMATS[fmt][0])


def run_dir_of(target: Path) -> Path:
    """The run directory a RUN_DIR or CKPT argument belongs to."""
    return target if target.is_dir() else target.parent


# What makes a directory a run's (as `cockpit runs` finds them: a metrics log; or its lock)
RUN_MARKERS = ("metrics.jsonl", ".run.lock")
EXPORT_FOLDER = "export"


def refuse_run_files(out: Path) -> None:
    """An ExportError (one line) when writing `out` could overwrite a run's own files: `out`
    is a run directory or lies in one, anywhere but in its `export/` folder (the default)."""
    resolved = out.expanduser().resolve()
    for place in (resolved, *resolved.parents):
        if any((place / marker).exists() for marker in RUN_MARKERS):
            if resolved.is_relative_to(place / EXPORT_FOLDER):
                return
            raise ExportError(
                f"--out {out} would write into the run directory {place} (its config, "
                f"checkpoints and metrics); leave --out out for {place}/{EXPORT_FOLDER}/, "
                "or give a path outside the run"
            )


def default_out(target: Path, fmt: str) -> Path:
    """RUN_DIR/export/NAME: beside the run it came from."""
    return run_dir_of(target) / "export" / format_module(fmt).DEFAULT_NAME
