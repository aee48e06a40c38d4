"""The Memory panel: where the training device's memory goes, as one stacked bar and a legend.

Each category has its own colour *and* fill glyph, so the bar reads in 16 colours and even
without colour. Any category that is not zero gets at least one cell, so small models on a big
device still show all their parts; the legend gives exact sizes and the share of capacity.
Under torchrun the breakdown is rank 0's, and a last line gives the most any rank uses (from
`RankReport` events).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from textual.content import Content
from textual.strip import Strip
from textual.visual import Visual
from textual.widget import Widget

from cockpit.figures.numbers import fmt_bytes
from cockpit.widgets._repaint import QuietBorderLabels, RowStrips

# key, label, glyph, style
CATEGORIES = (
    ("weights", "weights", "█", "$primary"),
    ("gradients", "gradients", "█", "$success"),
    ("optimizer", "optimizer", "█", "$accent"),
    ("activations", "activations", "▓", "$secondary-lighten-2"),
    ("cache", "cache", "▒", "$foreground-darken-1"),
    ("other", "other", "░", "$foreground-darken-1"),
    ("free", "free", "·", "$foreground-disabled"),
)


def allocate_cells(sizes: list[float], width: int) -> list[int]:
    """Split `width` cells in proportion to sizes (largest remainder), >= 1 for any non-zero.

    The last entry (free space) gives up cells first when the minimums do not fit.
    """
    total = sum(sizes)
    if total <= 0 or width <= 0:
        return [0] * len(sizes)
    raw = [s / total * width for s in sizes]
    cells = [int(r) for r in raw]
    rest = width - sum(cells)
    order = sorted(range(len(sizes)), key=lambda i: raw[i] - cells[i], reverse=True)
    for i in order[:rest]:
        cells[i] += 1
    # Minimum of one cell for every non-zero category, taken from the largest ones.
    for i, s in enumerate(sizes):
        if s > 0 and cells[i] == 0:
            donor = max(range(len(cells)), key=lambda j: cells[j])
            if cells[donor] > 1:
                cells[donor] -= 1
                cells[i] = 1
    return cells


class _Drawn(NamedTuple):
    """The rows on screen and what they were drawn from."""

    breakdown: Any
    look: tuple[Any, ...]  # width, theme, base style
    lines: list[Content]
    strips: list[Strip]


class MemoryPanel(QuietBorderLabels, RowStrips, Widget):
    BORDER_TITLE = "Memory"
    ALLOW_MAXIMIZE = True
    can_focus = True

    DEFAULT_CSS = """
    MemoryPanel {
        height: auto;
    }
    """

    EMPTY_MESSAGE = "waiting for the memory breakdown..."

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.breakdown: Any = None
        self.rank_max: tuple[int, int, int] | None = None  # (ranks, bytes, rank) of a report
        self.empty_message = self.EMPTY_MESSAGE
        self._lines_cache: tuple[Any, int, list[Content]] | None = None
        self._drawn: _Drawn | None = None

    def reset(self) -> None:
        self.breakdown = None
        self.rank_max = None
        self.set_empty_message(self.EMPTY_MESSAGE)
        self.set_border_labels(subtitle="")

    def set_empty_message(self, message: str) -> None:
        """What the panel says while it has no breakdown (e.g. that there is no run)."""
        self.empty_message = message
        # the cached lines and rows may hold the previous message
        self._lines_cache = None
        self._drawn = None
        self.refresh(layout=True)

    def update_breakdown(self, ev: Any) -> None:
        width = self.size.width
        lines_before = len(self._lines(width))
        before = self._drawn
        self.breakdown = ev
        self._set_labels()
        self._redraw(before, lines_before)

    def _set_labels(self) -> None:
        ev = self.breakdown
        used = sum(getattr(ev, k) for k, *_ in CATEGORIES[:-1])
        pct = 100.0 * used / ev.capacity if ev.capacity else 0.0
        rank = " rank 0" if self.rank_max is not None else ""  # under torchrun
        self.set_border_labels(
            f"Memory [not bold $foreground-muted]{ev.device}{rank}[/]",
            f"used {fmt_bytes(used)} · {pct:.1f}% of {fmt_bytes(ev.capacity)}",
        )

    def update_ranks(self, report: Any) -> None:
        """Record the most memory any rank of a RankReport uses (its line under the legend)."""
        if len(report.ranks) < 2:
            return  # torchrun with one rank: its breakdown is all there is
        top = report.memory_max
        rank_max = None if top is None else (len(report.ranks), int(top.memory_peak), top.rank)
        if rank_max == self.rank_max:
            return
        lines_before = len(self._lines(self.size.width))
        before = self._drawn
        self.rank_max = rank_max
        # the cached lines and rows are of the breakdown alone: draw them again
        self._lines_cache = None
        self._drawn = None
        if self.breakdown is not None:
            self._set_labels()  # the title names rank 0 now
        self._redraw(before, lines_before)

    def _redraw(self, before: _Drawn | None, lines_before: int) -> None:
        width = self.size.width
        if before is None or len(self._lines(width)) != lines_before:
            # the height follows the number of lines: only then is a layout pass needed (it
            # re-arranges the whole screen)
            self.refresh(layout=True)
            return
        # otherwise repaint only the rows that changed (a new reading moves a figure or two)
        after = self.row_strips()
        self.repaint_changed_rows(before.strips if before.look == self._look() else None, after)

    def get_content_height(self, container: Any, viewport: Any, width: int) -> int:
        return len(self._lines(width))

    def _look(self) -> tuple[Any, ...]:
        return (self.size.width, self.app.theme, self.visual_style)

    def row_strips(self) -> list[Strip]:
        """The rows, built once per reading, width and theme. A line already on screen keeps
        its Strip (most of the legend does not change between readings); the others are
        rendered, one line each."""
        drawn, look = self._drawn, self._look()
        if drawn is not None and drawn.breakdown is self.breakdown and drawn.look == look:
            return drawn.strips
        reuse = {}
        if drawn is not None and drawn.look == look:
            reuse = dict(zip(drawn.lines, drawn.strips, strict=True))
        width, _theme, style = look
        lines = self._lines(width)
        strips = [
            reuse.get(line) or Visual.to_strips(self, line, width, 1, style)[0] for line in lines
        ]
        self._drawn = _Drawn(self.breakdown, look, lines, strips)
        return strips

    def _lines(self, width: int) -> list[Content]:
        """The panel's lines at a width (kept until the reading or the width changes: the
        height check, the layout and the render all ask for them)."""
        cache = self._lines_cache
        if cache is None or cache[0] is not self.breakdown or cache[1] != width:
            cache = self._lines_cache = (self.breakdown, width, self._build_lines(width))
        return cache[2]

    def _sizes(self) -> list[tuple[str, str, str, str, int]]:
        ev = self.breakdown
        rows = []
        used = 0
        for key, label, glyph, style in CATEGORIES[:-1]:
            v = max(int(getattr(ev, key)), 0)
            used += v
            if key == "activations":
                label = "activations" + (" (meas.)" if ev.activations_measured else " (est.)")
            rows.append((key, label, glyph, style, v))
        key, label, glyph, style = CATEGORIES[-1]
        rows.append((key, label, glyph, style, max(int(ev.capacity) - used, 0)))
        return rows

    def _build_lines(self, width: int) -> list[Content]:
        if self.breakdown is None:
            return [Content.styled(self.empty_message, "$foreground-muted")]
        ev = self.breakdown
        rows = self._sizes()
        cells = allocate_cells([r[4] for r in rows], max(width, 1))
        bar = Content.assemble(
            *[(g * n, s) for (_, _, g, s, _), n in zip(rows, cells, strict=True) if n]
        )
        cap = ev.capacity or 1
        items = []
        for _key, label, glyph, style, size in rows:
            if size == 0 and _key not in ("weights", "free"):
                continue
            pct = 100.0 * size / cap
            pct_s = f"{pct:.1f}%" if pct >= 0.1 or size == 0 else "<0.1%"
            items.append((glyph, style, label, fmt_bytes(size), pct_s))
        label_w = max(len(i[2]) for i in items)
        size_w = max(len(i[3]) for i in items)
        pct_w = max(len(i[4]) for i in items)
        item_w = 2 + label_w + 1 + size_w + 1 + pct_w
        n_cols = max(1, min(3, (width + 3) // (item_w + 3)))
        lines: list[Content] = [bar]
        per_col = -(-len(items) // n_cols)
        for r in range(per_col):
            parts: list[Any] = []
            for c in range(n_cols):
                i = c * per_col + r
                if i >= len(items):
                    continue
                glyph, style, label, size_s, pct_s = items[i]
                if c:
                    parts.append("   ")
                parts += [
                    (glyph, style),
                    " ",
                    label.ljust(label_w) + " ",
                    (size_s.rjust(size_w), "bold"),
                    " ",
                    (pct_s.rjust(pct_w), "$foreground-muted"),
                ]
            lines.append(Content.assemble(*parts))
        if self.rank_max is not None:
            lines.append(self._rank_max_line(width))
        return lines

    def _rank_max_line(self, width: int) -> Content:
        """`max over 8 ranks: 61.2 GiB (r5)`: the rank closest to running out."""
        assert self.rank_max is not None
        n, peak, rank = self.rank_max
        label = f"max over {n} ranks: "
        if len(label) + len(fmt_bytes(peak)) + len(f" (r{rank})") > width:
            label = f"max of {n}: "
        return Content.assemble(
            (label, "$foreground-muted"), (fmt_bytes(peak), "bold"), (f" (r{rank})", "$foreground-muted")
        )
