"""Who may use `cockpit serve`'s page: whoever has its token, from this machine's loopback.

A real headless run, a real `cockpit serve` in front of it on a real port, real HTTP and
websocket clients (aiohttp's): without the token, with a wrong Host (DNS rebinding) or another
site's Origin (a cross-site websocket) the page and its terminal are refused with 403; with the
URL serve printed the page loads, its terminal steers the run, and the journal says the command
came from a browser tab of serve. A second user (uid 65534, the test runs as root as CI does)
without the token gets no viewer on the run.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from live_process import LiveRun
from serve_process import kill_serve, start_serve, wait_until

from engine.control.live_runs import probe

aiohttp = pytest.importorskip("aiohttp")
pytest.importorskip("textual_serve")

TIMEOUT_S = 60.0
NOBODY = 65534
URL = re.compile(r"(http://127\.0\.0\.1:(\d+)/\?token=([A-Za-z0-9_-]+))")


@dataclass
class Served:
    run: LiveRun
    serve: subprocess.Popen[str]
    port: int
    url: str  # as serve printed it
    token: str

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, isolated_env: dict[str, str]
) -> Iterator[Served]:
    """A live tiny run and `cockpit serve` in front of it (serve_process.start_serve)."""
    with pytest.MonkeyPatch.context() as env:  # as tests/conftest.py's autouse fixture does
        for name, value in isolated_env.items():
            env.setenv(name, value)
        run = LiveRun(tmp_path_factory.mktemp("serve") / "run", "checkpoint.interval=1000000")
        try:
            run.start()
            serve, url = start_serve(run.run_dir)
            try:
                found = URL.fullmatch(url)
                assert found, url
                yield Served(run, serve, int(found[2]), url, found[3])
            finally:
                kill_serve(serve)
        finally:
            run.close()


def viewers(run_dir: Path) -> list[dict[str, Any]]:
    live = probe(run_dir)
    assert live is not None, "the run is not live"
    return live.viewers


def no_viewer_stays(run_dir: Path) -> None:
    """No viewer is attached, once the socket has let go of the last probe's connection (a
    probe is a viewer until the server reads its close: a moment longer on a loaded machine)."""
    wait_until(lambda: viewers(run_dir) == [], "no viewer attached", timeout_s=5)


async def status_of(url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as response:
        return response.status, await response.text()


async def websocket_status(url: str, headers: dict[str, str] | None = None) -> int:
    """101 (as 101) when the terminal's websocket opens, else the refusal's status."""
    async with aiohttp.ClientSession() as session:
        try:
            async with session.ws_connect(url, headers=headers):
                return 101
        except aiohttp.WSServerHandshakeError as e:
            return e.status


def test_the_printed_url_carries_a_random_token_kept_off_command_lines(served: Served) -> None:
    assert served.url == f"http://127.0.0.1:{served.port}/?token={served.token}"
    assert len(served.token) >= 43  # 32 random bytes
    cmdline = Path(f"/proc/{served.serve.pid}/cmdline").read_bytes()  # what every user's ps reads
    assert served.token.encode() not in cmdline


@pytest.mark.parametrize("path", ["/", "/static/js/textual.js", "/download/x", "/ws"])
@pytest.mark.parametrize("token", [None, "wrong"])
def test_without_the_token_nothing_is_served(served: Served, path: str, token: str | None) -> None:
    query = "" if token is None else f"?token={token}"
    status, text = asyncio.run(status_of(f"{served.origin}{path}{query}"))
    assert status == 403
    assert text.startswith("cockpit serve: this page needs its token: open the URL")


@pytest.mark.parametrize(
    "headers, reason",
    [
        ({"Host": "evil.example:{port}"}, "is not this machine's loopback"),  # DNS rebinding
        ({"Origin": "http://evil.example"}, "from another site"),
        ({"Origin": "http://127.0.0.1:1"}, "from another site"),
        ({"Origin": "null"}, "from another site"),
    ],
)
def test_another_host_or_origin_is_refused_even_with_the_token(
    served: Served, headers: dict[str, str], reason: str
) -> None:
    headers = {name: value.format(port=served.port) for name, value in headers.items()}
    status, text = asyncio.run(status_of(served.url, headers))
    assert status == 403 and reason in text
    ws_url = f"ws://127.0.0.1:{served.port}/ws?token={served.token}"
    assert asyncio.run(websocket_status(ws_url, headers)) == 403
    no_viewer_stays(served.run.run_dir)


def test_with_the_url_the_page_loads_and_its_terminal_steers_the_run(served: Served) -> None:
    run = served.run
    who, screen, tab_process = asyncio.run(pause_and_resume_through_the_page(served))
    assert "RUNNING" in screen
    # the command's record names the tab for what it is: not "(no tty)"
    assert who.endswith("(browser via cockpit serve)"), who
    paused = run.wait_for_record("state", TIMEOUT_S, state="paused")
    assert paused  # the space from the page paused the run, the second one resumed it
    wait_until(lambda: probe(run.run_dir).state == "running", "the run resumed")
    # the tab's own process: no token on its command line nor in its environment
    assert served.token not in tab_process["cmdline"] and served.token not in tab_process["environ"]
    wait_until(lambda: viewers(run.run_dir) == [], "the tab's viewer to leave")


async def pause_and_resume_through_the_page(served: Served) -> tuple[str, str, dict[str, str]]:
    """As a browser: the printed URL (the cookie it sets), then the terminal's websocket with
    that cookie only, as the page's script opens it; space, space. Returns the `who` of the
    pause's record, the screen so far and the tab's process's command line and environment."""
    run = served.run
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as session:
        async with session.get(served.url) as response:
            assert response.status == 200
            page = await response.text()
            cookie = response.cookies[f"cockpit-serve-{served.port}"]
            assert response.headers["Referrer-Policy"] == "no-referrer"  # the token stays here
        assert (
            cookie.value == served.token and cookie["httponly"] and cookie["samesite"] == "Strict"
        )
        ws_url = f"ws://127.0.0.1:{served.port}/ws"
        assert f'data-session-websocket-url="{ws_url}"' in page
        async with session.ws_connect(f"{ws_url}?width=120&height=40", origin=served.origin) as ws:
            screen = await read_until(ws, "RUNNING")
            tab = await asyncio.to_thread(tab_process_of, served.serve.pid)
            await ws.send_json(["stdin", " "])
            pause = await asyncio.to_thread(run.wait_for_record, "command", TIMEOUT_S, name="pause")
            await asyncio.to_thread(run.wait_for_record, "state", TIMEOUT_S, state="paused")
            await ws.send_json(["stdin", " "])
            await asyncio.to_thread(run.wait_for_record, "command", TIMEOUT_S, name="resume")
    return pause["who"], screen, tab


async def read_until(ws: Any, word: str) -> str:
    """The terminal's output (escape sequences and all) until `word` is in it."""
    screen = ""
    async with asyncio.timeout(TIMEOUT_S):
        while word not in screen:
            message = await ws.receive()
            if message.type == aiohttp.WSMsgType.BINARY:
                screen += message.data.decode("utf-8", "replace")
            elif message.type != aiohttp.WSMsgType.TEXT:
                raise AssertionError(
                    f"the terminal closed before showing {word!r}: {screen[-500:]}"
                )
    return screen


def tab_process_of(serve_pid: int) -> dict[str, str]:
    """The command line and environment of the tab's `cockpit attach` (serve's one child)."""
    children = Path(f"/proc/{serve_pid}/task/{serve_pid}/children").read_text().split()
    assert len(children) == 1, children
    proc = Path("/proc") / children[0]
    return {
        "cmdline": proc.joinpath("cmdline").read_bytes().decode(errors="replace"),
        "environ": proc.joinpath("environ").read_bytes().decode(errors="replace"),
    }


def test_the_page_connects_back_to_the_host_and_port_the_browser_named(served: Served) -> None:
    """The page's terminal connects to the host the browser named (a tunnel's own name and port),
    not to the server's 127.0.0.1: a cookie set for localhost would not go there."""
    localhost_url = served.url.replace("127.0.0.1", "localhost")
    status, page = asyncio.run(status_of(localhost_url))
    assert status == 200
    assert f'data-session-websocket-url="ws://localhost:{served.port}/ws"' in page
    # the near end of `ssh -L 9000:127.0.0.1:PORT`: the browser names port 9000
    status, page = asyncio.run(status_of(served.url, {"Host": "127.0.0.1:9000"}))
    assert status == 200 and 'data-session-websocket-url="ws://127.0.0.1:9000/ws"' in page


# what uid 65534 runs: the same websocket a page of another site would open, with and without
# naming the server; it prints each attempt's status (101: it got a terminal on root's run)
ANOTHER_USER = r"""
import asyncio, json, os, sys
import aiohttp
os.setgroups([])
os.setgid(int(sys.argv[2]))
os.setuid(int(sys.argv[2]))

async def attempt(headers):
    async with aiohttp.ClientSession() as session:
        try:
            async with session.ws_connect(sys.argv[1], headers=headers) as ws:
                await ws.send_json(["stdin", " "])  # space: pause
                await asyncio.sleep(3)
                await ws.send_json(["stdin", "s"])
                return 101
        except aiohttp.WSServerHandshakeError as e:
            return e.status

async def main():
    evil = {"Origin": "http://evil.example", "Host": "evil.example"}
    return [await attempt(evil), await attempt({})]

print(json.dumps({"uid": os.getuid(), "statuses": asyncio.run(main())}))
"""


def test_another_user_without_the_token_cannot_steer_the_run(served: Served) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root, to connect as a second user (uid 65534)")
    run = served.run
    before = len(run.records("command"))
    ws_url = f"ws://127.0.0.1:{served.port}/ws?width=80&height=24"
    done = subprocess.run(
        [sys.executable, "-c", ANOTHER_USER, ws_url, str(NOBODY)],
        capture_output=True, text=True, timeout=TIMEOUT_S,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result == {"uid": NOBODY, "statuses": [403, 403]}
    no_viewer_stays(run.run_dir)
    assert len(run.records("command")) == before  # nothing reached the run
    assert probe(run.run_dir).state == "running"
