"""The Memory panel re-arranges the screen only when its height must change."""

from __future__ import annotations

import asyncio
import dataclasses

from scripted import memory_event
from textual.app import App, ComposeResult

from cockpit.widgets.memory import MemoryPanel


class MemoryApp(App):
    def compose(self) -> ComposeResult:
        yield MemoryPanel(id="memory")


def test_new_readings_repaint_without_a_layout_pass_unless_the_height_changes() -> None:
    async def go() -> None:
        app = MemoryApp()
        async with app.run_test(size=(100, 20)) as pilot:
            panel = app.query_one(MemoryPanel)
            layouts: list[bool] = []
            original = panel.refresh

            def spy(*regions, **kwargs):
                if "layout" in kwargs:  # the panel's own calls (Textual's pass no layout=)
                    layouts.append(kwargs["layout"])
                return original(*regions, **kwargs)

            panel.refresh = spy  # type: ignore[method-assign]
            first = memory_event("nvml", 10, 1.0)
            panel.update_breakdown(first)  # waiting message -> bar and legend: taller
            await pilot.pause()
            height = panel.size.height
            panel.update_breakdown(dataclasses.replace(first, activations=first.activations // 2))
            await pilot.pause()
            assert panel.size.height == height
            assert "used" in panel.border_subtitle
            assert True in layouts[:-1]  # the first reading grew the panel...
            assert layouts[-1] is False  # ...the next one, the same height, did not

    asyncio.run(go())
