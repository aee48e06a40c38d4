"""The main screen alone, in a bare Textual app: it tells its app what happened by message
(up, a zoom) and never needs the cockpit app to draw its panels."""

from __future__ import annotations

import asyncio

from textual import on
from textual.app import App
from textual.message import Message

from cockpit.app.main_screen import STATUS_REFRESH_S, MainScreen


class Host(App[None]):
    """Only what any app gives a screen: it records the screen's messages."""

    def __init__(self) -> None:
        super().__init__()
        self.screen_under_test = MainScreen(id="_default")
        self.heard: list[type[Message]] = []

    def get_default_screen(self) -> MainScreen:
        return self.screen_under_test

    @on(MainScreen.Ready)
    @on(MainScreen.ZoomChanged)
    def _heard(self, message: Message) -> None:
        self.heard.append(type(message))


def test_the_screen_says_it_is_up() -> None:
    asyncio.run(_test_the_screen_says_it_is_up())


async def _test_the_screen_says_it_is_up() -> None:
    app = Host()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert app.heard[:1] == [MainScreen.Ready]
        assert MainScreen.ZoomChanged not in app.heard


def test_zooming_a_panel_in_and_out_is_told_each_time() -> None:
    asyncio.run(_test_zooming_a_panel_in_and_out_is_told_each_time())


async def _test_zooming_a_panel_in_and_out_is_told_each_time() -> None:
    app = Host()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen_under_test
        screen.zoom_panel("lr")
        await pilot.pause()
        assert screen.maximized is screen.lr_panel
        screen.zoom_panel("lr")
        await pilot.pause()
        assert screen.maximized is None
        assert app.heard.count(MainScreen.ZoomChanged) == 2


def test_the_status_counters_redraw_at_once_when_urgent_else_about_once_a_second() -> None:
    asyncio.run(_test_the_status_counters_redraw_at_once_when_urgent_else_about_once_a_second())


async def _test_the_status_counters_redraw_at_once_when_urgent_else_about_once_a_second() -> None:
    app = Host()
    async with app.run_test(size=(120, 40)):
        screen = app.screen_under_test
        assert screen.status_due(100.0, urgent=False) is True  # never drawn yet
        assert screen.status_due(100.2, urgent=False) is False
        assert screen.status_due(100.3, urgent=True) is True
        assert screen.status_due(100.5, urgent=False) is False
        later = 100.3 + STATUS_REFRESH_S * screen.load.factor + 0.01
        assert screen.status_due(later, urgent=False) is True
        assert screen.preparing_corpus is False  # no corpus being prepared: nothing shown


def test_the_screen_imports_nothing_of_the_app() -> None:
    """It talks to its app by message only: no import of the app's modules, not even for types."""
    import ast
    import inspect

    import cockpit.app.main_screen as module

    imported = set()
    for node in ast.walk(ast.parse(inspect.getsource(module))):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
        elif isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
    assert not {name for name in imported if name.startswith("cockpit.app")}, imported
