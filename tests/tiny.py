"""The `--set`s that shrink a run to a tiny model (one layer of 16 wide, 16 tokens, 4 sequences a
step, 2 evaluation batches), in one place for the many tests that train one. A test that needs
another value names it at its call: `tiny_overrides("train.batch_size=8")`."""

from __future__ import annotations

from collections.abc import Iterable

TINY_MODEL = (
    "model.n_layer=1",
    "model.n_head=2",
    "model.n_embd=16",
    "model.block_size=16",
    "train.batch_size=4",
    "eval.batches=2",
)
# no evaluation, sample or checkpoint on the way: only the run's end writes them
QUIET = ("eval.interval=0", "sample.interval=0", "checkpoint.interval=0")


def tiny_overrides(*changes: str, quiet: bool = False) -> list[str]:
    """TINY_MODEL's overrides (and, `quiet`, QUIET's) with `changes` ('section.key=value'): a
    change of a key they set replaces its value in place, any other is added at the end."""
    overrides = [*TINY_MODEL, *(QUIET if quiet else ())]
    keys = [text.partition("=")[0] for text in overrides]
    for change in changes:
        key = change.partition("=")[0]
        if key in keys:
            overrides[keys.index(key)] = change
        else:
            overrides.append(change)
            keys.append(key)
    return overrides


def set_args(overrides: Iterable[str]) -> list[str]:
    """The overrides as a command line gives them: `--set KEY=VALUE` each."""
    return [arg for text in overrides for arg in ("--set", text)]
