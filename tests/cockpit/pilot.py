"""Driving the cockpit with Textual's Pilot: the setup every app test shares, in one place.

The tests are plain `def` functions that run their scenario with `asyncio.run` (no async pytest
plugin): `pilot_test` does that for a scripted app, `run_pilot` for any app a test builds
itself (a custom trainer, the real engine, options of its own).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from scripted import ScriptedFactory
from textual.app import App
from textual.message import Message
from textual.notifications import Notification, Notify
from textual.pilot import Pilot
from tiny import tiny_overrides

from cockpit.app.cockpit_app import CockpitApp
from cockpit.widgets.status import AlertLine
from engine.config.presets import load_preset
from engine.train.trainer import Trainer

SIZE = (100, 30)  # the scripted tests' terminal
REAL_SIZE = (120, 40)  # the real-engine tests' terminal

# A model small enough that the real engine steps in milliseconds on a loaded CPU, training on
# until the test stops it, with nothing periodic (evaluation, samples, checkpoints) in between.
TINY = tiny_overrides("train.max_steps=1000000", "sample.max_new_tokens=8", quiet=True)

T = TypeVar("T")


class Toasts(list[Notification]):
    """The toasts the app raised, in order: pass `hook` as the Pilot's message_hook."""

    def hook(self, message: Message) -> None:
        if isinstance(message, Notify):
            self.append(message.notification)


async def wait_for(pilot: Pilot, condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """Let the app run until `condition()` holds (or fail after `timeout` seconds)."""
    for _ in range(int(timeout / 0.01)):
        if condition():
            return
        await pilot.pause(0.01)
    raise AssertionError("timed out waiting for the app")


async def wait_for_engine(
    pilot: Pilot, condition: Callable[[], bool], timeout: float = 30.0
) -> None:
    """`wait_for` for the real engine: its steps take real time on a machine others share."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await pilot.pause(0.05)


async def settle(pilot: Pilot, factory: ScriptedFactory | None = None) -> None:
    """Wait until the current scripted trainer played its script, then route and draw it all."""
    app = pilot.app
    if factory is not None and factory.trainers:
        trainer = factory.trainer
        await wait_for(pilot, lambda: trainer.loaded.is_set() and app.trainer is trainer)
    await pilot.pause()
    app.pump(force=True)
    await pilot.pause()


def run_pilot(
    app: App[Any],
    scenario: Callable[[Pilot], Awaitable[T]],
    *,
    size: tuple[int, int] = SIZE,
    toasts: Toasts | None = None,
) -> T:
    """Run `app` headless at `size`, play `scenario(pilot)` and return what it returns; the app
    has shut down when this returns (the exit report can be checked then)."""

    async def go() -> T:
        hook = toasts.hook if toasts is not None else None
        async with app.run_test(size=size, message_hook=hook) as pilot:
            return await scenario(pilot)

    return asyncio.run(go())


def scripted_app(**factory_options: Any) -> tuple[CockpitApp, ScriptedFactory]:
    """The app on the "default" preset, its runs played by `ScriptedFactory(**factory_options)`."""
    factory = ScriptedFactory(**factory_options)
    return CockpitApp(factory, "default"), factory


PILOT_ARGUMENTS = ("pilot", "app", "factory", "toasts")


def pilot_test(
    *, size: tuple[int, int] = SIZE, **factory_options: Any
) -> Callable[[Callable[..., Awaitable[None]]], Callable[..., None]]:
    """Make `async def test_x(pilot, app, factory, toasts, <pytest fixtures>)` a plain test:
    it runs once the scripted app (see `scripted_app`) has played and drawn its first script.
    Ask for any of the four by name; `toasts` collects the toasts from the start."""

    def wrap(scenario: Callable[..., Awaitable[None]]) -> Callable[..., None]:
        params = inspect.signature(scenario).parameters
        wanted = [name for name in PILOT_ARGUMENTS if name in params]

        def test(**fixtures: Any) -> None:
            app, factory = scripted_app(**factory_options)
            toasts = Toasts() if "toasts" in wanted else None

            async def play(pilot: Pilot) -> None:
                await settle(pilot, factory)
                given = {"pilot": pilot, "app": app, "factory": factory, "toasts": toasts}
                await scenario(**{name: given[name] for name in wanted}, **fixtures)

            run_pilot(app, play, size=size, toasts=toasts)

        # pytest reads the signature for fixtures: show it the scenario's, less the four above
        test.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [p for name, p in params.items() if name not in PILOT_ARGUMENTS]
        )
        for attr in ("__name__", "__qualname__", "__doc__", "__module__"):
            setattr(test, attr, getattr(scenario, attr))
        return test

    return wrap


def real_app(
    tmp_path: Path, preset: str = "tiny", overrides: list[str] = TINY
) -> tuple[CockpitApp, list[Trainer]]:
    """The app training the real engine (no telemetry thread); each run it starts is appended
    to the list, in its own directory under `tmp_path`."""
    made: list[Trainer] = []

    def factory(name: str) -> Trainer:
        cfg = load_preset(name, overrides)
        trainer = Trainer(cfg, run_dir=tmp_path / f"{name}-{len(made)}", telemetry=False)
        made.append(trainer)
        return trainer

    return CockpitApp(factory, preset), made


def alert_text(app: CockpitApp) -> str:
    return app.query_one(AlertLine).message


def status_text(app: CockpitApp) -> str:
    return str(app.main_screen.status_line.text.render())
