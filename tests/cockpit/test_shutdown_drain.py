"""Events that arrive while the app shuts down are not drawn on a screen being taken apart.

Textual's run_test (every Pilot test) shuts the app down while its message loop still runs: a
drain asked for then (the waking thread's, the tick's) met a samples panel already pruned from
the main screen, whose screen was still on the stack, and ended the test in NoScreen.
"""

from __future__ import annotations

import asyncio

from pilot import run_pilot, scripted_app, settle
from scripted import T0
from textual.pilot import Pilot

from engine.events import Sample


def test_a_drain_while_the_app_shuts_down_draws_nothing_and_raises_nothing() -> None:
    app, factory = scripted_app()

    async def scenario(pilot: Pilot) -> None:
        await settle(pilot, factory)
        panel = app.main_screen.samples_panel
        closing = asyncio.create_task(app._shutdown())  # as run_test's exit does
        for _ in range(10_000):  # until the panel is pruned, its screen still on the stack
            if panel.parent is None:
                break
            await asyncio.sleep(0)
        assert panel.parent is None and app.screen_stack
        factory.trainer.events.put(Sample(step=400, prompt="The ", text="late", time=T0 + 999))
        assert app.pump() == 0  # nothing drawn, nothing raised
        app.feed.redraw_due()
        await closing

    run_pilot(app, scenario)
