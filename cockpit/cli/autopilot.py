"""`cockpit autopilot RUN_DIR --rules FILE` and/or `--llm URL --model NAME`: rules, and an
agent's proposals, that act on a live run as viewers of its control socket. Every action is one
of the run's own commands (set, scale_lr, set_lr, checkpoint, rollback, pause, resume), so the
journal credits it to `autopilot (rules FILE)` or `autopilot (llm MODEL)` and every attached
viewer sees it."""

from __future__ import annotations

import argparse
import re
import signal
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

from cockpit.cli.options import add_llm_arguments

NAME = "autopilot"
HELP = (
    "act on a live run by rules (cool down on a plateau, checkpoint and lower the LR on a "
    "spike, ...) and/or an LLM agent's proposals"
)
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

    an agent (--llm): at every evaluation (--every N evaluations, or --every 10m) it is shown
    the run's state and the live settings it may change, and proposes one action as JSON: a set
    of live settings, a checkpoint, a rollback, or none. You approve each on this terminal
    (y, n NOTE, e to edit), or --auto applies them unattended.

    examples:
      cockpit autopilot runs/tiny-0412 --rules night.toml
      cockpit autopilot runs/tiny-0412 --rules night.toml --dry-run
      cockpit autopilot runs/tiny-0412 --llm http://127.0.0.1:11434/v1 --model qwen2.5:7b
      cockpit autopilot runs/tiny-0412 --rules night.toml --llm URL --model NAME --auto --every 3

    Exit status: 0 the run ended or the autopilot was stopped (Ctrl-C, SIGTERM); 2 bad rules or
    options, or no live run in RUN_DIR (one line says why).
    """
)
_POLL_S = 0.5  # how often the clock rules are looked at between events
_REFUSAL_CODES = ("set", "lr", "rollback", "socket")  # alerts that refuse a command


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("run_dir", metavar="RUN_DIR", help="the live run to act on")
    parser.add_argument("--rules", metavar="FILE", help="the rules, a TOML file")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="watch the run and print what the rules (and the agent) would do, sending nothing "
        "(a read-only viewer)",
    )
    agent = parser.add_argument_group(
        "an agent that proposes (an OpenAI-compatible endpoint; pip install 'cockpit[agent]')"
    )
    add_llm_arguments(
        agent,
        "a chat completions endpoint proposes actions on the run, e.g. "
        "http://127.0.0.1:11434/v1 (Ollama); needs --model",
    )
    agent.add_argument(
        "--program",
        metavar="FILE.md",
        help="what the agent watches for and how it acts, in Markdown (default: a built-in one)",
    )
    agent.add_argument(
        "--every",
        metavar="N|DURATION",
        default="1",
        help="ask the agent at every Nth evaluation (default 1), or every DURATION (90s, 10m, 1h)",
    )
    agent.add_argument(
        "--keys",
        metavar="K1,K2",
        help="the only live settings the agent may set, e.g. optim.lr,schedule.cooldown "
        "(default: the live optimizer and schedule settings and train.grad_accum)",
    )
    agent.add_argument(
        "--auto",
        action="store_true",
        help="apply the agent's proposals unattended (without it, each is asked on this terminal)",
    )
    agent.add_argument(
        "--llm-timeout",
        type=float,
        default=120.0,
        metavar="S",
        help="seconds to wait for one answer (default 120: a local model on a CPU is slow)",
    )


def run(args: argparse.Namespace) -> int:
    from cockpit.research.autopilot_rules import Autopilot, load_rules
    from engine.config import ConfigError
    from engine.control import EngineUnreachable, RemoteEngine

    try:
        rules = load_rules(Path(args.rules)) if args.rules else None
        agent = make_agent(args)
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
    # a stop asked for while the autopilot connects is kept for the loop, never a traceback
    stop = threading.Event()
    previous = {
        sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)
    }
    pilots: list[Pilot] = []
    try:
        try:
            if rules is not None:  # the rules' connection first: their actions go first
                who = f"autopilot (rules {args.rules})"
                engine = RemoteEngine(run_dir, who=who, read_only=args.dry_run)
                pilots.append(Pilot(engine, Autopilot(rules, start=time.time()), who, args.dry_run))
            if agent is not None:
                who = f"autopilot (llm {args.model})"
                engine = RemoteEngine(run_dir, who=who, read_only=args.dry_run)
                pilots.append(AgentPilot(engine, agent, who, args))
        except EngineUnreachable as e:
            print(f"cockpit autopilot: {e}", file=sys.stderr)
            return 2
        dry = " (dry run: nothing is sent)" if args.dry_run else ""
        if rules is not None:
            print(
                f"autopilot: watching {run_dir} with {len(rules)} rules from {args.rules}{dry}",
                flush=True,
            )
        if agent is not None:
            how = "applied unattended" if args.auto else "each asked here first"
            if args.dry_run:
                how = "only printed"
            print(
                f"autopilot: watching {run_dir} with proposals from {args.model} at {agent.url} "
                f"({how}){dry if rules is None else ''}",
                flush=True,
            )
        ended = follow(pilots, stop)
    finally:
        for pilot in pilots:
            pilot.engine.close()
            if pilot.notes is not None:
                pilot.notes.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print(f"autopilot: {ended}", flush=True)
    return 0


def make_agent(args: argparse.Namespace) -> Any:
    """The --llm endpoint's client (None without --llm); ConfigError (one line) for options
    that cannot make one."""
    from engine.config import ConfigError

    if not args.llm:
        extra = [
            f"--{name.replace('_', '-')}"
            for name in ("model", "program", "keys", "auto")
            if getattr(args, name)
        ]
        if args.llm_key_env != "OPENAI_API_KEY":
            extra.append("--llm-key-env")
        if args.every != "1":
            extra.append("--every")
        if extra:
            raise ConfigError(f"{', '.join(extra)}: only with --llm URL")
        if not args.rules:
            raise ConfigError(
                "say what acts on the run: --rules FILE, --llm URL --model NAME, or both"
            )
        return None
    if not args.model:
        raise ConfigError(
            "--llm needs --model NAME, the model the endpoint serves (e.g. --model qwen2.5:7b)"
        )
    every(args.every)  # its mistakes before the terminal's
    if not (args.llm_timeout > 0 and args.llm_timeout < float("inf")):
        raise ConfigError(f"--llm-timeout {args.llm_timeout:g}: expected seconds above 0")
    if not args.auto and not args.dry_run and not sys.stdin.isatty():
        raise ConfigError(
            "--llm: each proposal is asked on this terminal and stdin is none; add --auto to "
            "apply them unattended (or --dry-run to only print them)"
        )
    from cockpit.research.live_agent import parse_live_keys
    from cockpit.research.llm_proposer import LLMProposer, load_program

    if args.keys:
        parse_live_keys(args.keys)
    if args.program:
        load_program(args.program)
    return LLMProposer(args.llm, args.model, key_env=args.llm_key_env, timeout_s=args.llm_timeout)


_EVERY = re.compile(r"(\d+(?:\.\d+)?)\s*([smh])")


def every(text: str) -> tuple[int, float]:
    """--every as (evaluations, 0) or (0, seconds); ConfigError (one line)."""
    from engine.config import ConfigError

    text = text.strip()
    if text.isdigit() and int(text) >= 1:
        return int(text), 0.0
    match = _EVERY.fullmatch(text)
    seconds = float(match.group(1)) * {"s": 1, "m": 60, "h": 3600}[match.group(2)] if match else 0
    if not seconds > 0:
        raise ConfigError(
            f"--every {text}: a number of evaluations (1 or more) or a duration with its unit, "
            "e.g. --every 3 or --every 10m"
        )
    return 0, seconds


def follow(pilots: list[Pilot], stop: threading.Event) -> str:
    """Each pilot in turn until the run ends (what it ended as) or `stop` is set."""
    wait = _POLL_S / len(pilots)
    while not stop.is_set():
        for pilot in pilots:
            ended = pilot.poll(wait)
            if ended is not None:
                return ended
    return "stopped; the run goes on"


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
        return follow([self], stop)

    def poll(self, wait: float) -> str | None:
        """The events of up to `wait` seconds, and the clock: how the run ended, or None."""
        from engine.events import RunStarted, RunState, StateChanged

        self.engine.wait_for_events(wait)
        live_from = self.engine.replayed_until
        for event in self.engine.drain_events():
            if isinstance(event, RunStarted):
                self.preset = event.preset
                if self.notes is not None:
                    self.notes.preset = event.preset
            self._say_reply(event)
            self.observe(event, event.time > live_from)  # the replay only informs
            if isinstance(event, StateChanged) and event.state in RunState.ENDED:
                why = f": {event.reason}" if event.reason else ""
                return f"the run {event.state} at step {event.step}{why}"
        self.tick()
        return None

    def observe(self, event: Any, live: bool) -> None:
        for firing in self.autopilot.observe(event, live):
            self._act(firing)

    def tick(self) -> None:
        for firing in self.autopilot.tick(time.time()):
            self._act(firing)

    def _act(self, firing: Any) -> None:
        what = ", ".join(action.text for action in firing.rule.actions)
        if self.dry_run:
            print(
                f"step {firing.step}: {firing.rule.name}: {firing.why}; would do: {what}",
                flush=True,
            )
            return
        print(f"step {firing.step}: {firing.rule.name}: {firing.why}; doing: {what}", flush=True)
        for action in firing.rule.actions:
            self._send(action)
        self._notify(firing.step, f"{firing.why}; {what}")

    def _send(self, action: Any) -> None:
        """One action (autopilot_rules.Action) as the run's command."""
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

    def _notify(self, step: int, what: str) -> None:
        from engine.rundir import action_notice

        if self.notes is not None:
            self.notes.notify(action_notice(self.preset, step, self.who, what))

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


class AgentPilot(Pilot):
    """The agent's loop over its own connection: at every Nth live evaluation (or interval) a
    round asks the endpoint, in a thread, for one action on the run's state; a valid one is
    applied (--auto), asked on the terminal (y, n NOTE, e), or printed (--dry-run)."""

    def __init__(self, engine: Any, agent: Any, who: str, args: argparse.Namespace) -> None:
        from cockpit.cli.approval_prompt import ApprovalPrompt
        from cockpit.research.live_agent import (
            DEFAULT_LIVE_PROGRAM,
            Rounds,
            RunWatch,
            live_keys,
            parse_live_keys,
        )
        from cockpit.research.llm_proposer import load_program
        from engine.rundir import METRICS_NAME, JournalTail

        super().__init__(engine, None, who, args.dry_run)
        self.agent = agent
        self.name = f"llm {args.model}"
        self.auto = args.auto
        self.program = load_program(args.program) if args.program else DEFAULT_LIVE_PROGRAM
        self.keys = parse_live_keys(args.keys) if args.keys else live_keys()
        self.evals, self.interval_s = every(args.every)
        self.watch = RunWatch()
        self.journal = JournalTail(Path(engine.run_dir) / METRICS_NAME)
        self.rounds = Rounds()
        self.live_evals = 0
        self.due = False
        self.last_round = time.monotonic()
        self.failing = ""  # the endpoint's failure, said once until it answers again
        self.notes_for_agent: list[str] = []
        self.prompt = ApprovalPrompt(self._apply, self._apply_edited, self.notes_for_agent.append)

    def observe(self, event: Any, live: bool) -> None:
        from engine.events import Eval

        self.watch.observe(event)
        if live and isinstance(event, Eval) and self.evals:
            self.live_evals += 1
            self.due = self.due or self.live_evals % self.evals == 0

    def tick(self) -> None:
        if self.interval_s and time.monotonic() - self.last_round >= self.interval_s:
            self.due = True
        outcome = self.rounds.result()
        if outcome is not None:
            # the next round from now on: evaluations during this one saw no action taken yet
            self.due, self.live_evals, self.last_round = False, 0, time.monotonic()
            self._outcome(outcome)
        if self.prompt.awaiting is not None:
            self.prompt.poll()
        if self.due and not self.rounds.busy and self.prompt.awaiting is None:
            self._start_round()

    def _start_round(self) -> None:
        from cockpit.research.live_agent import JOURNAL_SHOWN, consult, live_prompt

        watch = self.watch
        if watch.config is None:
            return  # no run_started yet: nothing to show the agent
        self.due = False
        self.last_round = time.monotonic()
        self.journal.poll()
        journal = [f"- step {e.step}: {e.line}" for e in self.journal.entries[-JOURNAL_SHOWN:]]
        messages = live_prompt(self.program, watch, self.keys, journal, self.notes_for_agent)
        cfg, step, checkpoint = watch.config, watch.step, watch.checkpoint_step is not None
        self.rounds.start(
            lambda: consult(self.agent.ask, messages, cfg, step, self.keys, checkpoint, _say)
        )

    def _outcome(self, outcome: Any) -> None:
        if outcome.failure:
            if outcome.failure != self.failing:
                failure = outcome.failure
                if failure == "gave no answer in time":
                    failure = f"{self.agent.url} gave no answer within {self.agent.timeout_s:g}s"
                print(
                    f"autopilot: warning: the agent: {failure}; no action, the run goes on "
                    "untouched (asked again at the next round)",
                    flush=True,
                )
            self.failing = outcome.failure
            return
        if self.failing:
            print(f"autopilot: the agent at {self.agent.url} answers again", flush=True)
            self.failing = ""
        action = outcome.action
        if action is None:
            return
        head = f"step {outcome.step}: {self.name}: {action.reason or '(no reason given)'}"
        if action.action == "none":
            print(f"{head}; does nothing", flush=True)
            return
        changes = f" ({action.changes})" if action.changes else ""
        if self.dry_run:
            print(f"{head}; would do: {action.text}{changes}", flush=True)
        elif self.auto:
            print(f"{head}; doing: {action.text}{changes}", flush=True)
            self._apply(action)
        else:
            print(f"{head}; proposes: {action.text}{changes}", flush=True)
            self.prompt.ask(action)

    def _apply(self, action: Any) -> None:
        from cockpit.research.autopilot_rules import Action

        arguments = {
            "set": {"settings": action.settings},
            "rollback": {"lr_factor": action.lr_factor},
        }.get(action.action, {})
        self._send(Action(action.action, arguments, action.text))
        self._notify(self.watch.step, f"{action.reason}; {action.text}")

    def _apply_edited(self, proposal: Any, action: Any) -> None:
        """The person's action (autopilot_rules.Action) in place of the agent's `proposal`."""
        self._send(action)
        self._notify(self.watch.step, f"{proposal.reason}; {action.text} (edited)")


def _say(line: str) -> None:
    print(line, flush=True)


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
