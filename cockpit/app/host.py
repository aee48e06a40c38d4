"""What the app gives its composed parts: the session, the screen, toasts, dialogs and timers.

`CockpitApp` satisfies `Host`; the parts' tests build them on a small fake of it.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol

from textual import Logger
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.timer import Timer

from cockpit.app.main_screen import MainScreen
from cockpit.app.session import Session
from engine.events import RunStarted


class Host(Protocol):
    session: Session
    main_screen: MainScreen
    clock: Callable[[], float]  # the wall clock events are stamped with
    sub_title: str

    @property
    def log(self) -> Logger: ...

    @property
    def screen(self) -> Screen[Any]: ...

    @property
    def is_headless(self) -> bool: ...

    @property
    def is_running(self) -> bool: ...

    @property
    def screen_stack(self) -> list[Screen[Any]]: ...

    def batch_update(self) -> AbstractContextManager[None]: ...

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = True,
    ) -> None: ...

    def push_screen(self, screen: Any, callback: Any = None) -> Any: ...

    async def push_screen_wait(self, screen: Any) -> Any: ...

    def set_interval(
        self, interval: float, callback: Callable[[], Any], *, name: str | None = None
    ) -> Timer: ...

    def set_timer(self, delay: float, callback: Callable[[], Any]) -> Timer: ...

    def run_worker(self, work: Any, *, thread: bool = ..., group: str = ..., exclusive: bool = ...,
                   exit_on_error: bool = ...) -> Any: ...  # fmt: skip

    def call_from_thread(self, callback: Callable[..., Any], *args: Any) -> Any: ...

    def exit(self) -> None: ...

    def can_draw(self) -> bool: ...

    def refresh_status(self) -> None: ...

    def refresh_offers(self) -> None: ...

    def start_run(self, preset: str, make: Any = None) -> None: ...

    def leaving_series_note(self) -> str: ...

    def retitle(self, ev: RunStarted) -> None: ...

    def exit_summary(self) -> list[Any]: ...
