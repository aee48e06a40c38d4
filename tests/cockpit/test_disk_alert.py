"""A full disk seen in the app: its error stays on the alert line while the run waits for room,
and goes once the engine says what waited is written (not left claiming a failure that is over)."""

from __future__ import annotations

import dataclasses

from pilot import alert_text, run_pilot, settle, wait_for
from scripted import ScriptedTrainer, build_script
from textual.pilot import Pilot

from cockpit.app.cockpit_app import CockpitApp
from engine.events import Alert, StateChanged, Step

FAILED = (
    "checkpoint at step 120 failed (No space left on device); the previous one is intact: free "
    "disk space: the run goes on by itself once there is room (a checkpoint or resume command "
    "retries now)"
)


def disk_full_script(recovered: bool) -> list:
    script = build_script("default", steps=120)
    t = script[-1].time
    script += [
        Alert(level="error", code="disk", step=120, time=t + 0.1, message=FAILED),
        StateChanged(state="paused", step=120, reason="disk full", time=t + 0.2),
    ]
    if recovered:
        last = next(e for e in reversed(script) if isinstance(e, Step))
        script += [
            Alert(
                level="info",
                code="disk",
                step=120,
                time=t + 5,
                message="disk space is back: what waited is written; training goes on",
            ),
            StateChanged(state="running", step=120, reason="disk space freed", time=t + 5.1),
            dataclasses.replace(last, step=121, time=t + 5.5),
        ]
    return script


def open_app(script: list) -> CockpitApp:
    return CockpitApp(lambda name: ScriptedTrainer(name, script=script), "default")


def test_the_disk_error_stays_while_the_run_waits_and_goes_once_space_is_back() -> None:
    waiting, recovered = open_app(disk_full_script(False)), open_app(disk_full_script(True))

    async def still_full(pilot: Pilot) -> None:
        await wait_for(pilot, lambda: waiting.trainer is not None and waiting.trainer.loaded.is_set())
        await settle(pilot)
        assert waiting.state == "paused"
        # the engine says it in words, the app with its key
        assert alert_text(waiting) == "✗ " + FAILED.replace(
            "(a checkpoint or resume command retries now)", "(c retries now)"
        )

    async def space_back(pilot: Pilot) -> None:
        await wait_for(
            pilot, lambda: recovered.trainer is not None and recovered.trainer.loaded.is_set()
        )
        await settle(pilot)
        assert recovered.state == "running"
        assert alert_text(recovered) == ""

    run_pilot(waiting, still_full)
    run_pilot(recovered, space_back)
