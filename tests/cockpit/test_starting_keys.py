"""While a real run is still starting (preparing its data, building its model), every steering
key acts or says in one line why not, and so do n and f (no run directory yet: they were shown
disabled and a press did nothing). Space and +/- were sent silently: nothing on screen showed
them until the first step, minutes away perhaps."""

from __future__ import annotations

from pathlib import Path

from pilot import REAL_SIZE, TINY, Toasts, run_pilot, wait_for_engine
from slow_prepare import slow_prepare
from textual.pilot import Pilot

import engine.train.setup
from cockpit.app.cockpit_app import CockpitApp
from cockpit.app.offers import STEERING_BY_KEY
from engine.config.presets import load_preset
from engine.train.trainer import Trainer

KEYS = [*sorted(STEERING_BY_KEY), "n", "f"]


def test_every_key_acts_or_says_why_not_while_the_run_starts(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # the run's default directory, made once it trains
    monkeypatch.setattr(engine.train.setup, "prepare", slow_prepare(chunks=100_000, delay_s=0.02))
    made: list[Trainer] = []

    def factory(name: str) -> Trainer:
        made.append(Trainer(load_preset(name, TINY), telemetry=False))
        return made[-1]

    app = CockpitApp(factory, "tiny", resume_factory=lambda *_: made[-1])
    toasts = Toasts()
    said: dict[str, list[str]] = {}
    opened: dict[str, str] = {}

    async def scenario(pilot: Pilot) -> None:
        await wait_for_engine(pilot, lambda: app.main_screen.preparing_corpus)
        for key in KEYS:
            toasts.clear()
            await pilot.press(key)
            await pilot.pause()
            said[key] = [f"{t.title}: {t.message}" for t in toasts]
            if app.screen is not app.main_screen:
                opened[key] = type(app.screen).__name__
                await pilot.press("escape")
                await pilot.pause()
        assert app.state == "starting"  # all of it while the run was still starting
        made[0].stop(checkpoint=False)

    run_pilot(app, scenario, size=REAL_SIZE, toasts=toasts)
    for key in KEYS:
        assert key in opened or len(said[key]) == 1, (key, said[key])
        assert all("\n" not in line for line in said[key])
    for key in ("space", "plus", "minus"):
        assert "at the first step: the run is still starting" in said[key][0], said[key]
    for key in ("n", "f"):
        assert "its directory is made when it trains; n and f work then" in said[key][0], said[key]
    assert opened.get("l") == "LrScreen"
