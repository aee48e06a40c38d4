"""`cockpit autopilot RUN_DIR --rules FILE`: rules that act on a live run, as a viewer of its
control socket. Every action is one of the run's own commands (set, scale_lr, set_lr,
checkpoint, rollback, pause, resume), so the journal credits it to `autopilot (rules FILE)` and
every attached viewer sees it."""

from __future__ import annotations

import argparse
import signal
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

NAME = "autopilot"
HELP = "act on a live run by rules: cool down on a plateau, checkpoint and lower the LR on a spike, ..."
EPILOG = textwrap.dedent(
    """\
    rules (TOML; see docs/guide/autopilot.md):
      [[rule]]
      when = "plateau"          # val loss not improved for `evals` evaluations
      evals = 3
      do = "cooldown"           # or "cooldown 200" (steps)
      [[rule]]
      when = "spike"
      do = ["checkpoint", "scale_lr 0.5"]
      [[rule]]
      when = "at"               # time = "02:00", after = "2h" or step = 5000
      time = "02:00"
      do = "set optim.lr=1e-4"

    examples:
      cockpit autopilot runs/tiny-0412 --rules night.toml
      cockpit autopilot runs/tiny-0412 --rules night.toml --dry-run

    Exit status: 0 the run ended or the autopilot was stopped (Ctrl-C, SIGTERM); 2 bad rules or
    no live run in RUN_DIR (one line says why).
    """
)
_POLL_S = 0.5  # how often the clock rules are looked at between events
_REFUSAL_CODES = ("set", "lr", "rollback", "socket")  # alerts that refuse a command


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("run_dir", metavar="RUN_DIR", help="the live run to act on")
    parser.add_argument("--rules", required=True, metavar="FILE", help="the rules, a TOML file")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="watch the run and print what the rules would do, sending nothing (a read-only viewer)",
    )


def run(args: argparse.Namespace) -> int:
    from cockpit.research.autopilot_rules import Autopilot, load_rules
    from engine.config import ConfigError
    from engine.control import EngineUnreachable, RemoteEngine

    try:
        rules = load_rules(Path(args.rules))
    except ConfigError as e:
        print(f"cockpit autopilot: {e}", file=sys.stderr)
        return 2
    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        print(
            f"cockpit autopilot: {run_dir}: no such run directory; `cockpit ps` lists the live runs",
            file=sys.stderr,
        )
        return 2
    who = f"autopilot (rules {args.rules})"
    # a stop asked for while the autopilot connects is kept for the loop, never a traceback
    stop = threading.Event()
    previous = {
        sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        try:
            engine = RemoteEngine(run_dir, who=who, read_only=args.dry_run)
        except EngineUnreachable as e:
            print(f"cockpit autopilot: {e}", file=sys.stderr)
            return 2
        pilot = Pilot(engine, Autopilot(rules, start=time.time()), who, args.dry_run)
        try:
            dry = " (dry run: nothing is sent)" if args.dry_run else ""
            print(
                f"autopilot: watching {run_dir} with {len(rules)} rules from {args.rules}{dry}",
                flush=True,
            )
            ended = pilot.follow(stop)
        finally:
            engine.close()
            if pilot.notes is not None:
                pilot.notes.close()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print(f"autopilot: {ended}", flush=True)
    return 0


class Pilot:
    """The loop: events from the run into the rules, the rules' actions out as commands (or, in
    a dry run, printed), each said in one line and sent as an `action` notice."""

    def __init__(self, engine: Any, autopilot: Any, who: str, dry_run: bool) -> None:
        self.engine = engine
        self.autopilot = autopilot
        self.who = who
        self.dry_run = dry_run
        self.preset = ""
        self.pending: dict[str, int] = {}  # alert code -> commands sent that it could refuse
        self.notes = _notifications(Path(engine.run_dir).name)

    def follow(self, stop: threading.Event) -> str:
        """Until the run ends (what it ended as) or `stop` is set (the autopilot stopped)."""
        from engine.events import RunStarted, RunState, StateChanged

        while not stop.is_set():
            self.engine.wait_for_events(_POLL_S)
            live_from = self.engine.replayed_until
            for event in self.engine.drain_events():
                if isinstance(event, RunStarted):
                    self.preset = event.preset
                    if self.notes is not None:
                        self.notes.preset = event.preset
                live = event.time > live_from  # the replay only informs the rules
                self._say_reply(event)
                for firing in self.autopilot.observe(event, live):
                    self._act(firing)
                if isinstance(event, StateChanged) and event.state in RunState.ENDED:
                    why = f": {event.reason}" if event.reason else ""
                    return f"the run {event.state} at step {event.step}{why}"
            for firing in self.autopilot.tick(time.time()):
                self._act(firing)
        return "stopped; the run goes on"

    def _act(self, firing: Any) -> None:
        from engine.rundir import action_notice

        what = ", ".join(action.text for action in firing.rule.actions)
        if self.dry_run:
            print(
                f"step {firing.step}: {firing.rule.name}: {firing.why}; would do: {what}",
                flush=True,
            )
            return
        print(f"step {firing.step}: {firing.rule.name}: {firing.why}; doing: {what}", flush=True)
        for action in firing.rule.actions:
            send = {
                "set": lambda a: self.engine.set_settings(a["settings"]),
                "scale_lr": lambda a: self.engine.scale_lr(a["factor"]),
                "set_lr": lambda a: self.engine.set_lr(a["lr"]),
                "rollback": lambda a: self.engine.rollback(a["lr_factor"]),
                "checkpoint": lambda a: self.engine.checkpoint(),
                "pause": lambda a: self.engine.pause(),
                "resume": lambda a: self.engine.resume(),
            }[action.command]
            code = {"set": "set", "rollback": "rollback", "scale_lr": "lr", "set_lr": "lr"}.get(
                action.command
            )
            if code is not None:
                self.pending[code] = self.pending.get(code, 0) + 1
            send(action.arguments)
        if self.notes is not None:
            self.notes.notify(
                action_notice(self.preset, firing.step, self.who, f"{firing.why}; {what}")
            )

    def _say_reply(self, event: Any) -> None:
        """The run's answer to a command this autopilot sent, in one line: taken or refused."""
        from engine.events import Alert, LrChanged, SettingsChanged

        if isinstance(event, SettingsChanged) and event.by.endswith(self.who):
            self.pending["set"] = max(0, self.pending.get("set", 0) - 1)
            changes = ", ".join(
                f"{key} {old} -> {new}" for key, (old, new) in event.changes.items()
            )
            print(f"step {event.step}: the run took it: {changes}", flush=True)
        elif isinstance(event, LrChanged):  # the wire does not say whose: the oldest waiting
            for code in ("lr", "rollback"):
                if self.pending.get(code, 0) > 0:
                    self.pending[code] -= 1
                    print(
                        f"step {event.step}: LR {event.old_lr:.3g} -> {event.new_lr:.3g}",
                        flush=True,
                    )
                    break
        elif not isinstance(event, Alert) or event.code not in _REFUSAL_CODES:
            return
        elif event.code == "socket":
            # this connection's own (a reply refusing, a line not sent); the run's line about
            # a viewer's mistake ("control socket: viewer N sent ...") may be another viewer's
            if not event.message.startswith("control socket:"):
                print(f"step {event.step}: {event.message}", flush=True)
        elif event.level != "info" and self.pending.get(event.code, 0) > 0:
            self.pending[event.code] -= 1
            print(f"step {event.step}: the run refused: {event.message}", flush=True)
        elif event.level == "info" and self.pending.get(event.code, 0) > 0:
            self.pending[event.code] -= 1  # "settings unchanged", "the LR it already has"
            print(f"step {event.step}: nothing to change: {event.message}", flush=True)


def _notifications(run: str) -> Any:
    """Where the autopilot's action notices go: the endpoints of the user's notify.toml and
    $COCKPIT_NOTIFY, as a run of this user sends its own; None when there are none (or they
    cannot be read: said in one line, the autopilot goes on)."""
    from cockpit.cli.launch import notify_endpoints
    from engine.config import ConfigError

    try:
        endpoints = notify_endpoints(argparse.Namespace(notify=None))
    except ConfigError as e:
        print(f"autopilot: no notices: {e}", file=sys.stderr)
        return None
    if not endpoints:
        return None
    from engine.rundir import Notifications

    return Notifications(
        endpoints, lambda message: print(f"autopilot: {message}", file=sys.stderr), run=run
    )
