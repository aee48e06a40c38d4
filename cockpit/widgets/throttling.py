"""How the device and ranks panels name a GPU's throttle reasons."""

from __future__ import annotations

from typing import Any

from engine.telemetry import THROTTLE_BY_NAME


def throttle_labels(names: Any) -> tuple[list[str], list[str]]:
    """(warnings, notes): the labels of the engine's throttle names, from the engine's table.

    A name the table lacks (a newer engine) is shown as it is, as a warning: it may be a slowdown.
    """
    warnings: list[str] = []
    notes: list[str] = []
    for name in names:
        reason = THROTTLE_BY_NAME.get(name)
        label = reason.label if reason is not None else name.replace("_", " ")
        target = warnings if reason is None or reason.warning else notes
        if label not in target:
            target.append(label)
    return warnings, notes
