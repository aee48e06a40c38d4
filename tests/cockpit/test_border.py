"""Border labels with live figures repaint their border row only, and only when they change."""

from __future__ import annotations

from pilot import run_pilot
from textual.app import App, ComposeResult
from textual.geometry import Region
from textual.pilot import Pilot
from textual.widget import Widget

from cockpit.widgets._repaint import QuietBorderLabels


class Panel(QuietBorderLabels, Widget):
    DEFAULT_CSS = "Panel { border: round $primary; height: 10; }"


class PanelApp(App):
    def compose(self) -> ComposeResult:
        yield Panel()


def test_labels_repaint_their_row_and_nothing_when_unchanged() -> None:
    app = PanelApp()

    async def scenario(pilot: Pilot) -> None:
        panel = app.query_one(Panel)
        calls: list[tuple] = []
        original = panel.refresh

        def spy(*regions, **kwargs):
            calls.append(regions)
            return original(*regions, **kwargs)

        panel.refresh = spy  # type: ignore[method-assign]
        panel.set_border_labels("Loss [b]x:steps[/]", "train 1.80")
        await pilot.pause()
        # (reading border_title back gives "Loss [b]x:steps[/b]": comparing with that
        # is why the labels used to be set, and the panel repainted, on every redraw)
        assert panel.border_title.replace("[/b]", "[/]") == "Loss [b]x:steps[/]"
        top, bottom = calls
        assert len(top) == len(bottom) == 1 and top[0].height == bottom[0].height == 1
        # rows in content coordinates: the top border is above row 0, the bottom one
        # below the last content row (10 rows with a border: 8 of content)
        assert top[0].y == -1 and bottom[0].y == 8
        calls.clear()
        panel.set_border_labels("Loss [b]x:steps[/]", "train 1.80")  # same again
        assert calls == []
        panel.set_border_labels(subtitle="train 1.79")
        assert len(calls) == 1 and calls[0][0].y == 8
        await pilot.pause()
        (bottom_row,) = panel.render_lines(Region(0, 9, 60, 1))
        assert "train 1.79" in bottom_row.text

    run_pilot(app, scenario, size=(60, 20))
