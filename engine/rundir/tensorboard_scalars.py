"""The one mapping from cockpit's records to TensorBoard scalars and texts, shared by the live sink
and `cockpit export --format tensorboard`, so both show the same tags, values, steps and times.
A null value (NaN or infinite in the run) and a record without a step are not written.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Protocol

# kind -> (field -> tag)
SCALAR_TAGS: dict[str, dict[str, str]] = {
    "step": {
        "loss": "train/loss",
        "lr": "train/lr",
        "grad_norm": "train/grad_norm",
        "update_ratio": "train/update_ratio",
        "tokens": "train/tokens",
        "tokens_per_s": "perf/tokens_per_s",
        "step_time_s": "perf/step_time_s",
        "data_time_s": "perf/data_time_s",
        "mfu": "perf/mfu",
    },
    "eval": {
        "train_loss": "eval/train_loss",
        "val_loss": "eval/val_loss",
        "train_bpb": "eval/train_bpb",  # bits per byte (absent from older runs' records)
        "val_bpb": "eval/val_bpb",
        "train_time_s": "eval/train_time_s",
    },
    "lr_changed": {"new_lr": "control/lr", "scale": "control/lr_scale"},
    "memory": {
        name: f"memory/{name}_bytes"
        for name in ("weights", "gradients", "optimizer", "activations", "cache", "other")
    },
}
TEXT_TAGS = {"sample": "samples", "alert": "alerts", "checkpoint": "checkpoints"}
KINDS = frozenset(SCALAR_TAGS) | frozenset(TEXT_TAGS)  # the record kinds that write anything


class ScalarWriter(Protocol):
    """What we use of torch.utils.tensorboard.SummaryWriter."""

    def add_scalar(
        self, tag: str, scalar_value: float, global_step: int, walltime: float | None
    ) -> None: ...

    def add_text(
        self, tag: str, text_string: str, global_step: int, walltime: float | None
    ) -> None: ...


def scalars_of(record: Mapping[str, Any]) -> list[tuple[str, float]]:
    """(tag, value) for each finite numeric field of `record` that TensorBoard shows (TensorBoard keeps them as float32)."""
    tags = SCALAR_TAGS.get(record.get("kind", ""), {})
    out = []
    for name, tag in tags.items():
        value = record.get(name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if math.isfinite(value):
            out.append((tag, float(value)))
    return out


def _code_block(text: str) -> str:
    # TensorBoard renders text as Markdown: an indented block shows a sample as it is
    # (no emphasis or headings made of its characters)
    return "\n".join("    " + line for line in text.split("\n"))


def text_of(record: Mapping[str, Any]) -> tuple[str, str] | None:
    """(tag, Markdown) for a sample, alert or checkpoint record; None for other kinds."""
    kind = record.get("kind", "")
    if kind == "sample":
        return TEXT_TAGS[kind], _code_block(f"{record.get('prompt', '')}{record.get('text', '')}")
    if kind == "alert":
        code = f" ({record['code']})" if record.get("code") else ""
        return TEXT_TAGS[kind], f"**{record.get('level', '')}**{code}: {record.get('message', '')}"
    if kind == "checkpoint":
        return TEXT_TAGS[kind], f"{record.get('reason', '')}: `{record.get('path', '')}`"
    return None


def write_record(writer: ScalarWriter, record: Mapping[str, Any]) -> int:
    """Write `record`'s scalars and text at its step and time; returns how many were written."""
    step = record.get("step")
    if record.get("kind") not in KINDS or isinstance(step, bool) or not isinstance(step, int):
        return 0
    walltime = record.get("time")
    walltime = float(walltime) if isinstance(walltime, (int, float)) else None
    written = 0
    for tag, value in scalars_of(record):
        writer.add_scalar(tag, value, global_step=step, walltime=walltime)
        written += 1
    text = text_of(record)
    if text is not None:
        writer.add_text(text[0], text[1], global_step=step, walltime=walltime)
        written += 1
    return written
