"""Throttle ("clocks event") reasons: the one table the engine emits from and the cockpit draws
from, and the NVML bitmask turned into its short names.

Torch-free and textual-free: the cockpit's device panel imports it at start-up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ThrottleReason:
    """One throttle ("clocks event") reason: the one table the engine emits from and the
    cockpit draws from, so the two cannot disagree on names."""

    name: str  # the short name in DeviceReading.throttle
    label: str  # how the cockpit shows it
    warning: bool  # True: it slows training against the user's will; False: informational
    nvml_suffix: str  # pynvml constant suffix (nvmlClocksEventReason<suffix>)
    bit: int  # bit value from nvml.h: the fallback when the module lacks the constant


# In display order, most important first. The bit values are a stable part of the NVML ABI.
# Idle, application clocks, display clocks and sync boost are settings or rest, not slowdowns.
THROTTLE_REASONS: tuple[ThrottleReason, ...] = (
    ThrottleReason("power", "power cap", True, "SwPowerCap", 0x4),
    ThrottleReason("sw_thermal", "thermal (sw)", True, "SwThermalSlowdown", 0x20),
    ThrottleReason("hw_thermal", "thermal (hw)", True, "HwThermalSlowdown", 0x40),
    ThrottleReason("hw_slowdown", "hw slowdown", True, "HwSlowdown", 0x8),
    ThrottleReason("hw_power_brake", "power brake", True, "HwPowerBrakeSlowdown", 0x80),
    ThrottleReason("board_limit", "board limit", True, "BoardLimit", 0x200),
    ThrottleReason("reliability", "reliability", True, "Reliability", 0x400),
    ThrottleReason("sync_boost", "sync boost", False, "SyncBoost", 0x10),
    ThrottleReason("app_clocks", "app clocks", False, "ApplicationsClocksSetting", 0x2),
    ThrottleReason("display_clocks", "display clocks", False, "DisplayClockSetting", 0x100),
    ThrottleReason("idle", "idle", False, "GpuIdle", 0x1),
)
THROTTLE_BY_NAME: dict[str, ThrottleReason] = {r.name: r for r in THROTTLE_REASONS}


def throttle_names(mask: int, nvml: Any = None) -> tuple[str, ...]:
    """Turn a clocks-event-reason bitmask into short names, most important first."""
    names = []
    for reason in THROTTLE_REASONS:
        bit = _reason_bit(nvml, reason.nvml_suffix, reason.bit)
        if bit and mask & bit:
            names.append(reason.name)
    return tuple(names)


def _reason_bit(nvml: Any, suffix: str, default: int) -> int:
    for prefix in ("nvmlClocksEventReason", "nvmlClocksThrottleReason"):
        value = getattr(nvml, prefix + suffix, None)
        if isinstance(value, int):
            return value
    return default
