"""Dense line series as braille characters, rasterised with numpy (no Textual, no plotext).

A braille character is a 2x4 grid of dots, so a canvas of W x H cells holds 2W x 4H dots.
plotext draws lines the same way but point by point in Python, which made it the larger part
of a plot's redraw; the plots here let plotext draw the frame (axes, ticks, markers) and lay the
lines over its canvas with these functions. The value-to-dot mapping is plotext's own, so the
lines sit exactly where plotext would have put them.
"""

from __future__ import annotations

import numpy as np

# Bit of each dot in a braille character (U+2800 + bits), by [column][row from the top].
_BITS = np.array([[0x01, 0x02, 0x04, 0x40], [0x08, 0x10, 0x20, 0x80]], dtype=np.uint8)
BRAILLE_BLANK = 0x2800


def to_dots(values: np.ndarray, lo: float, hi: float, bins: int) -> np.ndarray:
    """Dot index of each value on an axis of `bins` dots spanning [lo, hi] (plotext's rule:
    floor(0.5 + (bins - 1) * (v - lo) / (hi - lo)), rounded to 8 places first).

    Values outside the axis map outside [0, bins); they are clipped to one dot beyond either
    end, so a line that leaves the canvas still points the right way and costs nothing more."""
    if hi == lo:
        return np.zeros(len(values), dtype=np.int64)
    scaled = 0.5 + (bins - 1) * (np.asarray(values, dtype=np.float64) - lo) / (hi - lo)
    scaled = np.clip(np.round(scaled, 8), -1.0, float(bins))
    return np.floor(scaled).astype(np.int64)


def connect(dx: np.ndarray, dy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every dot on the straight segments between consecutive dots (a polyline), in order.

    Each segment is walked in max(|Δx|, |Δy|) steps, so neighbouring dots touch (as plotext's
    lines do) and a vertical jump is a solid stroke."""
    if len(dx) < 2:
        return dx.copy(), dy.copy()
    ddx, ddy = np.diff(dx), np.diff(dy)
    steps = np.maximum(np.maximum(np.abs(ddx), np.abs(ddy)), 1)
    seg = np.repeat(np.arange(len(steps)), steps)  # the segment of each generated dot
    first = np.repeat(np.cumsum(steps) - steps, steps)
    k = np.arange(len(seg)) - first  # 0 .. steps-1 along each segment
    frac = k / steps[seg]
    xs = dx[seg] + np.rint(frac * ddx[seg]).astype(np.int64)
    ys = dy[seg] + np.rint(frac * ddy[seg]).astype(np.int64)
    return np.append(xs, dx[-1]), np.append(ys, dy[-1])


def braille_cells(
    dx: np.ndarray, dy: np.ndarray, width: int, height: int
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The cells a set of dots covers, as (column, row from the bottom, character).

    Dots outside the 2*width x 4*height grid are dropped; y counts up from the bottom."""
    inside = (dx >= 0) & (dx < 2 * width) & (dy >= 0) & (dy < 4 * height)
    dx, dy = dx[inside], dy[inside]
    if len(dx) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), []
    cells = (dy // 4) * width + dx // 2
    bits = _BITS[dx % 2, 3 - dy % 4]
    order = np.argsort(cells, kind="stable")
    cells, bits = cells[order], bits[order]
    starts = np.flatnonzero(np.r_[True, cells[1:] != cells[:-1]])
    merged = np.bitwise_or.reduceat(bits, starts)
    unique = cells[starts]
    chars = [chr(BRAILLE_BLANK + int(b)) for b in merged]
    return unique % width, unique // width, chars


def line_cells(
    xs: np.ndarray,
    ys: np.ndarray,
    xlim: tuple[float, float],
    ylim: tuple[float, float],
    width: int,
    height: int,
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """A polyline through (xs, ys) on a width x height canvas showing xlim x ylim, as cells."""
    keep = np.isfinite(xs) & np.isfinite(ys)
    xs, ys = np.asarray(xs, dtype=np.float64)[keep], np.asarray(ys, dtype=np.float64)[keep]
    dx = to_dots(xs, xlim[0], xlim[1], 2 * width)
    dy = to_dots(ys, ylim[0], ylim[1], 4 * height)
    return braille_cells(*connect(dx, dy), width, height)
