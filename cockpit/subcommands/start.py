"""`cockpit start` (and `cockpit --detach`): a run in the background that outlives the terminal.

The engine runs as `cockpit train --headless` in a process of its own session (no controlling
terminal: closing the SSH connection does not signal it), writing its progress lines to
RUN_DIR/engine.log. Once its control socket answers, the app attaches to it, unless told not to
(or there is no terminal): leaving the app then detaches, and the run goes on.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

NAME = "start"
HELP = "start a run in the background (it survives the terminal closing) and attach to it"
EPILOG = (
    "Takes the options of `cockpit train`. The run's progress lines go to RUN_DIR/engine.log; "
    "`cockpit attach RUN_DIR` comes back to it, `cockpit ps` lists the live runs."
)
LOG_NAME = "engine.log"
POLL_S = 0.1  # how often the start looks at the engine while it comes up


class StartError(Exception):
    """The engine did not come up; the text is one line (exit status 1)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from cockpit.subcommands.options import add_run_options

    parser.epilog = EPILOG
    add_run_options(parser, headless=False)
    parser.add_argument(
        "--no-attach", action="store_true", help="print the run directory and return: do not open the app"
    )


def run(args: argparse.Namespace) -> int:
    from cockpit.cli import preflight
    from engine.config import ConfigError

    try:
        finished = preflight(args)  # every refusal before anything starts: one line, exit 2
        if finished is not None:
            print(finished)
            return 0
        run_dir = planned_run_dir(args)
    except ConfigError as e:
        print(f"cockpit: {e}", file=sys.stderr)
        return 2
    try:
        process = spawn_engine(args, run_dir)
        wait_until_served(process, run_dir)
    except StartError as e:
        print(f"cockpit start: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(
            f"\ncockpit start: stopped waiting; the run goes on in {run_dir} (pid "
            f"{process.pid}): `cockpit attach {shlex.quote(str(run_dir))}`",
            file=sys.stderr,
        )
        return 0
    print(started_report(run_dir, process.pid))
    from cockpit.subcommands.attach import AttachError, attach, has_terminal

    if args.no_attach or not has_terminal():
        return 0
    try:
        return attach(run_dir, mouse=not args.no_mouse)
    except AttachError as e:  # it ended (or was killed) before the app connected
        print(f"cockpit attach: {e}", file=sys.stderr)
        return 1


def planned_run_dir(args: argparse.Namespace) -> Path:
    """Where the run will be: the resumed run's directory, --run-dir, or a new default one."""
    if args.resume:
        resume = Path(args.resume)
        return resume if resume.is_dir() else resume.parent
    if args.run_dir:
        return Path(args.run_dir)
    from engine.presets import DEFAULT_PRESET, load_preset
    from engine.run_dir import default_run_dir

    cfg = load_preset(args.preset or DEFAULT_PRESET, args.overrides, args.presets_dir)
    path = default_run_dir(cfg)
    while path.exists():  # two starts in the same second: the second gets its own directory
        time.sleep(1.0)
        path = default_run_dir(cfg)
    return path


def engine_argv(args: argparse.Namespace, run_dir: Path) -> list[str]:
    """`cockpit train --headless` with the run's own options (none of the app's)."""
    argv = [sys.executable, "-m", "cockpit", "train", "--headless"]
    if args.resume:
        argv += ["--resume", str(args.resume)]
    else:
        argv += ["--run-dir", str(run_dir)]
        if args.preset:
            argv += ["--preset", args.preset]
    if args.data:
        argv += ["--data", args.data]
    if args.allow_data_change:
        argv.append("--allow-data-change")
    for override in args.overrides:  # --tensorboard is one of them by now
        argv += ["--set", override]
    for folder in args.presets_dir:
        argv += ["--presets-dir", folder]
    if args.no_telemetry:
        argv.append("--no-telemetry")
    return argv


def spawn_engine(args: argparse.Namespace, run_dir: Path) -> subprocess.Popen[bytes]:
    """The engine in a new session (no terminal, no SIGHUP), its output in RUN_DIR/engine.log."""
    from engine.config import ConfigError
    from engine.run_dir import create_run_dir

    try:
        create_run_dir(run_dir)
    except ConfigError as e:
        raise StartError(str(e)) from None
    log = open(run_dir / LOG_NAME, "ab")  # noqa: SIM115 - the child holds it; closed below
    try:
        return subprocess.Popen(
            engine_argv(args, run_dir),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    except OSError as e:
        raise StartError(f"could not start the engine process: {e}") from None
    finally:
        log.close()


def wait_until_served(process: subprocess.Popen[bytes], run_dir: Path) -> None:
    """Until the run's control socket answers; StartError with the log's last line if the
    engine ended first. On a terminal, the log's newest line shows what it is doing."""
    from engine.live_runs import probe

    log = run_dir / LOG_NAME
    shown = ""
    while True:
        if probe(run_dir, timeout_s=1.0) is not None:
            break
        if process.poll() is not None:
            _clear_line(shown)
            last = last_log_line(log) or "no output"
            raise StartError(
                f"the run ended before it was served (exit {process.returncode}): {last} "
                f"(full log: {log})"
            )
        if sys.stderr.isatty():
            line = (last_log_line(log) or "starting...")[:100]
            if line != shown:
                _clear_line(shown)
                sys.stderr.write(f"\r{line}")
                sys.stderr.flush()
                shown = line
        time.sleep(POLL_S)
    _clear_line(shown)


def _clear_line(shown: str) -> None:
    if shown:
        sys.stderr.write("\r" + " " * len(shown) + "\r")
        sys.stderr.flush()


def last_log_line(path: Path) -> str:
    """The last non-empty line of the engine's log ("" when there is none yet)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 4096))
            tail = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    if lines and lines[-1].startswith("cockpit: "):
        return lines[-1].removeprefix("cockpit: ")
    return lines[-1] if lines else ""


def started_report(run_dir: Path, pid: int) -> str:
    return "\n".join(
        [
            f"started in the background (pid {pid}): {run_dir}",
            f"  log:    {run_dir / LOG_NAME}",
            f"  attach: cockpit attach {shlex.quote(str(run_dir))}",
            f"  stop:   q in an attached cockpit, then s (or: kill -TERM {pid})",
        ]
    )
