"""`cockpit ablate`: the speedrun's method for users. A baseline preset and a list of changes, each
run in turn to the same target val loss (or number of steps) as a normal run in RUNS/SERIES/,
then a table of the differences from the baseline. series.json records the series, so a rerun
of the same command skips what is done.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cockpit.cli.options import add_notify_options, add_presets_dir_option
from engine.config import ConfigError

if TYPE_CHECKING:  # the series' modules are imported when the subcommand runs, not to parse
    from cockpit.ablation.series_record import Series, SeriesRun
    from cockpit.ablation.spec import AblationSpec
    from cockpit.ablation.table import AblationTable

NAME = "ablate"
HELP = "measure changes against a baseline preset: one run each, to the same val loss or steps, then a table"
EPILOG = textwrap.dedent(
    """\
    examples:
      cockpit ablate --preset speedrun-cpu --change optim.name=adamw --change model.qk_norm=false --target 1.88
      cockpit ablate --preset tiny --change 'model.norm=rmsnorm model.mlp=relu2' --steps 200 --headless
      cockpit ablate --preset speedrun-cpu --change optim.lr=0.002 --change model.mlp=relu2 --budget 5m
      cockpit ablate series.toml --repeat-baseline 3

    A series file:
      preset = "speedrun-cpu"        # the baseline
      target = 1.88                  # or: steps = 2000, or: budget = "5m"
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
    parser.add_argument("--preset", metavar="NAME|PATH", help="the baseline: a preset name or a .toml file")
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
    parser.add_argument("--name", metavar="SERIES", help="the series' directory under --runs (default: ablate-PRESET-HASH)")
    parser.add_argument("--runs", dest="runs_root", default="runs", metavar="DIR", help="where the series goes (default: runs)")
    parser.add_argument("--data", metavar="PATH", help="local copy of the preset's corpus (or a text file or folder to train on)")
    add_presets_dir_option(parser)
    parser.add_argument("--headless", action="store_true", help="no UI: print progress lines (for batch jobs and CI)")
    parser.add_argument("--no-telemetry", action="store_true", help="do not poll GPU/CPU telemetry")
    parser.add_argument("--no-mouse", action="store_true", help="turn off mouse tracking (saves bandwidth over slow SSH links)")
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
        raise ConfigError("no baseline: --preset NAME (a preset name or .toml file), or a series FILE.toml")
    changes = [*(spec.changes if spec else ()), *(parse_change(text) for text in args.changes)]
    settings = [*(spec.settings if spec else ()), *(canonical_setting(t, f"--set {t!r}") for t in args.overrides)]
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


@dataclass
class PlannedRun:
    """A run of the series and the `cockpit train` arguments that train it (None: done)."""

    run: SeriesRun
    train: argparse.Namespace | None
    resuming: bool = False


class SeriesDriver:
    """The series, run by run: what the headless loop and the app both drive. Every run's
    command line is checked (`preflight`) before the first starts."""

    def __init__(self, series: Series, args: argparse.Namespace) -> None:
        self.series = series
        self.args = args
        self.at_end: set[Path] = set()  # stopped at their last step: nothing left to train
        self.plans = self._plan_all(series.runs)
        self.index = -1  # the plan whose run is on its way
        self.current_engine: Any = None  # its engine, once built
        self.log_problem: str | None = None  # why the research log could not be written
        series.save()
        self.log_results()  # runs a stopped or killed series ended without logging

    def _plan_all(self, runs: list[SeriesRun]) -> list[PlannedRun]:
        """Every run's plan, each command line checked as `cockpit train` checks its own before
        any run trains; the runs refused are said together, one line each (a refusal that
        several share once, with how many more it refuses), nothing trained."""
        plans: list[PlannedRun] = []
        refused: dict[str, list[str]] = {}  # message -> the runs it refuses
        for run in runs:
            try:
                plans.append(self._plan(run))
            except ConfigError as e:
                refused.setdefault(str(e), []).append(self.series.position(run))
        if refused:
            lines = []
            for why, positions in refused.items():
                more = f" (and {len(positions) - 1} more runs)" if len(positions) > 1 else ""
                lines.append(f"{positions[0]}{more}: {why}")
            raise ConfigError("\n".join(lines))
        return plans

    def _plan(self, run: SeriesRun) -> PlannedRun:
        from cockpit.ablation.series_record import BUSY, DONE, RESTART, RESUME
        from cockpit.cli.launch import train_arguments
        from cockpit.cli.preflight import preflight

        step = self.series.next_step(run)
        if step == DONE:
            return PlannedRun(run, None)
        if step == BUSY:
            raise ConfigError(
                f"{run.run_dir} is training in another process: watch it with `cockpit attach "
                f"{shlex.quote(str(run.run_dir))}`, and run this again once it has ended"
            )
        common = dict(
            presets_dir=list(self.args.presets_dir), headless=self.args.headless,
            no_telemetry=self.args.no_telemetry, no_mouse=self.args.no_mouse,
            bell=self.args.bell, no_notify=self.args.no_notify,
        )  # fmt: skip
        if step == RESUME:
            train = train_arguments(resume=str(run.run_dir), overrides=[], **common)
        else:
            if step == RESTART:
                self.series.restart_dir(run)
            train = train_arguments(
                preset=self.series.spec.preset, overrides=self.series.overrides(run),
                run_dir=str(run.run_dir), data=self.args.data, **common,
            )  # fmt: skip
        finished = preflight(train)  # a refusal: _plan_all says which run's
        if finished is not None:  # stopped at its last step: nothing left to train
            self.at_end.add(run.run_dir)
            return PlannedRun(run, None)
        return PlannedRun(run, train, resuming=step == RESUME)

    def next_plan(self) -> PlannedRun | None:
        """The next run to train (the ones done are passed over), or None at the series' end."""
        while self.index + 1 < len(self.plans):
            self.index += 1
            plan = self.plans[self.index]
            if plan.train is not None:
                return plan
        return None

    def engine(self, plan: PlannedRun, sinks: list[Any] = (), interactive: bool = True) -> Any:
        """The (not started) Trainer of `plan`'s run."""
        from cockpit.cli.launch import make_trainer

        assert plan.train is not None
        self.current_engine = make_trainer(plan.train, sinks=list(sinks), interactive=interactive)
        plan.run.status = "live"  # series.json says which run is on its way
        self.series.save()
        return self.current_engine

    def next_run(self) -> tuple[str, Callable[[], Any]] | None:
        """The app's next run: its title and how to build its engine; None at the end."""
        plan = self.next_plan()
        if plan is None:
            return None
        return self.series.position(plan.run), lambda: self.engine(plan)

    def run_ended(self) -> None:
        """Record the status of the run that just ended."""
        from cockpit.ablation.series_record import RESULT_STATES, run_status

        plan = self.plans[self.index]
        plan.run.status = run_status(plan.run.run_dir)
        if plan.run.status in RESULT_STATES:
            plan.train = None
        self.series.save()
        self.log_results()

    def log_path(self) -> Path:
        from cockpit.ablation.research_log import LOG_NAME, log_dir

        return log_dir(Path(self.args.runs_root), self.series.directory.name) / LOG_NAME

    def log_results(self) -> None:
        """Append to the series' research log (RUNS/research/SERIES/log.tsv) a row for each run
        with a result that is not in it yet. A log that cannot be written is said (`log_problem`),
        the series goes on."""
        from cockpit.ablation.research_log import ResearchLog
        from cockpit.ablation.series_log import series_rows

        log = ResearchLog(self.log_path().parent)
        try:
            log.append(series_rows(self.series, self.results(), log.logged_ids()))
        except ConfigError as e:
            self.log_problem = f"the research log is not written: {e}"
        except OSError as e:
            self.log_problem = f"the research log is not written: {self.log_path()}: {e.strerror}"

    def results(self) -> list[Any]:
        """Each run's result (RunResult), in the series' order."""
        from cockpit.ablation.results import read_result
        from cockpit.ablation.series_record import run_status

        spec = self.series.spec
        return [
            read_result(r.label, r.run_dir, run_status(r.run_dir), spec.target, r.is_baseline)
            for r in self.series.runs
        ]

    def complete(self) -> bool:
        """Every run is done: finished, failed, or stopped with no step left to train."""
        from cockpit.ablation.series_record import RESULT_STATES, run_status

        return all(
            r.run_dir in self.at_end or run_status(r.run_dir) in RESULT_STATES
            for r in self.series.runs
        )

    def table(self) -> AblationTable:
        """The results, written as results.csv and results.md in the series' directory."""
        from cockpit.ablation.table import build_table
        from cockpit.ablation.table_text import to_csv, to_markdown
        from engine.files import atomic_write_text

        spec = self.series.spec
        results = self.results()
        title = f"Ablation of {spec.preset} to {spec.measure()}: {self.series.directory}"
        table = build_table(results, spec.target, title, spec.budget)
        # written new and renamed into place: a link at the name is replaced, never followed
        atomic_write_text(self.series.directory / "results.csv", to_csv(table))
        atomic_write_text(self.series.directory / "results.md", to_markdown(table))
        return table

    def run_dirs(self) -> list[Path]:
        return [r.run_dir for r in self.series.runs]

    def finish(self) -> str:
        self.table()
        return self.done_note()

    def compare_command(self) -> str:
        from cockpit.cli.compare import MAX_OVERLAYS

        dirs = [str(r.run_dir) for r in self.series.runs][: MAX_OVERLAYS + 1]  # its most
        return "cockpit compare " + " ".join(shlex.quote(d) for d in dirs)

    def log_note(self) -> str:
        """Where the series' research log is, or why it is not written."""
        if self.log_problem is not None:
            return f"cockpit ablate: {self.log_problem}"
        name = shlex.quote(self.series.directory.name)
        runs = "" if self.args.runs_root == "runs" else f" --runs {shlex.quote(str(self.args.runs_root))}"
        return f"research log: {self.log_path()} (cockpit research log {name}{runs})"

    def done_note(self) -> str:
        return f"ablate done: {len(self.series.runs)} runs, table in {self.series.directory / 'results.md'}"

    def stopped_note(self) -> str:
        from cockpit.ablation.series_record import RESULT_STATES, run_status

        done = sum(run_status(r.run_dir) in RESULT_STATES for r in self.series.runs)
        return (
            f"ablate stopped: {done} of {len(self.series.runs)} runs done ({self.series.directory}); "
            "run the same command again to continue (the runs done are skipped, a stopped one resumes)"
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
    others = sorted(series.directory.parent.glob(f"ablate-{stem}-*/{SERIES_FILE}"), key=lambda p: p.stat().st_mtime)
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
            raise ConfigError(f"--runs {root}: not a directory; pass --runs DIR, a folder for the series")
        series = Series.open(spec, root)
        note = new_series_note(series)
        driver = SeriesDriver(series, args)
    except ConfigError as e:  # several runs refused: a line each
        for line in str(e).splitlines():
            print(f"cockpit ablate: {line}", file=sys.stderr)
        return 2
    except OSError as e:  # the series' directory cannot be made or written
        print(f"cockpit ablate: --runs {root}: cannot write the series there ({e.strerror}); pass --runs DIR, a folder you can write", file=sys.stderr)
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
            print(f"{series.position(plan.run)}: {plan.run.status} already ({plan.run.run_dir}): skipped", flush=True)
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
                print(f"cockpit ablate: {series.position(plan.run)}: {printer.refusal}", file=sys.stderr)
                return 2
            if signals.received or state == RunState.STOPPED:  # a stop from `cockpit attach` too: the app stops there
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
            argparse.Namespace(runs=runs, runs_root=a.runs_root, bpb=False, no_mouse=a.no_mouse, bell=a.bell, no_notify=a.no_notify)
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
        print(f"\nwritten: {driver.series.directory / 'results.csv'}, {driver.series.directory / 'results.md'}")
        print_log_note(driver)
        print(f"compare the runs again: {driver.compare_command()}")
        return status
    print(driver.stopped_note())
    print_log_note(driver)
    return 1
