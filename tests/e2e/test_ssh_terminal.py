"""The terminals an SSH login gives: a dumb one (TERM=dumb: an editor's shell) and one without a
UTF-8 locale (tmux started under POSIX draws braille and borders as `_` and `q`). One rule says
whether the app can be drawn, for `cockpit`, `cockpit attach` and `cockpit start`; the glyph
check warns once, in the app."""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from tiny import set_args, tiny_overrides
from tmux_driver import TMUX_INSTALLED, Tmux
from warm_pane import pane_command

from cockpit.cli.terminal import NoApp, glyph_problem, no_app_reason
from engine.control.live_runs import find_live_runs

PY = shlex.quote(sys.executable)
LONG = shlex.join(["--no-telemetry", *set_args(tiny_overrides("train.max_steps=1000000"))])
needs_tmux = pytest.mark.skipif(not TMUX_INSTALLED, reason="tmux is not installed")


def test_one_rule_says_whether_the_app_can_be_drawn_and_why_not() -> None:
    xterm = {"TERM": "xterm-256color"}
    assert no_app_reason(True, True, xterm) is None
    assert no_app_reason(False, True, xterm) == NoApp("no terminal", "run it in a terminal")
    dumb = no_app_reason(True, True, {"TERM": "dumb"})
    assert dumb is not None and dumb.reason == "a dumb terminal (TERM=dumb)"
    assert "TERM=xterm-256color" in dumb.fix
    assert "no key could reach the app" in no_app_reason(True, False, xterm).reason
    # textual-serve's web page draws the app with Textual's own driver: no terminal needed
    assert no_app_reason(False, False, {"TERM": "dumb", "TEXTUAL_DRIVER": "web"}) is None


def test_the_glyph_check_warns_where_braille_and_borders_cannot_be_shown() -> None:
    assert glyph_problem("utf-8", None) is None
    assert glyph_problem("utf-8", "1") is None
    inside_tmux = glyph_problem("utf-8", "0")  # Python writes UTF-8; tmux's client cannot show it
    assert inside_tmux is not None and "tmux -u" in inside_tmux and "LANG=C.UTF-8" in inside_tmux
    latin = glyph_problem("iso8859-1", None)
    assert latin is not None and "LANG=C.UTF-8" in latin and "iso8859-1" in latin
    assert inside_tmux.isascii() and latin.isascii()  # readable where the glyphs are not


def test_a_browser_viewer_is_not_warned_about_the_terminal_of_cockpit_serve(monkeypatch) -> None:
    from cockpit.cli import terminal

    monkeypatch.setattr(terminal, "tmux_client_utf8", lambda: "0")  # serve runs in such a tmux
    assert terminal.glyph_problem_here() is not None
    monkeypatch.setenv("TEXTUAL_DRIVER", "textual_serve.driver:WebDriver")  # the page draws it
    assert terminal.glyph_problem_here() is None


def run_in(term: str, command: str, tmp_path: Path, name: str) -> tuple[Tmux, Path]:
    """`command` in a tmux pane whose TERM is `term`; its exit status goes to a file."""
    status = tmp_path / f"{name}.status"
    # exported in the pane: tmux sets its own TERM (default-terminal) over new-session's -e
    line = f"export TERM={term}; cd {shlex.quote(str(tmp_path))} && {command}; echo $? > {shlex.quote(str(status))}; sleep 60"
    return Tmux(line, 120, 36), status


def wait_for_file(path: Path, timeout_s: float = 60) -> str:
    deadline = time.monotonic() + timeout_s
    while not path.exists() or not path.read_text().strip():
        assert time.monotonic() < deadline, f"{path.name} never written"
        time.sleep(0.1)
    return path.read_text().strip()


def flat(text: str) -> str:
    """The screen without whitespace: a long line wraps at the pane's width."""
    return "".join(text.split())


@needs_tmux
def test_a_dumb_terminal_is_named_as_such_by_cockpit_start_and_attach(tmp_path: Path) -> None:
    """On TERM=dumb `cockpit` said "no terminal" and ran headless, while `cockpit attach` and
    `cockpit start` drew the full app in 24-bit colour: now all three say "a dumb terminal"."""
    pids: list[int] = []
    try:
        term, status = run_in(
            "dumb",
            pane_command(["-m", "cockpit", "start", "--preset", "tiny", *LONG.split()]),
            tmp_path,
            "start",
        )
        with term:
            assert wait_for_file(status) == "0", term.screen()
            screen = flat(term.screen())
            assert "startedinthebackground" in screen, term.screen()
            assert (
                flat("cockpit start: a dumb terminal (TERM=dumb): not opening the app;") in screen
            )
            assert "RUNNING" not in screen
        runs = find_live_runs(tmp_path / "runs")
        pids = [r.pid for r in runs if r.pid is not None]
        assert len(runs) == 1
        attach = pane_command(["-m", "cockpit", "attach", str(runs[0].run_dir)])
        term, status = run_in("dumb", attach, tmp_path, "attach")
        with term:
            assert wait_for_file(status) == "2", term.screen()
            screen = flat(term.screen())
            assert (
                flat("cockpit attach: a dumb terminal (TERM=dumb): cannot open the app here;")
                in screen
            )
            assert "TERM=xterm-256color" in screen and "RUNNING" not in screen
        tiny = set_args(tiny_overrides("train.max_steps=3"))
        app = pane_command(["-m", "cockpit", "--preset", "tiny", "--run-dir", "r", *tiny])
        term, status = run_in("dumb", app, tmp_path, "app")
        with term:
            assert wait_for_file(status) == "0", term.screen()
            screen = flat(term.screen())
            assert flat("cockpit: a dumb terminal (TERM=dumb), running headless") in screen, (
                term.screen()
            )
            assert "finishedatstep3" in screen and "noterminal" not in screen
    finally:
        for pid in pids:
            subprocess.run(["kill", "-9", str(pid)], capture_output=True)


@needs_tmux
def test_tmux_without_a_utf8_locale_gets_one_warning_in_the_app(tmp_path: Path) -> None:
    """tmux started under the POSIX locale (an SSH login without LANG) draws the app's braille and
    borders as `_` and `q`: the app says so once, in ASCII, with the fixes."""
    inner = f"cockpit-e2e-inner-{uuid.uuid4().hex[:8]}"
    app = f"{PY} -m cockpit --preset tiny --run-dir {shlex.quote(str(tmp_path / 'r'))} {LONG}"
    command = (
        # as a fresh SSH login: no locale, and not inside a tmux (a nested one assumes UTF-8)
        f"env -u LANG -u LC_ALL -u LC_CTYPE -u TMUX tmux -L {inner} -f /dev/null "
        f"new-session {shlex.quote(app)}"
    )
    try:
        with Tmux(command, 120, 36) as term:
            term.wait_for("RUNNING", timeout=60)
            deadline = time.monotonic() + 20
            while "tmux-u" not in flat(term.screen()) and time.monotonic() < deadline:
                time.sleep(0.2)
            screen = flat(term.screen())
            assert "tmux-u" in screen and "LANG=C.UTF-8" in screen, term.screen()
            assert "qqqq" in screen  # the scene: tmux draws the borders as q
    finally:
        subprocess.run(["tmux", "-L", inner, "kill-server"], capture_output=True)
