"""Repainting only what changed: the border row that holds a label, the content rows that differ.

`QuietBorderLabels` sets a border title and repaints only its row (assigning `border_title`
repaints the whole widget); `RowStrips` repaints only the rows whose Strip changed. Both are
mixins for Textual widgets: list them before the widget class.
"""

from __future__ import annotations

from typing import Any

from textual.geometry import Region
from textual.strip import Strip

_ROWS = {"title": "top", "subtitle": "bottom"}


class QuietBorderLabels:
    def set_border_labels(self, title: str | None = None, subtitle: str | None = None) -> None:
        """Set the border title and/or subtitle (markup); None leaves that one as it is."""
        last: dict[str, str] = self.__dict__.setdefault("_quiet_border_labels", {})
        for which, text in (("title", title), ("subtitle", subtitle)):
            if text is None or last.get(which) == text:
                continue
            last[which] = text
            self._set_border_label(which, text)

    def _set_border_label(self, which: str, text: str) -> None:
        widget: Any = self
        try:
            # what Textual's border-title descriptor stores, set without its full refresh
            label = widget.render_str(text).expand_tabs(4).split()[0]
        except (AttributeError, IndexError, TypeError):  # Textual changed: the public, dearer way
            setattr(widget, f"border_{which}", text)
            return
        setattr(widget, f"_border_{which}", label)
        width, height = widget.outer_size
        left, top = widget.content_offset
        row = -top if _ROWS[which] == "top" else height - 1 - top
        widget.refresh(Region(-left, row, width, 1))


class RowStrips:
    """The widget's rows are `self.row_strips()`, a list of Strips the widget builds and caches."""

    def render_line(self, y: int) -> Strip:
        widget: Any = self
        strips = widget.row_strips()
        if 0 <= y < len(strips):
            return strips[y]
        return Strip.blank(widget.size.width, widget.visual_style.rich_style)

    def repaint_changed_rows(self, before: list[Strip] | None, after: list[Strip]) -> None:
        """Ask Textual to repaint the rows of `after` that differ from `before`, the rows on
        screen (all of them when `before` is None or of another length)."""
        widget: Any = self
        if before is None or len(before) != len(after):
            widget.refresh()
            return
        changed = [y for y, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
        if len(changed) == len(after):
            widget.refresh()
        elif changed:
            widget.refresh(*[Region(0, y, widget.size.width, 1) for y in changed])
