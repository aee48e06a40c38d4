"""Small, pure formatting helpers for numbers and sizes (durations: durations.py), shared by the
panels and the headless lines; free of Textual, so the CLI can use them without importing the app."""

from __future__ import annotations

import math


def _unit(x: float, table: tuple[tuple[str, float], ...], slack: float = 1.0) -> tuple[str, float]:
    """The first (unit, scale) of a descending table with x >= scale * slack, else ('', 1)."""
    return next(((u, s) for u, s in table if x >= s * slack), ("", 1.0))


SI = (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3))
BINARY = (("TiB", 2.0**40), ("GiB", 2.0**30), ("MiB", 2.0**20), ("KiB", 2.0**10))


def fmt_int(n: float) -> str:
    """1234567 -> '1,234,567'."""
    return f"{int(n):,}"


def fmt_si(x: float | None, digits: int = 3) -> str:
    """12345 -> '12.3k', 2.5e6 -> '2.50M'; keeps about `digits` significant digits."""
    if x is None or not math.isfinite(x):
        return "-"
    sign = "-" if x < 0 else ""
    x = abs(x)
    unit, scale = _unit(x, SI, 0.9995)
    v = x / scale
    if v >= 100 or (unit == "" and v == int(v)):
        s = f"{v:.0f}"
    elif v >= 10:
        s = f"{v:.{max(digits - 2, 0)}f}"
    else:
        s = f"{v:.{max(digits - 1, 0)}f}"
    return f"{sign}{s}{unit}"


def fmt_tick(x: float) -> str:
    """Compact axis label: 0, 250, 1.5k, 12k, 2.5M."""
    if x == 0:
        return "0"
    a = abs(x)
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if a >= scale:
            v = x / scale
            return (f"{v:.0f}" if v == int(v) else f"{v:.1f}".rstrip("0").rstrip(".")) + unit
    if a >= 1 and x == int(x):
        return f"{x:.0f}"
    return f"{x:.3g}"


def fmt_lr(x: float | None) -> str:
    """3e-4 -> '3.00e-4' (exponent without padding)."""
    if x is None or not math.isfinite(x):
        return "-"
    if x == 0:
        return "0"
    mant, exp = f"{x:.2e}".split("e")
    return f"{mant}e{int(exp)}"


def fmt_lr_tick(x: float) -> str:
    """Axis label for an LR: '0', '5e-4', '1.2e-3'."""
    if x == 0:
        return "0"
    mant, exp = f"{x:.1e}".split("e")
    mant = mant.rstrip("0").rstrip(".")
    return f"{mant}e{int(exp)}"


def fmt_loss(x: float | None) -> str:
    if x is None:
        return "-"
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "inf"
    return f"{x:.4f}" if abs(x) < 10 else f"{x:.3g}"


def fmt_bytes(n: float | None) -> str:
    """Binary units with 3 significant digits: '812 KiB', '1.23 GiB'."""
    if n is None:
        return "-"
    n = float(n)
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            v = n / scale
            return f"{v:.3g} {unit}" if v < 1000 else f"{v:.0f} {unit}"
    return f"{n:.0f} B"


def fmt_gib_pair(used: float | None, total: float | None) -> str:
    """'71.2/141 GiB' style pair sharing the unit of the total."""
    if used is None or total is None or total <= 0:
        return fmt_bytes(used)
    unit, scale = _unit(total, BINARY)
    unit = unit or "B"
    u, t = used / scale, total / scale

    def short(v: float) -> str:
        return f"{v:.1f}" if v < 100 else f"{v:.0f}"

    return f"{short(u)}/{short(t)} {unit}"


def fmt_pct(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x:.0f}%"
