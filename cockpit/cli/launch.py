"""Launching a run from the command line: its engine built from the arguments, then trained
headless or in the app."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from cockpit.cli.headless import ProgressPrinter, RankErrorPrinter
from cockpit.cli.options import add_run_options, notify_settings
from cockpit.cli.preflight import preflight, torchrun_rank
from cockpit.cli.preset_fit import preset_fit_warning
from cockpit.cli.stop_signals import StopSignals, exit_when_ended, signal_reason
from cockpit.cli.terminal import (
    glyph_problem_here,
    headless_line,
    no_app_here,
    warn_in_app,
    watch_the_terminal,
)
from engine.config import DEFAULT_PRESET, ConfigError


def train(args: argparse.Namespace, signals: StopSignals) -> int:
    """`cockpit train`: checked before anything starts, then headless (under torchrun, without
    a terminal, or asked) or in the app. A refusal raises ConfigError (one line)."""
    resume_after_restart(args)
    finished = preflight(args)
    notify_endpoints(args)  # a malformed notify.toml or --notify: one line before anything
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
    if args.headless:
        return run_headless(args, signals)
    why = no_app_here()
    if why is not None:
        print(f"cockpit: {headless_line(why)}", file=sys.stderr)
        return run_headless(args, signals)
    return run_app(args, signals)


def train_arguments(**changes: Any) -> argparse.Namespace:
    """`cockpit train`'s options at their defaults, with `changes` (for subcommands that train
    or open the app without them: fork, compare)."""
    parser = argparse.ArgumentParser(prog="cockpit train")
    add_run_options(parser)
    args = parser.parse_args([])
    args.subcommand = "train"
    for name, value in changes.items():
        setattr(args, name, value)
    return args


def make_trainer(
    args: argparse.Namespace,
    preset: str | None = None,
    *,
    first: bool = True,
    sinks: list[Any] = (),
    interactive: bool = True,
    runs_root: str | None = None,
) -> Any:
    """Build a (not yet started) Trainer from the command line; `preset` overrides --preset.

    --set, --run-dir and --resume apply to the run named on the command line only, not to
    presets picked later from the app's menu (they train under `runs_root`, the app's runs
    root, when given); --data goes with its preset (`data_for`).
    """
    from engine.config import load_replay
    from engine.train import Trainer

    name = preset or args.preset or DEFAULT_PRESET
    resume = args.resume if first else None
    overrides = args.overrides if first else []
    # When resuming, the checkpoint's config is the base and --set applies on top of it; a
    # run's config.toml also holds the changes it made, made again at their steps.
    replay = load_replay(name, [] if resume else overrides, args.presets_dir)
    # a later run gets a new directory under the runs root, made by the engine: a name taken
    # there (a link another user planted) gives way to the next free one
    later_root = runs_root if not first and runs_root is not None else "runs"
    trainer = Trainer(
        replay.config,
        planned_changes=replay.changes,
        run_dir=args.run_dir if first else None,
        runs_root=later_root,
        data_path=data_for(args, name, first),
        resume=resume,
        resume_overrides=overrides if resume else (),
        sinks=sinks,
        telemetry=not args.no_telemetry,
        interactive=interactive,
        allow_data_change=args.allow_data_change if first else False,
    )
    endpoints = notify_endpoints(args)
    if endpoints and torchrun_rank() == 0:  # rank 0 alone sends
        from engine.rundir import Notifications

        notes = Notifications(endpoints, partial(notify_warning, trainer), preset=Path(name).stem)
        trainer.sinks.append(notes)  # the list its reporter reads at every event
    return trainer


NOTIFY_ENV = "COCKPIT_NOTIFY"  # more [FORMAT:]URL endpoints, one a line (`cockpit start`'s engine)


def notify_endpoints(args: argparse.Namespace) -> list[Any]:
    """The endpoints a run's notices go to: the user's notify.toml's, $COCKPIT_NOTIFY's, then
    --notify's; a malformed one is a ConfigError (one line naming it and the fix)."""
    from engine.rundir import load_notify_file, parse_endpoint

    from_env = [line for line in os.environ.get(NOTIFY_ENV, "").splitlines() if line.strip()]
    given = getattr(args, "notify", None) or []
    return [
        *load_notify_file(),
        *(parse_endpoint(text, f"${NOTIFY_ENV}") for text in from_env),
        *(parse_endpoint(text) for text in given),
    ]


def notify_warning(trainer: Any, message: str) -> None:
    """A notification that could not be sent: a warning of the run while it goes on (its alerts,
    metrics.jsonl), and on stderr once it has ended (its final state stays its last record)."""
    from engine.events import RunState

    if trainer.state in RunState.ENDED:
        print(f"cockpit: {message}", file=sys.stderr)
    else:
        trainer.reporter.alert("warning", message, "notify")


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


def run_app(
    args: argparse.Namespace,
    signals: StopSignals | None = None,
    *,
    first_engine: Any = None,
    overlays: Sequence[str] = (),
    runs_root: str = "runs",
    loss_unit: str = "loss",
    current_tokenizer: str | None = None,
    app_class: Callable[..., Any] | None = None,
) -> int:
    """The app on the run the command line names, or on `first_engine()` (an engine handle:
    a run opened by `cockpit compare`), with `overlays` drawn over its loss curve, in
    `loss_unit` (loss, or bpb: bits per byte); `current_tokenizer` is the first run's.
    `app_class` builds the app instead of CockpitApp (with its arguments: `cockpit ablate`'s)."""
    from cockpit.app.cockpit_app import CockpitApp, run_in_terminal
    from cockpit.app.session_runs import format_exit_report
    def fit_warning(preset: str, known_peak: tuple[str, float] | None) -> str:
        return preset_fit_warning(preset, args.presets_dir, known_peak)

    first = [True]

    def factory(preset: str) -> Any:
        if first[0] and first_engine is not None:
            first[0] = False
            return first_engine()
        # a run picked in the app (p, n) goes where the app's runs are (`ablate --runs DIR`)
        trainer = make_trainer(args, preset, first=first[0], runs_root=runs_root)
        first[0] = False
        return trainer

    app = (app_class or CockpitApp)(
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
    loss_panel = app.main_screen.loss_panel
    loss_panel.set_y_unit(loss_unit)
    loss_panel.current_tokenizer = current_tokenizer

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
            app.call_later(app.quit_saving)
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
    watch_the_terminal()
    warn_in_app(app, glyph_problem_here())
    run_in_terminal(app, mouse=not args.no_mouse)
    # The terminal is restored: say where the run is and how to pick it up again.
    runs = app.exit_summary()
    print(format_exit_report(runs, forced=app.quit_forced))
    lost = app.quit_forced and bool(runs) and runs[-1].unsaved_steps > 0
    return 1 if lost else 0


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
