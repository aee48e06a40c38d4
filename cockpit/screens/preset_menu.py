"""The preset menu: every preset with its description, origin and whether its data is ready;
enter chooses one."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option


@dataclass(frozen=True)
class PresetRow:
    name: str
    description: str
    origin: str
    data_ok: bool
    data_note: str
    current: bool = False
    data_stand_in: bool = False  # usable, but only a stand-in for the corpus the preset wants


class PresetScreen(ModalScreen["str | None"]):
    """Every preset with its description, origin and data availability; enter chooses."""

    BINDINGS = [Binding("escape,q", "cancel", "Cancel", show=False)]

    def __init__(self, rows: Sequence[PresetRow]) -> None:
        super().__init__(classes="dialog-screen")
        self.rows = list(rows)

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="preset-dialog") as box:
            box.border_title = "Switch preset"
            box.border_subtitle = "↑↓ choose · enter select · esc cancel"
            options: list[Option | None] = []
            for r in self.rows:
                if options:
                    options.append(None)  # a separator line
                options.append(Option(self._prompt(r), id=r.name))
            if not options:
                yield Static("no presets found", classes="dialog-message")
            yield OptionList(*options, id="preset-list")

    def _prompt(self, r: PresetRow) -> Content:
        name_w = max(len(x.name) for x in self.rows)
        origin_w = max(len(x.origin) for x in self.rows)
        head: list[tuple[str, str] | str] = [(r.name.ljust(name_w), "bold")]
        head.append((f"  {r.origin.ljust(origin_w)}  ", "$foreground-muted"))
        if r.data_ok and r.data_stand_in:
            head.append((f"⚠ {r.data_note or 'stand-in corpus'}", "$warning"))
        elif r.data_ok:
            head.append(("✓ data ready", "$success"))
        else:
            head.append((f"✗ {r.data_note or 'data missing'}", "$warning"))
        if r.current:
            head.append(("  ● current", "bold $accent"))
        desc = r.description or "(no description)"
        return Content.assemble(*head, "\n", (desc, "$foreground-muted"))

    def on_mount(self) -> None:
        ol = self.query_one(OptionList)
        ol.focus()
        for r in self.rows:
            if r.current:
                ol.highlighted = ol.get_option_index(r.name)
                break

    @on(OptionList.OptionSelected)
    def _selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        self.dismiss(None)
