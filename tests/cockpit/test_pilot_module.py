"""The shared Pilot helpers themselves: a scenario's failure fails its test, pytest fixtures
reach it, and toasts are collected (a helper that swallowed any of these would let every app
test pass without checking anything)."""

from __future__ import annotations

import inspect

import pytest
from pilot import Toasts, pilot_test, run_pilot, scripted_app
from scripted import ScriptedFactory
from textual.pilot import Pilot

from cockpit.app.cockpit_app import CockpitApp


def test_a_failing_scenario_fails_its_test() -> None:
    @pilot_test()
    async def scenario(app: CockpitApp) -> None:
        assert app.state == "paused", "the scripted run is running"

    with pytest.raises(AssertionError, match="the scripted run is running"):
        scenario()


def test_pytest_sees_only_the_fixtures_and_they_reach_the_scenario(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[object] = []

    @pilot_test(steps=40)
    async def scenario(
        pilot: Pilot, factory: ScriptedFactory, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        seen.extend([pilot.app.state, factory.names, monkeypatch])

    assert list(inspect.signature(scenario).parameters) == ["monkeypatch"]
    scenario(monkeypatch=monkeypatch)
    assert seen == ["running", ["default"], monkeypatch]  # settled before the scenario


def test_toasts_are_collected_from_the_start() -> None:
    app, factory = scripted_app()
    toasts = Toasts()

    async def scenario(pilot: Pilot) -> int:
        app.notify("hello", title="Greeting")
        await pilot.pause()
        return len(factory.trainers)

    assert run_pilot(app, scenario, toasts=toasts) == 1
    # the scripted run's own toasts (an LR change) may land after it: asserted present, not last
    assert ("Greeting", "hello") in [(t.title, t.message) for t in toasts]
