"""`cockpit serve [RUN_DIR]`: the cockpit of a live run in a web browser (textual-serve).

Each browser tab runs `cockpit attach RUN_DIR`: a viewer of the run over its control socket.
The server listens on 127.0.0.1, which every local user and any web page can reach, so, as
Jupyter does, it prints a URL with a random token and refuses (403) a request without it, one
whose Host is not loopback (DNS rebinding) and one whose Origin is another site's.
"""

from __future__ import annotations

import argparse
import hmac
import os
import re
import secrets
import shlex
import sys
import time
from pathlib import Path
from typing import Any

NAME = "serve"
HELP = "serve the cockpit of a live run to a web browser (on 127.0.0.1; an SSH tunnel reaches it)"
EPILOG = (
    "Without RUN_DIR: the newest live run under runs/. It prints the page's URL with a random "
    "token; a request without it, naming another host or from another site's page is refused "
    "(403). Every browser tab is a viewer of that run (`cockpit attach`); closing a tab leaves "
    "the run alone. Needs textual-serve: pip install 'cockpit[serve]'."
)
DEFAULT_ROOT = "runs"
DEFAULT_PORT = 8000
HOST = "127.0.0.1"  # never another interface: the page steers the run, and has no login
TAB_GRACE_S = 1.5  # once serving stops: how long tabs have to leave on their own (ctrl+c)...
TAB_LEAVE_S = 5.0  # ...then to leave when asked, before they are killed
TOKEN_PARAM = "token"  # the URL's query parameter that carries the token
# the names a browser on this machine (or at the near end of an SSH tunnel, any port) uses
LOOPBACK_HOST = re.compile(r"(127\.0\.0\.1|localhost|\[::1\])(:[0-9]{1,5})?", re.IGNORECASE)
TAB_LABEL = "browser via cockpit serve"  # who a tab's viewer is in the journal and `ps`


class ServeError(Exception):
    """A one-line reason why there is nothing to serve; exit status 2."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.add_argument(
        "run_dir", nargs="?", metavar="RUN_DIR",
        help="the live run's directory (default: the newest live run under runs/)",
    )  # fmt: skip
    parser.add_argument(
        "--port", default=str(DEFAULT_PORT), metavar="N",
        help=f"the port on {HOST} to listen on (default: {DEFAULT_PORT})",
    )  # fmt: skip
    parser.add_argument(
        "--read-only", action="store_true",
        help="every tab only watches: its keys cannot change the run (for sharing the page)",
    )  # fmt: skip
    parser.add_argument(
        "--runs", default=DEFAULT_ROOT, metavar="DIR",
        help="where to look for live runs without RUN_DIR (default: runs)",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    try:
        port = parse_port(args.port)
        server_class = load_textual_serve()
        check_port_free(port)
        live = find_run(Path(args.run_dir) if args.run_dir else None, Path(args.runs))
        token = new_token()
        server = server_class(
            attach_command(live.run_dir, read_only=args.read_only),
            token=token,
            host=HOST,
            port=port,
            title=f"cockpit: {live.run_dir.name}",
        )
        print(serving_report(live, port, token, read_only=args.read_only), flush=True)
        server.serve()
    except ServeError as e:
        print(f"cockpit serve: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # before the server's own ctrl+c handler is in place
        pass
    print("cockpit serve: stopped serving; the run goes on", file=sys.stderr)
    return 0


def parse_port(text: str) -> int:
    """--port as a number from 1 to 65535 (0, "any free port", would give a page that cannot
    find its way back: the URL it loads the terminal from names the port)."""
    example = f"e.g. --port {DEFAULT_PORT}"
    try:
        port = int(text)
    except ValueError:
        raise ServeError(f"--port {text}: not a port number; {example}") from None
    if not 1 <= port <= 65535:
        raise ServeError(f"--port {text}: a port is a number from 1 to 65535; {example}")
    return port


def load_textual_serve() -> Any:
    """The server class: quiet (this command prints its own lines, not textual-serve's banner
    nor a log line per request), every request through `guard`, and the page's own URLs on the
    host the browser named (through a tunnel: its port, not the server's)."""
    try:
        import aiohttp_jinja2
        from aiohttp import web
        from textual_serve.server import Server, to_int
    except ImportError:
        raise ServeError(
            "textual-serve is not installed; install it with: pip install 'cockpit[serve]'"
        ) from None

    class GuardedServer(Server):
        def __init__(self, command: str, *, token: str, **options: Any) -> None:
            super().__init__(command, **options)
            self.token = token

        def initialize_logging(self) -> None:
            import logging

            logging.basicConfig(level=logging.WARNING, format="cockpit serve: %(message)s")

        async def _make_app(self) -> web.Application:
            app = await super()._make_app()
            app.middlewares.append(guard(self.token, cookie_name(self.port)))
            return app

        async def handle_index(self, request: web.Request) -> web.Response:
            host = request.host  # the guard let it through: this machine's loopback
            context = {
                "font_size": to_int(request.query.get("fontsize", "16"), 16),
                "app_websocket_url": f"ws://{host}/ws",
                "config": {"static": {"url": "/static/"}},
                "application": {"name": self.title},
            }
            return aiohttp_jinja2.render_template("app_index.html", request, context)

        async def on_startup(self, app: Any) -> None:
            pass

        async def on_shutdown(self, app: Any) -> None:
            await end_tab_processes()

    return GuardedServer


def guard(token: str, cookie: str) -> Any:
    """The aiohttp middleware in front of every route (the page, its static files, downloads,
    the terminal's websocket): 403 with the reason for a request `refusal` refuses; a request
    whose URL carries the token gets it as a cookie, for the page's own requests, which don't."""
    from aiohttp import web

    @web.middleware
    async def guarded(request: web.Request, handler: Any) -> web.StreamResponse:
        from_url = request.query.get(TOKEN_PARAM)
        reason = refusal(
            request.headers.get("Host"),
            request.headers.get("Origin"),
            (from_url, request.cookies.get(cookie)),
            token,
        )
        if reason is not None:
            return web.Response(status=403, text=f"cockpit serve: {reason}\n")
        response = await handler(request)
        if response.prepared:  # a websocket's reply: sent already
            return response
        # the page loads a font from another site: its URL, token and all, is not to go there
        response.headers["Referrer-Policy"] = "no-referrer"
        if from_url is not None:
            # the page's scripts may not read it (HttpOnly), other sites' pages may not send it
            response.set_cookie(cookie, token, path="/", httponly=True, samesite="Strict")
        return response

    return guarded


def new_token() -> str:
    """A fresh secret for one `serve`: 256 bits, URL-safe."""
    return secrets.token_urlsafe(32)


def cookie_name(port: int) -> str:
    """Cookies ignore ports: one name per port, so two serves on one machine keep both tokens."""
    return f"cockpit-serve-{port}"


def page_url(port: int, token: str) -> str:
    return f"http://{HOST}:{port}/?{TOKEN_PARAM}={token}"


def refusal(
    host: str | None, origin: str | None, presented: tuple[str | None, ...], token: str
) -> str | None:
    """Why a request is refused, or None to serve it: its Host must name this machine's
    loopback (a DNS-rebound name is another site's page), its Origin, if any, must be the page
    it asks (another site's page may open a websocket anywhere), and one of the tokens
    `presented` (the URL's, the cookie's) must be the token."""
    if not is_loopback_host(host):
        return f"Host {host!r} is not this machine's loopback; open the URL serve printed"
    if origin is not None and origin.lower() != f"http://{host}".lower():
        return f"a request from another site ({origin!r}) is refused"
    if not any(is_token(given, token) for given in presented):
        return "this page needs its token: open the URL `cockpit serve` printed (...?token=...)"
    return None


def is_loopback_host(host: str | None) -> bool:
    """A Host header naming 127.0.0.1, localhost or [::1], with any port (an SSH tunnel's near
    end may use another)."""
    return host is not None and LOOPBACK_HOST.fullmatch(host) is not None


def is_token(given: str | None, token: str) -> bool:
    """`given` is the token, compared in constant time (no timing tells how much matched)."""
    if given is None:
        return False
    return hmac.compare_digest(given.encode("utf-8", "replace"), token.encode())


async def end_tab_processes() -> None:
    """Every tab's `cockpit attach` gone while the server's event loop still runs, which reaps
    them and closes their pipes (once it has closed, that ends in "Event loop is closed"
    tracebacks). ctrl+c reached them already (one process group); the others are asked once,
    after a grace period: a second signal to a process on its way out prints a traceback."""
    import psutil

    tabs = psutil.Process().children()  # the shell of each tab's command exec'd `cockpit attach`
    if await _gone(tabs, TAB_GRACE_S):
        return
    for tab in tabs:
        _signal(tab, "terminate")  # SIGTERM: the viewer detaches
    if await _gone(tabs, TAB_LEAVE_S):
        return
    for tab in tabs:
        _signal(tab, "kill")
    await _gone(tabs, TAB_LEAVE_S)


async def _gone(processes: list[Any], timeout_s: float) -> bool:
    """Wait until every process is reaped (by the loop's child watcher), at most `timeout_s`."""
    import asyncio

    deadline = time.monotonic() + timeout_s
    while any(_running(p) for p in processes):
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.05)  # the watcher's callbacks close their pipes
    return True


def _signal(process: Any, how: str) -> None:
    import psutil

    try:
        getattr(process, how)()
    except psutil.NoSuchProcess:
        pass


def _running(process: Any) -> bool:
    """Not yet reaped (a zombie is waiting for the loop's watcher: still to wait for)."""
    import psutil

    try:
        return process.is_running()
    except psutil.NoSuchProcess:
        return False


def find_run(run_dir: Path | None, root: Path) -> Any:
    """The live run to serve: `run_dir`'s, or the newest under `root` (an engine LiveRun)."""
    from engine.control import find_live_runs, probe

    if run_dir is not None:
        if not run_dir.is_dir():
            raise ServeError(f"{run_dir}: no such run directory; `cockpit ps` lists the live runs")
        live = probe(run_dir)
        if live is None:
            raise ServeError(f"no live run in {run_dir}; {how_to_start(run_dir)}, then serve it")
        return live
    if not root.is_dir():
        raise ServeError(f"no {root}/ here to look for live runs; name one: cockpit serve RUN_DIR")
    runs = find_live_runs(root)
    if not runs:
        raise ServeError(
            f"no live run under {root}/; start one with `cockpit start` (or resume one: "
            "`cockpit start --resume RUN_DIR`), or name one: cockpit serve RUN_DIR"
        )
    return runs[0]


def how_to_start(run_dir: Path) -> str:
    """The command that makes `run_dir` live: a resume where it holds checkpoints."""
    from engine.checkpoint import latest_checkpoint

    quoted = shlex.quote(str(run_dir))
    if latest_checkpoint(run_dir) is not None:
        return f"resume it with `cockpit start --resume {quoted}`"
    return f"start a run there with `cockpit start --run-dir {quoted}`"


def check_port_free(port: int) -> None:
    """Refuse a port something already listens on, before anything is printed as served."""
    import errno
    import socket

    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server will bind it
    try:
        probe.bind((HOST, port))
    except OSError as e:
        if e.errno == errno.EADDRINUSE:
            raise ServeError(
                f"port {port} on {HOST} is in use; pick another: --port {free_port_hint(port)}"
            ) from None
        if e.errno == errno.EACCES:
            raise ServeError(
                f"port {port} needs more privileges than this user has; use a port above "
                f"1023, e.g. --port {DEFAULT_PORT}"
            ) from None
        raise ServeError(
            f"cannot listen on {HOST}:{port} ({e.strerror}); try another --port"
        ) from None
    finally:
        probe.close()


def free_port_hint(taken: int) -> int:
    """A port after `taken` that is free now (to suggest), or `taken + 1`."""
    import socket

    for port in range(taken + 1, min(taken + 50, 65535) + 1):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((HOST, port))
            except OSError:
                continue
            return port
    return min(taken + 1, 65535)


def attach_command(run_dir: Path, *, read_only: bool) -> str:
    """The shell command textual-serve runs for each tab: this interpreter's `cockpit attach`,
    which tells the run it is a browser tab of serve (COCKPIT_VIA: it has no terminal to name).
    Nothing secret: every local user can read it (ps).

    ctrl+c in serve's terminal reaches the tabs' processes too (one process group): ignored
    until the app is up (Python then installs no KeyboardInterrupt, so a tab opening at that
    moment prints no traceback); once up, Textual's web driver takes SIGINT as "leave"."""
    argv = [sys.executable, "-m", "cockpit", "attach", str(run_dir.resolve())]
    if read_only:
        argv.append("--read-only")
    return f"trap '' INT; COCKPIT_VIA={shlex.quote(TAB_LABEL)} exec {shlex.join(argv)}"


def serving_report(live: Any, port: int, token: str, *, read_only: bool) -> str:
    """What is served where, and how to reach it from a laptop."""
    url = page_url(port, token)
    what = ", ".join(part for part in (live.preset, live.state, f"step {live.step:,}") if part)
    tabs = "a read-only viewer" if read_only else "a viewer (its keys steer the run)"
    return "\n".join(
        [
            f"cockpit serve: {live.run_dir} ({what}) at {url}",
            f"  each browser tab is {tabs}; closing a tab leaves the run alone",
            "  the token is the page's key: without it the page is refused; share it as the run",
            f"  from another machine: ssh -L {port}:{HOST}:{port} {ssh_destination()}, "
            "then open that URL",
            "  ctrl+c stops serving; the run goes on",
        ]
    )


def ssh_destination() -> str:
    """user@host for the tunnel: this session's SSH server address when there is one (what
    the laptop already reaches), else this machine's name."""
    import getpass
    import socket

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "USER"
    connection = os.environ.get("SSH_CONNECTION", "").split()
    host = connection[2] if len(connection) == 4 else socket.gethostname()
    return f"{user}@{host}"
