"""Interventions on the loss panel: a mark on the x axis each, named in the title.

Each LR change and rollback drew a full-height line across the chart with no legend: six of
them striped it. Now each is one glyph on the x axis' line (▲ an LR set, ↺ a rollback) and the
title says what the glyphs are; a NaN keeps its full-height line (an alarm, not a note).
"""

from __future__ import annotations

import math

from pilot import run_pilot
from textual.app import App, ComposeResult
from textual.pilot import Pilot

from cockpit.widgets.loss import LossPanel


class LossApp(App):
    CSS = "LossPanel { border: round $primary; }"

    def compose(self) -> ComposeResult:
        yield LossPanel(id="loss")


def drawn(steps: int, marks: list[tuple[int, str]]) -> tuple[list[str], str]:
    """The panel's rows and its title after `steps` steps and these interventions."""
    app = LossApp()

    async def scenario(pilot: Pilot) -> tuple[list[str], str]:
        panel = app.query_one(LossPanel)
        for step in range(1, steps + 1):
            panel.add_step(step, 1.5 + 3 * math.exp(-step / 300), 64 * step)
            for at, kind in marks:
                if at == step:
                    panel.add_marker(step, kind)
        panel.flush(force=True)
        await pilot.pause()
        rows = [panel.render_line(y).text for y in range(panel.size.height)]
        return rows, str(panel.border_title)

    return run_pilot(app, scenario, size=(100, 30))


def full_height_columns(rows: list[str]) -> list[int]:
    """Columns drawn as '│' on most rows of the chart (a vertical line across it)."""
    width = min(len(r) for r in rows)
    return [
        c
        for c in range(12, width - 1)  # right of the y axis, left of the frame's edge
        if sum(r[c] == "│" for r in rows) > len(rows) // 2
    ]


def test_six_interventions_are_marks_on_the_axis_not_lines_across_the_chart() -> None:
    marks = [(150, "lr"), (300, "lr"), (450, "rollback"), (600, "lr"), (750, "lr"), (900, "lr")]
    rows, title = drawn(1000, marks)
    assert full_height_columns(rows) == [], "\n".join(rows)
    axis = next(r for r in reversed(rows) if "▲" in r or "↺" in r)  # one row: the x axis
    assert axis.count("▲") == 5 and axis.count("↺") == 1, "\n".join(rows)
    assert "▲ LR set" in title and "↺ rollback" in title


def test_no_interventions_no_legend() -> None:
    rows, title = drawn(300, [])
    assert "▲" not in title and "↺" not in title
    assert not any("▲" in r or "↺" in r for r in rows)
