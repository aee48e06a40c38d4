"""The status line's MFU: labelled approximate for a measured peak, and never above 100%."""

from __future__ import annotations

import dataclasses

from pilot import run_pilot, settle, status_text
from scripted import ScriptedTrainer, build_script
from textual.pilot import Pilot

from cockpit.app.cockpit_app import CockpitApp


def test_status_line_never_shows_an_mfu_above_100_percent() -> None:
    script = build_script(steps=20, lr_change_at=None)
    script = [
        dataclasses.replace(e, peak_source="measured: best of 6 1024^3 float32 matmuls on cpu")
        if e.kind == "run_started"
        else dataclasses.replace(e, mfu=2.24 if e.step == 20 else 0.31)
        if e.kind == "step"
        else e
        for e in script
    ]

    trainer = ScriptedTrainer("default", script=script)
    app = CockpitApp(lambda name: trainer, "default")

    async def scenario(pilot: Pilot) -> str:
        await settle(pilot)
        await settle(pilot)
        assert app.view.step == 20 and app.view.mfu == 2.24  # an event from an engine that did not cap
        return status_text(app)

    text = run_pilot(app, scenario, size=(200, 30))
    assert "MFU~100.0%" in text, text
    assert "224" not in text
