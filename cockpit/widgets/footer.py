"""The footer: Textual's, showing only the keys that fit whole.

Textual's row scrolls sideways under the palette key, which then hides keys and leaves letters
sticking out ("^p paletteu"). Here a key is shown whole or not at all: the palette key first, then
as many keys as fit. Under a dialog the footer is blank.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from rich.cells import cell_len
from textual.app import ComposeResult
from textual.events import Resize
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer

PALETTE_CLASS = "-command-palette"
# the palette key is drawn compact in either footer ('^p palette'), after a one-cell border and
# before one cell of padding (a normal footer) or of margin (a compact one)
PALETTE_FRAME = 2
UNMEASURED = 1 << 30


def key_width(key_display: str, description: str, compact: bool) -> int:
    """The cells one footer key takes, its margin included (Textual's footer CSS): compact,
    'k Desc' and a one-cell margin; otherwise ' k Desc ' with none."""
    described = f" {description}" if description else ""
    return cell_len(key_display) + cell_len(described) + (1 if compact else 2)


def key_texts(item: Widget) -> tuple[str, str] | None:
    """A footer key's (key as shown, description); None for anything else in the footer.
    (Textual's FooterKey is not exported: it is known by what it holds.)"""
    display, description = getattr(item, "key_display", None), getattr(item, "description", None)
    if isinstance(display, str) and isinstance(description, str):
        return display, description
    return None


def keys_that_fit(widths: Sequence[int], palette_width: int | None, room: int) -> tuple[int, bool]:
    """How many keys (from the left) to show in `room` cells, and whether the palette's key fits
    after them: every key if they all fit with the palette's, else the palette's goes first,
    then keys from the end."""
    total = sum(widths)
    if palette_width is not None and total + palette_width <= room:
        return len(widths), True
    shown, used = 0, 0
    for width in widths:
        if used + width > room:
            break
        shown, used = shown + 1, used + width
    return shown, False


class KeyFooter(Footer):
    """A footer of whole keys: see the module's docstring."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._composed_width = -1

    def compose(self) -> ComposeResult:
        self._composed_width = self.size.width
        yield from self.fitting(list(super().compose()), self.size.width)

    def fitting(self, items: list[Widget], room: int) -> Iterable[Widget]:
        """The footer's items that fit whole in `room` cells, palette key last if it fits."""
        palette = [w for w in items if w.has_class(PALETTE_CLASS)]
        keys = [w for w in items if not w.has_class(PALETTE_CLASS)]
        widths = [self._width_of(w) for w in keys]
        palette_width = None
        if palette:
            display, description = key_texts(palette[0]) or ("", "")
            palette_width = cell_len(display) + 1 + cell_len(description) + PALETTE_FRAME
        shown, with_palette = keys_that_fit(widths, palette_width, room)
        yield from keys[:shown]
        if with_palette:
            yield from palette

    def _width_of(self, item: Widget) -> int:
        texts = key_texts(item)
        if texts is not None:
            return key_width(*texts, self.compact)
        # a group of keys or its label (the app's bindings have no groups): too wide to
        # measure here, so it is left out rather than cut
        return UNMEASURED

    def on_mount(self) -> None:
        self.app.screen_change_signal.subscribe(self, self._screen_changed)

    def on_unmount(self) -> None:
        self.app.screen_change_signal.unsubscribe(self)

    def _screen_changed(self, screen: Screen[Any]) -> None:
        self.visible = screen is self.screen

    def on_resize(self, event: Resize) -> None:
        if event.size.width != self._composed_width:  # before the bindings: an empty compose
            self.call_after_refresh(self.recompose)
