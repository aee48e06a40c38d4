"""`cockpit start` (and `cockpit --detach`): a run in the background that outlives the terminal.

The engine runs as `cockpit train --headless` in a session of its own (closing SSH does not
signal it), logging to RUN_DIR/engine.log; once its socket answers the app attaches, unless told
not to. With `--nproc N` the process is torchrun (`--standalone`) starting N ranks on this machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from engine.config import ConfigError

NAME = "start"
HELP = "start a run in the background (it survives the terminal closing) and attach to it"
EPILOG = (
    "Takes the options of `cockpit train`. The run's progress lines go to RUN_DIR/engine.log; "
    "`cockpit attach RUN_DIR` comes back to it, `cockpit ps` lists the live runs."
)
LOG_NAME = "engine.log"
POLL_S = 0.1  # how often the start looks at the engine while it comes up
# torchrun waits this long for the ranks to checkpoint and end after a SIGTERM before it kills
# them (its own default is 30 s: too short to save a large model); a value set by the user wins
SHUTDOWN_TIMEOUT_S = "300"


class StartError(Exception):
    """The engine did not come up; the text is one line (exit status 1)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from cockpit.cli.options import add_run_options

    parser.epilog = EPILOG
    add_run_options(parser, headless=False)
    parser.add_argument(
        "--no-attach", action="store_true", help="print the run directory and return: do not open the app"
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the started run as JSON (run_dir, pid, log, nproc) and return, for scripts "
        "and agents: implies --no-attach",
    )
    parser.add_argument(
        "--nproc",
        default="1",
        metavar="N|auto",
        help="train with N processes on this machine under torchrun (one per GPU); auto: one per "
        "visible GPU (default: 1, no torchrun)",
    )


def run(args: argparse.Namespace) -> int:
    from cockpit.cli.launch import notify_endpoints
    from cockpit.cli.preflight import preflight

    try:
        nproc = parse_nproc(args.nproc)
        finished = preflight(args)  # every refusal before anything starts: one line, exit 2
        notify_endpoints(args)  # a malformed notify.toml or --notify
        if finished is not None:
            print(json.dumps({"started": False, "message": finished}) if args.json else finished)
            return 0
        if nproc == "auto":
            nproc = auto_nproc()
        if nproc > 1:
            check_world(args, nproc)
        run_dir = planned_run_dir(args)
    except ConfigError as e:
        print(f"cockpit: {e}", file=sys.stderr)
        return 2
    try:
        process = spawn_engine(args, run_dir, nproc)
        wait_until_served(process, run_dir, nproc)
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
    from cockpit.cli.attach import AttachError, attach
    from cockpit.cli.options import notify_settings
    from cockpit.cli.terminal import no_app_here

    if args.json:
        print(json.dumps(started_json(run_dir, process.pid, nproc)))
        return 0
    why = None if args.no_attach else no_app_here()
    # With the app opened, this report is still on the terminal when the app's own exit
    # report comes, maybe after the run ended: the pid to kill is named only without the app.
    print(started_report(run_dir, process.pid, nproc, kill=args.no_attach or why is not None))
    if args.no_attach:
        return 0
    if why is not None:  # the run goes on; the line above says how to watch it
        print(f"cockpit start: {why.reason}: not opening the app; {why.fix} to watch the run", file=sys.stderr)
        return 0
    try:
        return attach(run_dir, mouse=not args.no_mouse, notify=notify_settings(args))
    except AttachError as e:  # it ended (or was killed) before the app connected
        print(f"cockpit attach: {e}", file=sys.stderr)
        return 1


def parse_nproc(text: str) -> int | str:
    """--nproc as a count of processes, or "auto" (resolved once the command line is checked)."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise ConfigError(
            f"--nproc {text}: give a number of processes of 1 or more, or auto (one per visible GPU)"
        )
    return count


def visible_gpus() -> int:
    """CUDA devices this process may use (CUDA_VISIBLE_DEVICES applies). torch is imported here
    only, so the command line stays quick for every other subcommand."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def auto_nproc() -> int:
    """--nproc auto: one process per visible GPU; one without GPUs (and it says so)."""
    gpus = visible_gpus()
    if gpus <= 1:
        seen = "no GPU" if gpus == 0 else "one GPU"
        print(
            f"cockpit: --nproc auto: {seen} visible, so one process (no torchrun)", file=sys.stderr
        )
    return max(gpus, 1)


def run_config(args: argparse.Namespace) -> Any:
    """The config the run will train with: the preset and --set, or the resumed checkpoint's
    with --set applied (None if the checkpoint cannot be read: the run itself says why)."""
    if not args.resume:
        from engine.config import DEFAULT_PRESET, load_preset

        return load_preset(args.preset or DEFAULT_PRESET, args.overrides, args.presets_dir)
    from engine.checkpoint import CheckpointError, load_checkpoint, plan_resume
    try:  # memory-mapped: the weights are not read
        state = load_checkpoint(Path(args.resume), mmap=True)
    except CheckpointError:
        return None
    return plan_resume(state, args.overrides, state["_path"], label=args.resume).config


def check_world(args: argparse.Namespace, nproc: int) -> None:
    """Refuse (ConfigError) what the ranks would refuse at once: a grad_accum they cannot share,
    a parallel mode the optimizer cannot train in, more ranks than GPUs for a CUDA run."""
    from engine.distributed import World, parallel_plan

    cfg = run_config(args)
    if cfg is None:
        return
    try:
        parallel_plan(cfg, World(rank=0, world_size=nproc))
    except ConfigError as e:
        raise ConfigError(f"--nproc {nproc}: {e}") from None
    if cfg.train.device == "auto" or cfg.train.device.startswith("cuda"):
        gpus = visible_gpus()  # none: an auto run trains on the CPU, with as many processes
        if gpus and nproc > gpus:
            raise ConfigError(
                f"--nproc {nproc} but {gpus} GPU(s) visible: each rank takes a GPU of its own; "
                f"use --nproc {gpus} (or --nproc auto)"
            )


def planned_run_dir(args: argparse.Namespace) -> Path:
    """Where the run will be: the resumed run's directory, --run-dir, or a new default one,
    made now (a name taken, by a start in the same second or a planted link, gives way to the
    next free one) and handed to the engine as its --run-dir."""
    if args.resume:
        resume = Path(args.resume)
        return resume if resume.is_dir() else resume.parent
    if args.run_dir:
        return Path(args.run_dir)
    from engine.config import DEFAULT_PRESET, load_preset
    from engine.rundir import create_default_run_dir

    cfg = load_preset(args.preset or DEFAULT_PRESET, args.overrides, args.presets_dir)
    return create_default_run_dir(cfg)


def engine_argv(args: argparse.Namespace, run_dir: Path, nproc: int = 1) -> list[str]:
    """`cockpit train --headless` with the run's own options (none of the app's); under
    torch's launcher for more than one process."""
    argv = [sys.executable, "-m"]
    if nproc > 1:
        argv += ["torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc), "-m"]
    argv += ["cockpit", "train", "--headless"]
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


def spawn_engine(
    args: argparse.Namespace, run_dir: Path, nproc: int = 1
) -> subprocess.Popen[bytes]:
    """The engine in a new session (no terminal, no SIGHUP), its output in RUN_DIR/engine.log
    (torchrun's and every rank's, for more than one process)."""
    from cockpit.cli.launch import NOTIFY_ENV
    from engine.files import open_for_append
    from engine.rundir import check_run_dir, create_run_dir

    try:  # a resumed run's directory is checked (the engine checks it again), a new one made
        if args.resume:
            check_run_dir(run_dir)
        else:
            create_run_dir(run_dir)
    except ConfigError as e:
        raise StartError(str(e)) from None
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if args.notify:  # in its environment, not on its command line (`ps` shows that to all)
        env[NOTIFY_ENV] = "\n".join(filter(None, [env.get(NOTIFY_ENV, ""), *args.notify]))
    if nproc > 1:
        env.setdefault("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", SHUTDOWN_TIMEOUT_S)
    try:  # never through a link planted at its name
        log = open_for_append(run_dir / LOG_NAME)  # the child holds it; closed below
    except ConfigError as e:
        raise StartError(str(e)) from None
    try:
        return subprocess.Popen(
            engine_argv(args, run_dir, nproc),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
    except OSError as e:
        raise StartError(f"could not start the engine process: {e}") from None
    finally:
        log.close()


def wait_until_served(process: subprocess.Popen[bytes], run_dir: Path, nproc: int = 1) -> None:
    """Until the run's control socket answers; StartError with the log's last line (under
    torchrun: a rank's error, not the launcher's report) if the engine ended first. On a
    terminal, the log's newest line shows what it is doing."""
    from engine.control import probe

    log = run_dir / LOG_NAME
    shown = ""
    while True:
        if probe(run_dir, timeout_s=1.0) is not None:
            break
        if process.poll() is not None:
            _clear_line(shown)
            last = (rank_error_line(log) if nproc > 1 else "") or last_log_line(log) or "no output"
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


def rank_error_line(path: Path) -> str:
    """A rank's own error in a torchrun log ("" when there is none): torchrun's report of the
    failure comes after it and names only exit codes."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 65536))
            tail = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    for line in (line.strip() for line in tail.splitlines()):
        if line.startswith(("error: ", "cockpit: ", "[rank ")):
            return line.removeprefix("cockpit: ").removeprefix("error: ")
    return ""


def started_json(run_dir: Path, pid: int, nproc: int = 1) -> dict[str, object]:
    """What `cockpit start --json` prints once the run serves: where it is (absolute: usable from
    any directory, as `cockpit ps --json` gives it) and what to signal."""
    where = Path(os.path.abspath(run_dir))
    return {
        "started": True,
        "run_dir": str(where),
        "pid": pid,
        "nproc": nproc,
        "log": str(where / LOG_NAME),
    }


def started_report(run_dir: Path, pid: int, nproc: int = 1, kill: bool = True) -> str:
    """What `cockpit start` prints once the run serves; `kill`: the stop line names the pid
    (not when the app opens next: its exit report may come after the process is gone)."""
    what = f"torchrun, {nproc} processes, " if nproc > 1 else ""
    stop = f"kill -TERM {pid}" + (": torchrun passes it to every rank" if nproc > 1 else "")
    also = f" (or: {stop})" if kill else ""
    return "\n".join(
        [
            f"started in the background ({what}pid {pid}): {run_dir}",
            f"  log:    {run_dir / LOG_NAME}",
            f"  attach: cockpit attach {shlex.quote(str(run_dir))}",
            f"  stop:   q in an attached cockpit, then s{also}",
        ]
    )
