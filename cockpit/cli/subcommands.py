"""The `cockpit` subcommands besides `train` (cockpit/cli/entry.py): one module each, with
`NAME`, `HELP`, `add_arguments(parser)` and `run(args) -> int`. Importing one is cheap (no torch):
the parser is built from all of them for every command line, and for shell completion."""

from __future__ import annotations

from types import ModuleType

from cockpit.cli import (
    attach,
    compare,
    completion,
    data,
    export,
    fork,
    plan,
    presets,
    ps,
    runs,
    sample,
    serve,
    start,
)

MODULES: tuple[ModuleType, ...] = (
    start, attach, ps, runs, compare, serve, fork, plan, presets, sample, export, data, completion
)
BY_NAME: dict[str, ModuleType] = {m.NAME: m for m in MODULES}
