"""The samples screen (enter on the samples panel): for each prompt, the text at each sampled
step in order, the words changed since the step before highlighted; comparing runs, the same
prompt at the same step of each run side by side, the words that differ from the run on screen
highlighted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from cockpit.figures.numbers import fmt_int
from cockpit.figures.sample_diff import (
    Span,
    all_prompts,
    by_prompt,
    changed_words,
    continuation,
    side_by_side,
    word_diff,
)

MAX_CHARS = 2_000  # of each text, what is shown (as on the samples panel)
MAX_STEPS = 200  # the newest steps shown of a prompt: a widget per text stays quick to lay out
CHANGED_STYLE = "bold reverse $warning"
NOTE_STYLE = "$foreground-muted"


@dataclass(frozen=True)
class SampleSource:
    """One run's samples: its name on screen and its (step, prompt, text) in any order."""

    name: str
    samples: tuple[tuple[int, str, str], ...]


def shown_prompt(prompt: str) -> str:
    """A prompt on one line: newlines as ⏎, tabs as spaces; the empty prompt said so."""
    if not prompt:
        return "(empty prompt)"
    return "".join(c for c in prompt.replace("\n", "⏎").replace("\t", "    ") if c >= " ")


def _visible(text: str) -> str:
    text = text[:MAX_CHARS].replace("\r\n", "\n").replace("\t", "    ")
    return "".join(c for c in text if c == "\n" or c >= " ").rstrip()


def spans_content(spans: Sequence[Span]) -> Content:
    """The text with its changed spans highlighted."""
    parts = [(_visible(s.text) if i == len(spans) - 1 else s.text, CHANGED_STYLE if s.changed else "")
             for i, s in enumerate(spans)]  # fmt: skip
    return Content.assemble(*((_clean(t), style) for t, style in parts))


def _clean(text: str) -> str:
    return "".join(c for c in text.replace("\t", "    ") if c == "\n" or c >= " ")


def _text(prompt: str, text: str) -> str:
    return continuation(prompt, text)[:MAX_CHARS]


class SamplesScreen(ModalScreen[None]):
    """The samples of `sources`: the first is the run on screen, the others runs compared."""

    BINDINGS = [Binding("escape,q", "close", "Close", show=False)]

    def __init__(self, sources: Sequence[SampleSource]) -> None:
        super().__init__(classes="dialog-screen")
        self.sources = list(sources)
        self.runs = [by_prompt(s.samples) for s in self.sources]
        self.prompts = all_prompts(self.runs)
        self.prompt: str | None = self.prompts[0] if self.prompts else None

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="samples-dialog") as box:
            box.border_title = "Samples"
            box.border_subtitle = "↑↓ prompt · tab text · esc close"
            yield Static(self._note(), id="samples-note")
            yield OptionList(
                *(Option(shown_prompt(p), id=str(i)) for i, p in enumerate(self.prompts)),
                id="samples-prompts",
            )
            yield VerticalScroll(id="samples-body")

    def on_mount(self) -> None:
        # the whole screen, over the dialogs' usual 72 columns (inline: the app's CSS wins over
        # a screen's DEFAULT_CSS)
        dialog = self.query_one("#samples-dialog")
        dialog.styles.width = dialog.styles.height = "100%"
        dialog.styles.max_width = dialog.styles.max_height = "100%"
        dialog.styles.padding = (0, 1)
        prompts = self.query_one("#samples-prompts", OptionList)
        prompts.styles.height = "auto"
        prompts.styles.max_height = 5
        prompts.display = bool(self.prompts)
        self.query_one("#samples-body").styles.height = "1fr"
        if self.prompts:
            prompts.highlighted = 0
            prompts.focus()
        self._draw()

    def _note(self) -> Content:
        names = [s.name for s in self.sources]
        if not self.prompts:
            return Content.styled(
                "No samples yet: the run samples at its sample.interval, or press s.", NOTE_STYLE
            )
        count = f"{len(self.prompts)} prompt{'s' if len(self.prompts) != 1 else ''}"
        if len(names) == 1:
            return Content.assemble(
                (names[0], "bold"),
                (f": {count}, oldest step first; ", NOTE_STYLE),
                ("changed words", CHANGED_STYLE),
                (" differ from the step before", NOTE_STYLE),
            )
        return Content.assemble(
            (", ".join(names), "bold"),
            (f": {count}, each step side by side; ", NOTE_STYLE),
            ("changed words", CHANGED_STYLE),
            (f" differ from {names[0]}", NOTE_STYLE),
        )

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        if event.option.id is not None:
            prompt = self.prompts[int(event.option.id)]
            if prompt != self.prompt:
                self.prompt = prompt
                self._draw()

    def _draw(self) -> None:
        body = self.query_one("#samples-body", VerticalScroll)
        body.remove_children()
        if self.prompt is None:
            return
        if len(self.sources) == 1:
            body.mount_all(self._one_run(self.prompt))
        else:
            body.mount_all(self._compared(self.prompt))
        body.call_after_refresh(body.scroll_end, animate=False)  # the newest step in view

    def _one_run(self, prompt: str) -> list[Static]:
        widgets: list[Static] = []
        previous: str | None = None
        steps = self.runs[0].get(prompt, [])
        if len(steps) > MAX_STEPS:
            widgets.append(self._cut(len(steps)))
            previous = _text(prompt, steps[-MAX_STEPS - 1][1])
        for step, text in steps[-MAX_STEPS:]:
            shown = _text(prompt, text)
            spans = word_diff(previous, shown)
            header = Content.assemble(("step ", NOTE_STYLE), (fmt_int(step), "bold $accent"))
            if previous is not None:
                words = changed_words(spans)
                header += Content.styled(
                    f"  {words} word{'s' if words != 1 else ''} changed", NOTE_STYLE
                )
            widgets.append(Static(header, classes="samples-step"))
            widgets.append(Static(spans_content(spans), classes="samples-text"))
            previous = shown
        return widgets

    def _compared(self, prompt: str) -> list[Static | Horizontal]:
        names = [
            Static(Content.styled(s.name, "bold"), classes="samples-cell") for s in self.sources
        ]
        rows: list[Static | Horizontal] = [self._row(names)]
        steps = side_by_side(self.runs, prompt)
        if len(steps) > MAX_STEPS:
            rows.insert(0, self._cut(len(steps)))
        for step, texts in steps[-MAX_STEPS:]:
            rows.append(
                Static(Content.assemble(("step ", NOTE_STYLE), (fmt_int(step), "bold $accent")))
            )
            first = _text(prompt, texts[0]) if texts[0] is not None else None
            cells = []
            for i, text in enumerate(texts):
                if text is None:
                    cells.append(Static(Content.styled("(no sample at this step)", NOTE_STYLE),
                                        classes="samples-cell"))  # fmt: skip
                    continue
                shown = _text(prompt, text)
                spans = word_diff(None if i == 0 else first, shown)
                cells.append(Static(spans_content(spans), classes="samples-cell"))
            rows.append(self._row(cells))
        return rows

    @staticmethod
    def _cut(steps: int) -> Static:
        return Static(Content.styled(f"the newest {MAX_STEPS} of {steps:,} steps", NOTE_STYLE))

    @staticmethod
    def _row(cells: list[Static]) -> Horizontal:
        for cell in cells:
            cell.styles.width = "1fr"
            cell.styles.margin = (0, 1, 0, 0)
        row = Horizontal(*cells, classes="samples-row")
        row.styles.height = "auto"
        return row

    def action_close(self) -> None:
        self.dismiss(None)
