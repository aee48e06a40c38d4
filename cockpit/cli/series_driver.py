"""A series of `cockpit ablate`, run by run: every run's `cockpit train` command line planned and
checked before the first starts, its engine built, its status recorded when it ends, the research
log and the results table written. The headless loop and the app (`AblationApp`) both drive it."""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.config import ConfigError

if TYPE_CHECKING:  # the series' modules are imported when the subcommand runs, not to parse
    from cockpit.ablation.series_record import Series, SeriesRun
    from cockpit.ablation.table import AblationTable


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
        runs_root = self.args.runs_root
        runs = "" if runs_root == "runs" else f" --runs {shlex.quote(str(runs_root))}"
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
