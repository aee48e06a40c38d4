"""`cockpit ablate`: the speedrun's method for users. A baseline preset and a list of changes, each
run in turn to the same target val loss (or number of steps) as a normal run in RUNS/SERIES/,
then a table of the differences from the baseline. series.json records the series, so a rerun
of the same command skips what is done.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cockpit.cli.options import add_notify_options, add_presets_dir_option
from cockpit.cli.series_driver import SeriesDriver
from engine.config import ConfigError

if TYPE_CHECKING:  # the series' modules are imported when the subcommand runs, not to parse
    from cockpit.ablation.series_record import Series
    from cockpit.ablation.spec import AblationSpec

NAME = "ablate"
HELP = "measure changes against a baseline preset: one run each, to the same val loss or steps, then a table"
EPILOG = textwrap.dedent(
    """\
    examples:
      cockpit ablate --preset speedrun-cpu --change optim.name=adamw --change model.qk_norm=false --target 1.89
      cockpit ablate --preset tiny --change 'model.norm=rmsnorm model.mlp=relu2' --steps 200 --headless
      cockpit ablate --preset speedrun-cpu --change optim.lr=0.002 --change model.mlp=relu2 --budget 5m
      cockpit ablate series.toml --repeat-baseline 3

    A series file:
      preset = "speedrun-cpu"        # the baseline
      target = 1.89                  # or: steps = 2000, or: budget = "5m"
      repeat_baseline = 3            # the baseline's spread is the noise estimate
      [settings]                     # every run, as --set
      "eval.interval" = 25
      [[change]]
      name = "AdamW everywhere"
      "optim.name" = "adamw"
      [[change]]
      name = "no QK norm, RMSNorm"
      "model.qk_norm" = false
      "model.norm" = "rmsnorm"

    The runs go to RUNS/SERIES/ (default runs/ablate-PRESET-HASH of the spec; --name SERIES
    names it), the table to RUNS/SERIES/results.csv and results.md. q in the app (ctrl+c or
    SIGTERM headless) stops the series, the run on its way checkpointed; the same command
    again skips the runs that are done and resumes that one. Exit status: 0 the series is
    complete, 1 stopped before its end, 2 refused (one line says why). Each run that ends is
    a row of the series' research log, RUNS/research/SERIES/log.tsv: `cockpit research log`.
    """
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "file", nargs="?", metavar="FILE.toml",
        help="a series file (baseline preset, target or steps, [[change]] tables); the options below add to it or override it",
    )  # fmt: skip
    parser.add_argument(
        "--preset", metavar="NAME|PATH", help="the baseline: a preset name or a .toml file"
    )
    parser.add_argument(
        "--change", dest="changes", action="append", default=[], metavar="'KEY=VALUE ...'",
        help="one change from the baseline, run once (repeatable); several keys in one change: "
        "--change 'model.norm=rmsnorm model.mlp=relu2'",
    )  # fmt: skip
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="a setting of every run, the baseline's too, e.g. --set eval.interval=25 (repeatable)",
    )  # fmt: skip
    parser.add_argument(
        "--target", type=float, metavar="LOSS",
        help="each run stops at its first evaluation at or below this val loss (train.stop_at_val), "
        "evaluating 10 times as often near it (eval.fine_interval); the table compares the time to it",
    )  # fmt: skip
    parser.add_argument(
        "--budget", metavar="DURATION",
        help="each run trains for this much training time (90s, 5m, 1h: steps alone, not start-up, "
        "evaluations or saves; train.time_budget), then is evaluated on the whole val split; the "
        "table compares the val bits per byte, tokens, peak memory and tokens/s",
    )  # fmt: skip
    parser.add_argument(
        "--steps", type=int, metavar="N",
        help="every run trains N steps (train.max_steps); with --target, the most it may take",
    )  # fmt: skip
    parser.add_argument(
        "--repeat-baseline", type=int, default=None, metavar="K",
        help="run the baseline K times (seeds of their own, spread among the changes): its spread "
        "is the noise a difference is judged against (default 1)",
    )  # fmt: skip
    parser.add_argument(
        "--name",
        metavar="SERIES",
        help="the series' directory under --runs (default: ablate-PRESET-HASH)",
    )
    parser.add_argument(
        "--runs",
        dest="runs_root",
        default="runs",
        metavar="DIR",
        help="where the series goes (default: runs)",
    )
    parser.add_argument(
        "--data",
        metavar="PATH",
        help="local copy of the preset's corpus (or a text file or folder to train on)",
    )
    add_presets_dir_option(parser)
    parser.add_argument(
        "--headless",
        action="store_true",
        help="no UI: print progress lines (for batch jobs and CI)",
    )
    parser.add_argument("--no-telemetry", action="store_true", help="do not poll GPU/CPU telemetry")
    parser.add_argument(
        "--no-mouse",
        action="store_true",
        help="turn off mouse tracking (saves bandwidth over slow SSH links)",
    )
    add_notify_options(parser)


def spec_from_args(args: argparse.Namespace) -> AblationSpec:
    """The series the command line describes (a file's, with the options added on top)."""
    from dataclasses import replace

    from cockpit.ablation.spec import (
        AblationSpec,
        canonical_setting,
        parse_change,
        parse_duration,
        spec_from_file,
    )

    spec = spec_from_file(Path(args.file)) if args.file else None
    preset = args.preset or (spec.preset if spec else None)
    if not preset:
        raise ConfigError(
            "no baseline: --preset NAME (a preset name or .toml file), or a series FILE.toml"
        )
    changes = [*(spec.changes if spec else ()), *(parse_change(text) for text in args.changes)]
    settings = [
        *(spec.settings if spec else ()),
        *(canonical_setting(t, f"--set {t!r}") for t in args.overrides),
    ]
    base = spec or AblationSpec(preset=preset)

    def given(value: Any, default: Any) -> Any:
        return value if value is not None else default

    return replace(
        base,
        preset=preset,
        changes=tuple(changes),
        settings=tuple(settings),
        target=given(args.target, base.target),
        budget=parse_duration(args.budget) if args.budget is not None else base.budget,
        steps=given(args.steps, base.steps),
        repeat_baseline=given(args.repeat_baseline, base.repeat_baseline),
        name=given(args.name, base.name),
        presets_dirs=tuple(args.presets_dir),
    )


def print_log_note(driver: SeriesDriver) -> None:
    print(driver.log_note(), file=sys.stderr if driver.log_problem else sys.stdout, flush=True)


def new_series_note(series: Series) -> str | None:
    """A word when this command starts a series of its own beside another of its preset: a
    changed command (another change, target, --set) is another series, its runs not reused."""
    from cockpit.ablation.series_record import SERIES_FILE

    if series.spec.name or (series.directory / SERIES_FILE).exists():
        return None
    stem = Path(series.spec.preset).stem
    others = sorted(
        series.directory.parent.glob(f"ablate-{stem}-*/{SERIES_FILE}"),
        key=lambda p: p.stat().st_mtime,
    )
    if not others:
        return None
    return (
        f"a new series, {series.directory}: the command differs from the one of {others[-1].parent}, "
        "whose runs are not reused (--name SERIES names a series a later command may add changes to)"
    )


def run(args: argparse.Namespace) -> int:
    from cockpit.ablation.series_record import Series
    from cockpit.ablation.spec import check_spec

    root = Path(args.runs_root)
    try:
        spec = spec_from_args(args)
        check_spec(spec)
        if root.exists() and not root.is_dir():
            raise ConfigError(
                f"--runs {root}: not a directory; pass --runs DIR, a folder for the series"
            )
        series = Series.open(spec, root)
        note = new_series_note(series)
        driver = SeriesDriver(series, args)
    except ConfigError as e:  # several runs refused: a line each
        for line in str(e).splitlines():
            print(f"cockpit ablate: {line}", file=sys.stderr)
        return 2
    except OSError as e:  # the series' directory cannot be made or written
        print(
            f"cockpit ablate: --runs {root}: cannot write the series there ({e.strerror}); pass --runs DIR, a folder you can write",
            file=sys.stderr,
        )
        return 2
    if note:
        print(f"cockpit ablate: {note}", file=sys.stderr)
    from cockpit.cli.terminal import headless_line, no_app_here

    # as `cockpit train` decides
    why = None if args.headless else no_app_here()
    if why is not None:
        print(f"cockpit ablate: {headless_line(why)}", file=sys.stderr)
    if args.headless or why is not None:
        return run_headless(driver)
    return run_in_app(driver)


def run_headless(driver: SeriesDriver) -> int:
    from cockpit.ablation.table_text import to_markdown
    from cockpit.cli.headless import ProgressPrinter
    from cockpit.cli.stop_signals import StopSignals
    from engine.events import RunState

    series = driver.series
    print(f"ablate: {series.spec.preset} and {len(series.spec.changes)} change(s) to {series.spec.measure()}, "
          f"{len(series.runs)} runs in {series.directory}", flush=True)  # fmt: skip
    for plan in driver.plans:
        if plan.train is None:
            print(
                f"{series.position(plan.run)}: {plan.run.status} already ({plan.run.run_dir}): skipped",
                flush=True,
            )
    signals = StopSignals()
    signals.install()
    try:
        while (plan := driver.next_plan()) is not None:
            if signals.received:
                break
            how = "resuming" if plan.resuming else "starting"
            print(f"{series.position(plan.run)}: {how} {plan.run.run_dir}", flush=True)
            printer = ProgressPrinter(out=lambda line: print(line, flush=True))
            trainer = driver.engine(plan, sinks=[printer], interactive=False)
            signals.attach(trainer)
            state = trainer.run()
            driver.run_ended()
            if state == RunState.FAILED and printer.refusal:
                print(
                    f"cockpit ablate: {series.position(plan.run)}: {printer.refusal}",
                    file=sys.stderr,
                )
                return 2
            # a stop from `cockpit attach` too: the app stops there
            if signals.received or state == RunState.STOPPED:
                break
    finally:
        signals.restore()
    if not driver.complete():
        print(driver.stopped_note(), flush=True)
        print_log_note(driver)
        return 1
    table = driver.table()
    print()
    print(to_markdown(table), end="")
    print(f"\nwritten: {series.directory / 'results.csv'}, {series.directory / 'results.md'}")
    print_log_note(driver)
    print(f"compare the runs: {driver.compare_command()}")
    return 0


def run_in_app(driver: SeriesDriver) -> int:
    from functools import partial

    from cockpit.ablation.table_text import to_markdown
    from cockpit.app.ablating import AblationApp
    from cockpit.cli.launch import run_app, train_arguments

    first = driver.next_run()
    if first is None:  # every run is done already: the table, then the comparison of the runs
        print(to_markdown(driver.table()), end="")
        from cockpit.cli import compare

        runs = [str(d) for d in driver.run_dirs() if d.is_dir()][: compare.MAX_OVERLAYS + 1]
        a = driver.args
        return compare.run(
            argparse.Namespace(
                runs=runs,
                runs_root=a.runs_root,
                bpb=False,
                no_mouse=a.no_mouse,
                bell=a.bell,
                no_notify=a.no_notify,
            )
        )
    label, make_first = first
    args = driver.args
    train = train_arguments(
        preset=driver.series.spec.preset, presets_dir=list(args.presets_dir), no_mouse=args.no_mouse,
        bell=args.bell, no_notify=args.no_notify, no_telemetry=args.no_telemetry,
    )  # fmt: skip
    status = run_app(
        train,
        first_engine=make_first,
        runs_root=args.runs_root,
        app_class=partial(AblationApp, series=driver, first_label=label),
    )
    if driver.complete():
        table = driver.table()
        print()
        print(to_markdown(table), end="")
        print(
            f"\nwritten: {driver.series.directory / 'results.csv'}, {driver.series.directory / 'results.md'}"
        )
        print_log_note(driver)
        print(f"compare the runs again: {driver.compare_command()}")
        return status
    print(driver.stopped_note())
    print_log_note(driver)
    return 1
