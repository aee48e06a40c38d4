"""The Samples panel: generated text, newest first, each with its step and prompt."""

from __future__ import annotations

from collections import deque
from typing import Any

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.content import Content
from textual.widgets import Static

from cockpit.widgets._format import fmt_int

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


class SamplesPanel(VerticalScroll):
    BORDER_TITLE = "Samples"
    ALLOW_MAXIMIZE = True

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.samples: deque[tuple[int, str, str]] = deque(maxlen=MAX_SAMPLES)
        self._dirty = False
        self.text = Static(Content.styled("no samples yet", "$foreground-muted"), id="samples-text")

    def compose(self) -> ComposeResult:
        yield self.text

    def reset(self) -> None:
        self.samples.clear()
        self._dirty = True
        self.finish_batch()

    def add_sample(self, step: int, prompt: str, text: str) -> None:
        self.samples.append((step, prompt, text))
        self._dirty = True

    def finish_batch(self) -> None:
        if not self._dirty:
            return
        self._dirty = False
        self.border_subtitle = f"{len(self.samples)} kept" if self.samples else ""
        if not self.samples:
            content = Content.styled("no samples yet (press s to sample now)", "$foreground-muted")
        else:
            blocks = [format_sample(*s) for s in reversed(self.samples)]
            content = Content("\n\n").join(blocks)
        self.text.update(content)
