"""`cockpit serve` in a real browser: Debian's chromium, headless, driven by Playwright.

A real headless run; `cockpit serve RUN_DIR` in front of it; the page shows the run, space in
the page pauses it, closing the page leaves it running, ctrl+c stops serving and not the run.

textual-serve's page draws the terminal on a canvas (xterm.js), so there is no text in the DOM
to read: the test serves the page's script with one change, the xterm.js terminal it creates
also kept as `window.cockpitTerminal`, and reads the terminal's screen buffer from it.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from live_process import LiveRun
from serve_process import kill_serve, start_serve, wait_until

from engine.control.live_runs import probe

CHROMIUM = shutil.which("chromium")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="chromium is not installed (apt-get install chromium; .ci/run installs it)",
)

TIMEOUT_S = 30.0
# the one line of textual-serve's textual.js that creates the terminal
TERMINAL_CREATED = re.compile(r"this\.terminal=new (\w+)\.Terminal\(")
READ_SCREEN = """() => {
    const term = window.cockpitTerminal;
    if (!term) return "";
    const buffer = term.buffer.active, rows = [];
    for (let y = 0; y < buffer.length; y++) rows.push(buffer.getLine(y).translateToString(true));
    return rows.join("\\n");
}"""


def viewers(run_dir: Path) -> int | None:
    """How many viewers the live run has (besides this probe); None when it is not live."""
    live = probe(run_dir)
    return None if live is None else len(live.viewers)


@pytest.fixture
def live_run(tmp_path: Path) -> Iterator[LiveRun]:
    run = LiveRun(tmp_path / "run")
    try:
        yield run.start()
    finally:
        run.close()


@pytest.fixture
def served(live_run: LiveRun) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """`cockpit serve RUN_DIR` and the URL it printed (serve_process.start_serve)."""
    serve, url = start_serve(live_run.run_dir)
    try:
        yield serve, url
    finally:
        kill_serve(serve)


def open_page(browser: Any, url: str) -> Any:
    page = browser.new_page(viewport={"width": 1200, "height": 800})
    page.route("**/static/js/textual.js", keep_terminal)
    page.goto(url)
    return page


def keep_terminal(route: Any) -> None:
    """textual-serve's script, its xterm.js terminal also kept as window.cockpitTerminal."""
    response = route.fetch()
    script, found = TERMINAL_CREATED.subn(
        r"this.terminal=window.cockpitTerminal=new \1.Terminal(", response.text()
    )
    assert found == 1, "textual-serve's textual.js changed: update TERMINAL_CREATED"
    route.fulfill(response=response, body=script)


def screen_showing(page: Any, *words: str) -> str:
    """The terminal's text once every word is on it."""

    def shown() -> str:
        text = page.evaluate(READ_SCREEN)
        return text if all(w in text for w in words) else ""

    return wait_until(shown, f"{words} on the page")


def test_the_page_shows_and_steers_the_run_and_leaving_it_leaves_the_run(
    live_run: LiveRun, served: tuple[subprocess.Popen[str], str]
) -> None:
    from playwright.sync_api import sync_playwright

    serve, url = served
    run_dir = live_run.run_dir
    with sync_playwright() as playwright:
        # --no-sandbox: chromium's sandbox refuses to run as root (CI, containers)
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            refused = browser.new_page().goto(url.partition("?")[0])  # the URL without its token
            assert refused.status == 403 and "needs its token" in refused.text()
            page = open_page(browser, url)
            screen = screen_showing(page, "tiny", "RUNNING")
            status = next(line for line in screen.splitlines() if "RUNNING" in line)
            assert "tiny" in status and "step" in status
            assert viewers(run_dir) == 1  # the tab's `cockpit attach`, a viewer: not a run

            page.evaluate("() => window.cockpitTerminal.focus()")
            page.keyboard.press("Space")
            live_run.wait_for_record("state", TIMEOUT_S, state="paused")
            pause = live_run.wait_for_record("command", TIMEOUT_S, name="pause")
            assert pause["who"].endswith("(browser via cockpit serve)"), pause  # not "(no tty)"
            screen_showing(page, "PAUSED")
            page.keyboard.press("Space")
            wait_until(lambda: probe(run_dir).state == "running", "the run resumed")

            page.close()  # the tab's viewer detaches; the run goes on
            wait_until(lambda: viewers(run_dir) == 0, "the tab's viewer to leave")
            assert live_run.steps_grow(by=10, timeout_s=TIMEOUT_S)

            open_page(browser, url)  # a tab still open when the server is stopped
            wait_until(lambda: viewers(run_dir) == 1, "a second tab's viewer")
            os.killpg(serve.pid, signal.SIGINT)  # ctrl+c in a terminal reaches the whole group
            output = serve.communicate(timeout=TIMEOUT_S)[0]
        finally:
            browser.close()
    assert serve.returncode == 0, output
    assert "Traceback" not in output, output
    assert "stopped serving; the run goes on" in output
    wait_until(lambda: viewers(run_dir) == 0, "the viewers to leave with the server")
    assert live_run.steps_grow(by=10, timeout_s=TIMEOUT_S)
