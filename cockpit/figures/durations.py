"""How the cockpit writes a duration, in one place, for the panels and the headless lines alike.

Two forms: `fmt_duration`, a clock ('42s', '12:34', '3:02:15', '2d 03h') for elapsed times and
ETAs; `fmt_rough_duration` ('40 s', '12 min', '2.1 h') for estimates. Pure and free of Textual,
so the headless CLI can use it without importing the app.
"""

from __future__ import annotations

import math


def fmt_duration(seconds: float | None) -> str:
    """'42s', '12:34', '3:02:15', '2d 03h'."""
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return "-"
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    m, s = divmod(s, 60)
    h, m = divmod(m, 60)
    if h == 0:
        return f"{m}:{s:02d}"
    d, h = divmod(h, 24)
    if d == 0:
        return f"{h}:{m:02d}:{s:02d}"
    return f"{d}d {h:02d}h"


def fmt_rough_duration(seconds: float) -> str:
    """'40 s', '12 min', '2.1 h', '3.5 days', '4.4 years': for estimates, not for clocks."""
    for unit, size in (("years", 365 * 86400), ("days", 86400), ("h", 3600)):
        if seconds >= 1.5 * size:
            value = seconds / size
            return f"{value:.0f} {unit}" if value >= 10 else f"{value:.1f} {unit}"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"
