"""The Samples panel: generated text, newest first, each with its step and prompt."""

from __future__ import annotations

from collections import deque
from typing import Any

from textual.binding import Binding
from textual.content import Content
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.visual import Visual

from cockpit.figures.numbers import fmt_int

MAX_SAMPLES = 50
MAX_CHARS = 2_000  # per sample, what is shown


def _visible(text: str) -> str:
    """Tabs to spaces, other control characters dropped (newlines kept)."""
    text = text.replace("\r\n", "\n").replace("\t", "    ")
    return "".join(ch for ch in text if ch == "\n" or ch >= " ")


def _prompt_visible(prompt: str) -> str:
    """A prompt as shown inline: a newline shows as ⏎ (and still breaks the line)."""
    return _visible(prompt).replace("\n", "⏎\n")


def format_sample(step: int, prompt: str, text: str) -> Content:
    """One sample: a header line, then the prompt (styled) followed by the generated text."""
    continuation = text[len(prompt) :] if prompt and text.startswith(prompt) else text
    continuation = _visible(continuation[:MAX_CHARS]).rstrip()
    header = Content.assemble(("step ", "$foreground-muted"), (fmt_int(step), "bold $accent"))
    body = Content.assemble(
        (
            _prompt_visible(prompt),
            "bold reverse $secondary-lighten-2" if prompt.strip() else "bold $secondary-lighten-2",
        ),
        continuation,
    )
    return Content("\n").join([header, body])


class SamplesPanel(ScrollView):
    """Newest first, scrollable. Drawn through the line API: each sample is wrapped once, when
    it arrives (or when the width changes), and a new sample never re-arranges the screen. One
    widget per sample, or one long text, cost a layout pass or a full re-wrap per sample."""

    BORDER_TITLE = "Samples"
    # the app opens the samples screen (not shown in the footer: the panel's own key)
    BINDINGS = [Binding("enter", "open_screen", "Samples screen", show=False)]
    ALLOW_MAXIMIZE = True
    can_focus = True
    EMPTY = "no samples yet"
    SAMPLE_KEY = " (press s to sample now)"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.samples: deque[tuple[int, str, str]] = deque(maxlen=MAX_SAMPLES)
        self._pending: list[tuple[int, str, str]] = []
        self._dirty = False
        # (sample, its wrapped lines), newest first
        self._blocks: deque[tuple[tuple[int, str, str], list[Strip]]] = deque()
        self._wrap_width = 0
        self.sampling_offered = False  # the empty panel names s only while a press samples

    class OpenScreen(Message):
        """enter on the panel: every sample by prompt and step, on a screen of its own."""

    def action_open_screen(self) -> None:
        self.post_message(self.OpenScreen())

    def offer_sampling(self, offered: bool) -> None:
        if offered != self.sampling_offered:
            self.sampling_offered = offered
            self.refresh()

    def reset(self) -> None:
        self.samples.clear()
        self._pending.clear()
        self._blocks.clear()
        self._dirty = True
        self.finish_batch()

    def add_sample(self, step: int, prompt: str, text: str) -> None:
        sample = (step, prompt, text)  # one object: the view finds it again by identity
        self.samples.append(sample)
        self._pending = [*self._pending[-(MAX_SAMPLES - 1) :], sample]
        self._dirty = True

    def finish_batch(self) -> None:
        """Show what arrived since the last call: new samples on top, the oldest dropped."""
        if not self._dirty:
            return
        self._dirty = False
        self.border_subtitle = f"{len(self.samples)} kept" if self.samples else ""
        anchor = self._anchor()
        width = self._text_width()
        if width != self._wrap_width:
            self._rewrap(width)  # also wraps the pending samples
        else:
            for sample in self._pending:
                self._blocks.appendleft((sample, self._wrap(sample, width)))
            while len(self._blocks) > len(self.samples):
                self._blocks.pop()
        self._pending.clear()
        self._update_virtual_size()
        self._restore(anchor)
        self.refresh()

    def _anchor(self) -> tuple[tuple[int, str, str], int] | None:
        """The sample at the top of the view and the line within it (None at the very top:
        then the view follows the newest sample)."""
        y = self.scroll_offset.y
        if y <= 0:
            return None
        for sample, block in self._blocks:
            if y < len(block):
                return sample, y
            y -= len(block)
        return None

    def _restore(self, anchor: tuple[tuple[int, str, str], int] | None) -> None:
        """Scroll so that someone reading older samples keeps reading the same line."""
        if anchor is None:
            return
        target, line = anchor
        y = 0
        for sample, block in self._blocks:
            if sample is target:
                y += min(line, len(block) - 1)
                self.scroll_to(y=y, animate=False, immediate=True)
                return
            y += len(block)

    # wrapping ---------------------------------------------------------------------------------
    def _text_width(self) -> int:
        return max(self.scrollable_content_region.width, 1)

    def _wrap(self, sample: tuple[int, str, str], width: int) -> list[Strip]:
        strips = Visual.to_strips(self, format_sample(*sample), width, None, self.visual_style)
        return [*strips, Strip.blank(width)]  # a blank line after each sample

    def _rewrap(self, width: int) -> None:
        self._wrap_width = width
        self._blocks = deque((s, self._wrap(s, width)) for s in reversed(self.samples))

    def _update_virtual_size(self) -> None:
        lines = sum(len(b) for _, b in self._blocks) - (1 if self._blocks else 0)
        self.virtual_size = Size(self._wrap_width, max(lines, 0))

    def on_resize(self) -> None:
        if self._text_width() != self._wrap_width and self.samples:
            self._dirty = True
            self.finish_batch()  # re-wraps at the new width, keeping the reader's place

    # drawing ----------------------------------------------------------------------------------
    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        base = self.visual_style.rich_style
        if not self._blocks:
            empty = Content.styled(
                self.EMPTY + (self.SAMPLE_KEY if self.sampling_offered else ""), "$foreground-muted"
            )
            lines = Visual.to_strips(self, empty, width, None, self.visual_style)
            return (
                lines[y].crop_extend(0, width, base) if y < len(lines) else Strip.blank(width, base)
            )
        index = y + self.scroll_offset.y
        for _, block in self._blocks:
            if index < len(block):
                return block[index].crop_extend(0, width, base).apply_style(base)
            index -= len(block)
        return Strip.blank(width, base)
