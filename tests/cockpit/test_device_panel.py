"""The Device panel says what the engine's telemetry says: throttle reasons from the engine's
own table, and no reading passed off as live once the run that produced it has ended."""

from __future__ import annotations

import dataclasses
from typing import Any

from scripted import telemetry_event

from cockpit.widgets.device import gpu_header, throttle_labels
from engine.telemetry import THROTTLE_BY_NAME, throttle_names


def header_text(reading: Any) -> str:
    return "  ".join(seg.text.plain for seg in gpu_header(reading))


def test_an_idle_gpu_shows_no_warning_and_a_power_cap_does() -> None:
    nvml = telemetry_event("nvml", 0.0, 0)
    busy = nvml.gpus[0]
    idle = dataclasses.replace(busy, throttle=throttle_names(0x1 | 0x2))  # idle + app clocks
    assert "⚠" not in header_text(idle)
    assert "idle" in header_text(idle)
    capped = dataclasses.replace(busy, throttle=throttle_names(0x4 | 0x40))
    assert "⚠ power cap, thermal (hw)" in header_text(capped)


def test_every_engine_name_gets_its_table_label() -> None:
    for name, reason in THROTTLE_BY_NAME.items():
        warnings, notes = throttle_labels((name,))
        assert (warnings if reason.warning else notes) == [reason.label]
    # a name the table lacks is shown, as a warning (it may be a slowdown)
    assert throttle_labels(("new_reason",)) == (["new reason"], [])


def test_scripted_telemetry_uses_names_the_engine_emits() -> None:
    for k in range(5):
        for gpu in telemetry_event("nvml", 0.0, k).gpus:
            assert all(name in THROTTLE_BY_NAME for name in gpu.throttle), gpu.throttle
