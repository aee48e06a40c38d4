"""The training engine: it trains, checkpoints and reports a run, and never imports the app.

Its face is engine.contract (the EngineHandle a run is driven through) and engine.events (what a
run reports). Each package's `__init__` names what the others may import; the rest of the package
is its own. A package imports its names on first use, so that a torch-free reader (a viewer,
`cockpit ps`) importing one of them loads nothing else of the package.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping


def lazy_exports(
    package: str, exports: Mapping[str, tuple[str, ...]]
) -> tuple[list[str], Callable[[str], object], Callable[[], list[str]]]:
    """A package's `__all__`, `__getattr__` and `__dir__` (PEP 562) from {module: its public
    names}: each name is imported from its module when first asked for. Nothing is cached in the
    package, so a test patching the defining module is seen by every later `from package import`."""
    defined_in = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str) -> object:
        if name not in defined_in:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(defined_in[name]), name)

    def __dir__() -> list[str]:
        return sorted({*vars(importlib.import_module(package)), *defined_in})

    return list(defined_in), __getattr__, __dir__
