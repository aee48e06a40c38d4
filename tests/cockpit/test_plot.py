"""The plots' drawing path: plotext's frame is reused while the axes stay, the data is drawn
where plotext would draw it, and a plotext whose internals changed still gets a plot."""

from __future__ import annotations

import math
import re
from pathlib import Path

from pilot import run_pilot
from textual.app import App, ComposeResult
from textual.geometry import Region
from textual.pilot import Pilot

import cockpit
from cockpit.widgets import plotext_frame
from cockpit.widgets.loss import LossPanel


class LossApp(App):
    CSS = "LossPanel { border: round $primary; }"  # the border carries the legend

    def compose(self) -> ComposeResult:
        yield LossPanel(id="loss")


def loss(step: int) -> float:
    return 1.5 + 3 * math.exp(-step / 300) + 0.02 * math.sin(step)


def feed(panel: LossPanel, steps: range) -> None:
    for step in steps:
        panel.add_step(step, loss(step), 64 * step)


def text_of(panel: LossPanel) -> str:
    return "\n".join(panel.render_line(y).text for y in range(panel.size.height))


def test_new_steps_reuse_the_frame_and_repaint_few_rows() -> None:
    app = LossApp()

    async def scenario(pilot: Pilot) -> None:
        panel = app.query_one(LossPanel)
        feed(panel, range(1, 2991))
        panel.flush(force=True)
        await pilot.pause()
        builds = panel.frame_builds
        before = text_of(panel)
        panel.add_step(2991, 2.0, 64 * 2991)  # a spike at the right end, within the axes
        panel.flush(force=True)
        after = text_of(panel)
        assert after != before  # the spike is drawn...
        assert panel.frame_builds == builds  # ...over the same axes: plotext did not run
        changed = [
            y
            for y, (a, b) in enumerate(zip(before.split("\n"), after.split("\n"), strict=True))
            if a != b
        ]
        assert 0 < len(changed) < panel.size.height // 2
        panel.add_step(6000, 1.0, 64 * 6000)  # the x range doubles: new axes
        panel.flush(force=True)
        text_of(panel)
        assert panel.frame_builds == builds + 1

    run_pilot(app, scenario, size=(80, 24))


def test_a_changed_plotext_falls_back_to_its_public_api(monkeypatch) -> None:
    def broken(self, plt):  # as if plotext's matrices had moved
        raise plotext_frame.PlotextChanged("no monitor.matrix")

    monkeypatch.setattr(plotext_frame.Frame, "__init__", broken)

    app = LossApp()

    async def scenario(pilot: Pilot) -> None:
        panel = app.query_one(LossPanel)
        feed(panel, range(1, 500))
        panel.flush(force=True)
        await pilot.pause()
        drawn = text_of(panel)
        assert panel._plotext_only
        assert any("\u2800" < ch <= "\u28ff" for ch in drawn)  # braille lines, by plotext
        assert "500" in drawn or "400" in drawn  # its x ticks

    run_pilot(app, scenario, size=(80, 24))


def test_the_legend_in_the_bottom_border_follows_the_data() -> None:
    app = LossApp()

    async def scenario(pilot: Pilot) -> None:
        panel = app.query_one(LossPanel)

        def bottom_border() -> str:
            width, height = panel.outer_size
            return panel.render_lines(Region(0, 0, width, height))[-1].text

        feed(panel, range(1, 100))
        panel.add_step(100, 2.3456, 6400)
        panel.flush(force=True)
        await pilot.pause()
        assert "train 2.3456" in bottom_border()
        panel.add_step(101, 2.1234, 6464)
        panel.flush(force=True)
        await pilot.pause()
        assert "train 2.1234" in bottom_border()

    run_pilot(app, scenario, size=(80, 24))


def test_only_plotext_frame_touches_plotext_internals() -> None:
    # a plotext upgrade that moves its private matrices must be fixed in one module, not hunted
    private = re.compile(r"\bplt\._\w|\bplotext\._\w|\.monitor\b|\bmonitor\.matrix")
    package = Path(cockpit.__file__).parent
    users = sorted(
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if private.search(path.read_text(encoding="utf-8"))
    )
    assert users == ["widgets/plotext_frame.py"]
