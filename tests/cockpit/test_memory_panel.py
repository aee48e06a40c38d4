"""The Memory panel re-arranges the screen only when its height must change, and repaints
only the rows a new reading changes."""

from __future__ import annotations

import dataclasses

from pilot import run_pilot
from scripted import memory_event
from textual.app import App, ComposeResult
from textual.pilot import Pilot

from cockpit.widgets.memory import MemoryPanel


class MemoryApp(App):
    def compose(self) -> ComposeResult:
        yield MemoryPanel(id="memory")


def test_new_readings_repaint_without_a_layout_pass_unless_the_height_changes() -> None:
    app = MemoryApp()

    async def scenario(pilot: Pilot) -> None:
        panel = app.query_one(MemoryPanel)
        calls: list[tuple[int, bool]] = []  # (regions, layout) of each refresh asked
        original = panel.refresh

        def spy(*regions, **kwargs):
            calls.append((len(regions), kwargs.get("layout", False)))
            return original(*regions, **kwargs)

        panel.refresh = spy  # type: ignore[method-assign]
        first = memory_event("nvml", 10, 1.0)
        panel.update_breakdown(first)  # waiting message -> bar and legend: taller
        await pilot.pause()
        assert (0, True) in calls  # the first reading grew the panel
        height = panel.size.height
        calls.clear()
        panel.update_breakdown(dataclasses.replace(first, activations=first.activations // 2))
        await pilot.pause()
        assert panel.size.height == height
        assert "used" in panel.border_subtitle
        # the next one, the same height, repainted some rows: no layout, not the whole panel
        assert calls and not any(layout for _, layout in calls)
        assert all(0 < n_regions < height for n_regions, _ in calls)
        assert any("activations" in panel.render_line(y).text for y in range(height))

    run_pilot(app, scenario, size=(100, 20))
