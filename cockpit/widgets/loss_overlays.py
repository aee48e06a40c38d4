"""The other runs laid under the loss panel's own curves (`Overlay`s): each
with a colour of its own while it stays overlaid, its legend entry at the current run's x, and
its line and val points drawn into the panel's plot. No Textual: the panel hands in its plot.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from cockpit.figures.overlay import RGB, ColourBook, LegendEntry, Overlay, TokenUnit

OVERLAY_MARKER = "◆"  # an overlay's val points (the current run's are ●)


class Plot(Protocol):
    """What the overlays draw with (a ThrottledPlot)."""

    def line(self, plt: Any, xs: Any, ys: Any, color: Any) -> None: ...

    def points(self, plt: Any, xs: Any, ys: Any, marker: str, color: Any) -> None: ...


class LossOverlays:
    """The runs overlaid now, in order, and their colours (parallel to them)."""

    def __init__(self) -> None:
        self._runs: list[Overlay] = []
        self.colours: list[RGB] = []
        self._colour_book = ColourBook()
        self._same: list[tuple[str, int | None] | None] = []  # parallel to the runs

    @property
    def runs(self) -> list[Overlay]:
        return list(self._runs)

    def __bool__(self) -> bool:
        return bool(self._runs)

    def set(self, overlays: list[Overlay]) -> None:
        """Overlay these runs (replacing any before); a run keeps its colour while it stays."""
        self._runs = list(overlays)
        self.colours = self._colour_book.assign([o.key for o in self._runs])
        self._same = same_curves(self._runs)

    def entries(
        self, x: float | None, axis: str, smoothing: float, unit: str = "loss"
    ) -> list[LegendEntry]:
        """Each overlay's loss in `unit` at `x` on `axis`, smoothed with `smoothing` as the panel
        smooths: past its end, its last loss and the step it ended at; None where the current run
        has no x yet, or the overlay no value in that unit. An overlay whose curve is an earlier
        one's names that one instead (drawn over it, the earlier one's colour never shows)."""
        out = []
        for o, colour, same in zip(self._runs, self.colours, self._same, strict=True):
            if same is not None:
                other, until = same
                out.append(LegendEntry(o.name, colour, None, same_as=other, same_until=until))
            elif x is not None and o.past_end(x, axis):
                out.append(LegendEntry(o.name, colour, o.end_value(smoothing, unit), o.last_step))
            else:
                value = None if x is None else o.value_at(x, axis, smoothing, unit)
                out.append(LegendEntry(o.name, colour, value))
        return out

    def units(self) -> list[TokenUnit]:
        """What each overlaid run's loss is per (its tokenizer, its tokens per byte)."""
        return [o.unit for o in self._runs]

    def draw(
        self,
        plot: Plot,
        plt: Any,
        axis: str,
        smoothing: float,
        x0: float,
        x1: float,
        cols: int,
        unit: str = "loss",
    ) -> tuple[list[float], list[float]]:
        """Lay each overlay's line and val points in `unit` (cached per axes); returns their
        points for the y range."""
        xs: list[np.ndarray] = []
        ys: list[np.ndarray] = []
        for overlay, colour in zip(self._runs, self.colours, strict=True):
            lx, ly, vx, vy = overlay.downsampled(axis, smoothing, x0, x1, cols, unit)
            if len(lx):
                plot.line(plt, lx, ly, colour)
            if len(vx):
                plot.points(plt, vx, vy, OVERLAY_MARKER, colour)
            xs += [lx, vx]
            ys += [ly, vy]
        if not xs:
            return [], []
        return np.concatenate(xs).tolist(), np.concatenate(ys).tolist()


def same_curves(runs: list[Overlay]) -> list[tuple[str, int | None] | None]:
    """For each overlay, the earlier one whose curve it shares (the same preset and seed) and
    the shorter one's last step when their lengths differ; None for one of its own."""
    out: list[tuple[str, int | None] | None] = []
    for i, run in enumerate(runs):
        twin = next(
            (o for o in runs[:i] if run.same_curve_as(o) or o.same_curve_as(run)), None
        )
        if twin is None:
            out.append(None)
        else:
            until = None if len(twin) == len(run) else min(run, twin, key=len).last_step
            out.append((twin.name, until))
    return out

