"""The `cockpit` command: the app by default, `train --headless` for batch jobs, `presets`.

Every user error ends as one line on stderr and exit status 2; no traceback reaches a user.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

from cockpit.cli.headless import ProgressPrinter, RankErrorPrinter
from cockpit.cli.options import add_run_options, notify_settings
from cockpit.cli.preset_fit import preset_fit_warning
from cockpit.cli.stop_signals import StopSignals, exit_when_ended, signal_reason
from engine.config import DEFAULT_PRESET, ConfigError, parse_override


def build_parser() -> argparse.ArgumentParser:
    from cockpit.cli.subcommands import MODULES

    parser = argparse.ArgumentParser(
        prog="cockpit",
        description="Train small GPT models and steer the run from the terminal.",
        epilog="Run `cockpit` alone to open the app on the default preset; `cockpit train --headless` for batch jobs.",
    )
    parser.add_argument("--version", action="version", version=f"cockpit {cockpit_version()}")
    sub = parser.add_subparsers(
        dest="command", metavar="COMMAND", help="what to do (default: train)"
    )
    add_run_options(sub.add_parser("train", help="train a preset (the app, or --headless)"))
    for module in MODULES:
        module.add_arguments(sub.add_parser(module.NAME, help=module.HELP, description=module.HELP))
    return parser


def cockpit_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("cockpit")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def parse_args(argv: list[str]) -> argparse.Namespace:
    from cockpit.cli.subcommands import BY_NAME

    # `cockpit --preset x` is `cockpit train --preset x`: training is the default command.
    commands = ("train", *BY_NAME, "-h", "--help", "--version")
    if not argv or argv[0] not in commands:
        argv = ["train", *argv]
    if argv[0] == "train" and "--detach" in argv:  # `cockpit --detach ...` is `cockpit start ...`
        argv = ["start", *(a for a in argv[1:] if a != "--detach")]
    args = build_parser().parse_args(argv)
    if args.command in ("train", "start") and args.tensorboard:
        args.overrides.append("log.tensorboard=true")
    return args


def make_trainer(
    args: argparse.Namespace,
    preset: str | None = None,
    *,
    first: bool = True,
    sinks: list[Any] = (),
    interactive: bool = True,
) -> Any:
    """Build a (not yet started) Trainer from the command line; `preset` overrides --preset.

    --set, --run-dir and --resume apply to the run named on the command line only, not to
    presets picked later from the app's menu; --data goes with its preset (`data_for`).
    """
    from engine.config import load_preset
    from engine.train import Trainer

    name = preset or args.preset or DEFAULT_PRESET
    resume = args.resume if first else None
    overrides = args.overrides if first else []
    # When resuming, the checkpoint's config is the base and --set applies on top of it.
    cfg = load_preset(name, [] if resume else overrides, args.presets_dir)
    return Trainer(
        cfg,
        run_dir=args.run_dir if first else None,
        data_path=data_for(args, name, first),
        resume=resume,
        resume_overrides=overrides if resume else (),
        sinks=sinks,
        telemetry=not args.no_telemetry,
        interactive=interactive,
        allow_data_change=args.allow_data_change if first else False,
    )


def run_headless(args: argparse.Namespace, signals: StopSignals | None = None) -> int:
    if signals is None:
        signals = StopSignals()
        signals.install()
    rank = torchrun_rank()
    printer = ProgressPrinter() if rank == 0 else RankErrorPrinter(rank)
    trainer = make_trainer(args, sinks=[printer], interactive=False)
    signals.attach(trainer)
    state = trainer.run()
    refusal = getattr(printer, "refusal", None)
    if state == "failed" and refusal:  # refused before training started: as preflight's are
        print(f"cockpit: {refusal}", file=sys.stderr)
        return 2
    if state == "failed":
        return 1  # the reason is printed and is the final state record's
    return 0


def data_for(args: argparse.Namespace, preset: str, first: bool = False) -> str | None:
    """The corpus a run of `preset` trains on from the command line's --data: the first run's,
    and the same preset's when it is picked again from the menu (the user's copy of its corpus,
    a local Tiny Shakespeare say, not a download); no other preset's (a --resume's --data is
    where that run's corpus is now: its run only)."""
    if first:
        return args.data
    named = not args.resume and preset == (args.preset or DEFAULT_PRESET)
    return args.data if named else None


def menu_data_check(args: argparse.Namespace, preset: str) -> tuple[bool, str, bool]:
    """(ok, note, stand-in) of a preset picked from the app's menu, with the data a pick of it
    trains on (`data_for`)."""
    from engine.config import load_preset
    from engine.data import data_available, is_stand_in_corpus

    try:
        cfg = load_preset(preset, [], args.presets_dir)
    except ConfigError as e:
        return False, str(e), False
    data = data_for(args, preset)
    return (*data_available(cfg.data, data), is_stand_in_corpus(cfg.data, data))


def resume_trainer(args: argparse.Namespace, target: str, overrides: Sequence[str]) -> Any:
    """A run resumed from `target` (a run directory or a checkpoint) inside the app, checked as
    `cockpit --resume TARGET --set ...` is: a ConfigError (one line) when refused, ResumeFinished
    when it is already at its max_steps. The app's --data and --run-dir are not applied."""
    from engine.checkpoint import ResumeFinished

    resumed = argparse.Namespace(
        **{**vars(args), "resume": target, "overrides": list(overrides), "run_dir": None,
           "data": None, "allow_data_change": False, "preset": None}  # fmt: skip
    )
    finished = preflight(resumed)
    if finished is not None:
        raise ResumeFinished(finished)
    return make_trainer(resumed, interactive=True)


def train_arguments(**changes: Any) -> argparse.Namespace:
    """`cockpit train`'s options at their defaults, with `changes` (for commands that open the
    app without them: compare)."""
    args = parse_args(["train"])
    for name, value in changes.items():
        setattr(args, name, value)
    return args


def run_app(
    args: argparse.Namespace,
    signals: StopSignals | None = None,
    *,
    first_engine: Any = None,
    overlays: Sequence[str] = (),
    runs_root: str = "runs",
) -> int:
    """The app on the run the command line names, or on `first_engine()` (an engine handle:
    a run opened by `cockpit compare`), with `overlays` drawn over its loss curve."""
    from cockpit.app.cockpit_app import CockpitApp, run_app
    from cockpit.app.session_runs import format_exit_report
    def fit_warning(preset: str, known_peak: tuple[str, float] | None) -> str:
        return preset_fit_warning(preset, args.presets_dir, known_peak)

    first = [True]

    def factory(preset: str) -> Any:
        if first[0] and first_engine is not None:
            first[0] = False
            return first_engine()
        trainer = make_trainer(args, preset, first=first[0])
        first[0] = False
        return trainer

    app = CockpitApp(
        factory,
        args.preset or DEFAULT_PRESET,
        preset_dirs=args.presets_dir,
        data_available=partial(menu_data_check, args),
        fit_warning=fit_warning,
        notify=notify_settings(args),
        resume_factory=partial(resume_trainer, args),
        runs_root=runs_root,
        overlays=overlays,
    )

    def on_signal(signum: int, _frame: Any) -> None:
        # SIGHUP: the terminal is gone (the SSH link dropped); SIGTERM: a scheduler wants the
        # machine. Either way: checkpoint, stop and exit, as a confirmed quit does. With no
        # terminal left, restoring it can block forever, so once the run has ended the process
        # leaves on its own after a grace period.
        # The run records the signal as its reason (the quit that follows asks too late).
        trainer = app.trainer
        if trainer is not None:
            trainer.stop(checkpoint=True, reason=signal_reason(signum))
        if signum == getattr(signal, "SIGHUP", None):
            grace = 0.5
        else:
            app.call_later(app._quit_answer, True)
            grace = 10.0
        threading.Thread(target=exit_when_ended, args=(trainer, grace), daemon=True).start()

    for sig in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if sig is not None:
            signal.signal(sig, on_signal)
    if signals is not None:
        signals.restore(only=(signal.SIGINT,))  # in the app ctrl+c is a key: it asks, like q
        if signals.received:  # before the app was up: no run has started, nothing to save
            name = signal.Signals(signals.received[0]).name
            print(f"cockpit: {name} before the app started: no run was started", file=sys.stderr)
            return 0
    run_app(app, mouse=not args.no_mouse)
    # The terminal is restored: say where the run is and how to pick it up again.
    runs = app.exit_summary()
    print(format_exit_report(runs, forced=app.quit_forced))
    lost = app.quit_forced and bool(runs) and runs[-1].unsaved_steps > 0
    return 1 if lost else 0


def check_resume(args: argparse.Namespace) -> str | None:
    """Check a resume before anything starts, so a refusal is exit 2 with nothing touched: the
    checkpoint reads, --run-dir is not given, and every --set is one a resume may apply
    (engine/checkpoint/resume.py, the rules the run itself follows). Returns the message to print when
    the run is already finished."""
    from engine.checkpoint import plan_resume
    from engine.checkpoint import store as ckpt
    if args.run_dir:
        raise ConfigError(
            f"--run-dir {args.run_dir} with --resume {args.resume}: a resumed run continues in its "
            "own directory; drop --run-dir (to branch a run, copy its directory and resume the copy)"
        )
    try:  # memory-mapped: the weights are not read
        state = ckpt.load_checkpoint(Path(args.resume), mmap=True)
    except ckpt.CheckpointError as e:
        raise ConfigError(str(e)) from None
    plan = plan_resume(state, args.overrides, state["_path"], label=args.resume)
    check_log_packages(plan.config)
    return plan.finished


def check_run_dir_free(run_dir: Path) -> None:
    """A run directory a live engine holds: one line and exit 2, before anything is touched
    (a resume from an older checkpoint would otherwise move that run's newer checkpoints)."""
    from engine.rundir import check_not_in_use

    check_not_in_use(run_dir)


def check_corpus_exists(cfg: Any, data_path: str | None) -> None:
    """A corpus path that names nothing usable (missing, no text files in the folder): one line
    and exit 2 before anything starts. What is inside is read by the run (a bad record there is
    the run's failure, with the same one line); Tiny Shakespeare may still be downloaded."""
    if cfg.data.source == "tinyshakespeare" and data_path is None:
        return
    from engine.data import DataError, resolve_source

    try:
        resolve_source(cfg.data, data_path, download=False)
    except DataError as e:
        raise ConfigError(str(e)) from None


def check_log_packages(cfg: Any) -> None:
    """`[log]` sinks whose package is missing: one line and exit 2, before anything starts."""
    if cfg.log.tensorboard:
        from engine.rundir import summary_writer_class

        summary_writer_class()


def check_resume_corpus(args: argparse.Namespace) -> None:
    """Refuse a resume whose corpus is gone or changed before anything starts (exit 2)."""
    from engine.checkpoint import store as ckpt
    from engine.config import config_from_dict
    from engine.data import DataError, resume_data_path

    try:  # memory-mapped: the weights are not read
        state = ckpt.load_checkpoint(Path(args.resume), mmap=True)
        cfg = config_from_dict(state["config"], source=state["_path"])
    except (ckpt.CheckpointError, ConfigError):
        return  # check_resume (or the run itself) says what is wrong with this checkpoint
    try:
        resume_data_path(state, cfg.data, args.data, args.allow_data_change)
    except DataError as e:  # refused, or --data names nothing usable
        raise ConfigError(f"--resume {args.resume}: {e}") from None


def resume_after_restart(args: argparse.Namespace) -> None:
    """Workers restarted by `torchrun --max-restarts` (a rank died) take the run up again from
    its last checkpoint in --run-dir, rather than start it over on top of it."""
    restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
    if restarts <= 0 or args.resume is not None or not args.run_dir:
        return
    from engine.checkpoint import latest_checkpoint

    if latest_checkpoint(Path(args.run_dir)) is None:
        return  # it died before its first checkpoint: start again from step 0
    if torchrun_rank() == 0:
        print(
            f"cockpit: restart {restarts} by torchrun: resuming {args.run_dir} from its last "
            "checkpoint",
            file=sys.stderr,
        )
    args.resume, args.run_dir = args.run_dir, None


def torchrun_rank() -> int:
    """This process's rank under torchrun (0 without it)."""
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def preflight(args: argparse.Namespace) -> str | None:
    """Every check of a run's command line that can fail before anything starts (a ConfigError,
    one line): the preset and its --set, the corpus, the run directory, a resume. Returns the
    message to print instead of training when a resumed run is already finished."""
    # Validate the preset before anything else so a typo is one line, not a UI.
    if args.resume is None:
        from engine.config import load_preset

        if args.allow_data_change:
            raise ConfigError(
                "--allow-data-change applies to --resume RUN_DIR only: a new run records "
                "whatever corpus it starts on; drop the flag"
            )
        cfg = load_preset(args.preset or DEFAULT_PRESET, args.overrides, args.presets_dir)
        check_log_packages(cfg)
        check_corpus_exists(cfg, args.data)
        if args.run_dir and torchrun_rank() == 0:  # rank 0 locks it: the others use it too
            check_run_dir_free(Path(args.run_dir))
    else:
        if not Path(args.resume).exists():
            raise ConfigError(f"--resume {args.resume}: no such run directory or checkpoint")
        from cockpit.cli.fork import branch_overrides

        # a branch not yet trained resumes with the settings it was forked with, then these
        args.overrides = [*branch_overrides(Path(args.resume)), *args.overrides]
        for text in args.overrides:
            parse_override(text)
        resumed = Path(args.resume)
        if torchrun_rank() == 0:
            check_run_dir_free(resumed if resumed.is_dir() else resumed.parent)
        finished = check_resume(args)
        if finished is None:
            check_resume_corpus(args)
        return finished
    return None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    # Before anything slow (torch, the corpus): a SIGTERM during startup must stop the run
    # cleanly with its reason recorded, not kill the process with nothing on disk.
    signals = StopSignals()
    if args.command == "train":
        signals.install()
    try:
        if args.command != "train":
            from cockpit.cli.subcommands import BY_NAME

            return BY_NAME[args.command].run(args)
        resume_after_restart(args)
        finished = preflight(args)
        if finished is not None:
            print(finished)  # nothing to train; nothing touched
            return 0
        if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not args.headless:
            # every rank would open an app: rank 0 serves its socket instead
            if torchrun_rank() == 0:
                print(
                    "cockpit: under torchrun the ranks run headless; watch and steer them with "
                    "`cockpit attach RUN_DIR` (pass --headless to say so)",
                    file=sys.stderr,
                )
            return run_headless(args, signals)
        if args.headless or not sys.stdout.isatty() or os.environ.get("TERM") == "dumb":
            if not args.headless:
                print(
                    "cockpit: no terminal, running headless (pass --headless to say so)",
                    file=sys.stderr,
                )
            return run_headless(args, signals)
        return run_app(args, signals)
    except ConfigError as e:
        print(f"cockpit: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("cockpit: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`cockpit runs | head`): nothing more to say to it, and Python's
        # own flush at exit must not fail on the closed pipe either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # what a shell reports for a command ended by SIGPIPE
    finally:
        signals.restore()


if __name__ == "__main__":
    sys.exit(main())
