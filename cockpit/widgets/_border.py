"""Border titles that change often without repainting the whole panel.

Assigning `widget.border_title` or `border_subtitle` repaints every row of the widget, and
reading them back gives markup that need not equal the string that was set, so a naive
"set if changed" sets them every time. Panels whose titles carry live figures (a loss, the
memory in use) use `QuietBorderLabels.set_border_labels` instead: it compares with the string
it set last and repaints only the border row that holds the label.
"""

from __future__ import annotations

from textual.geometry import Region

_ROWS = {"title": "top", "subtitle": "bottom"}


class QuietBorderLabels:
    """Mixin for Textual widgets (list it before the widget class)."""

    def set_border_labels(self, title: str | None = None, subtitle: str | None = None) -> None:
        """Set the border title and/or subtitle (markup); None leaves that one as it is."""
        last: dict[str, str] = self.__dict__.setdefault("_quiet_border_labels", {})
        for which, text in (("title", title), ("subtitle", subtitle)):
            if text is None or last.get(which) == text:
                continue
            last[which] = text
            self._set_border_label(which, text)

    def _set_border_label(self, which: str, text: str) -> None:
        widget = self  # a Textual Widget, by the mixin's contract
        try:
            # what Textual's border-title descriptor stores, set without its full refresh
            label = widget.render_str(text).expand_tabs(4).split()[0]  # type: ignore[attr-defined]
        except Exception:  # noqa: BLE001 - Textual changed: the public, dearer way
            setattr(widget, f"border_{which}", text)
            return
        setattr(widget, f"_border_{which}", label)
        width, height = widget.outer_size  # type: ignore[attr-defined]
        left, top = widget.content_offset  # type: ignore[attr-defined]
        row = -top if _ROWS[which] == "top" else height - 1 - top
        widget.refresh(Region(-left, row, width, 1))  # type: ignore[attr-defined]
