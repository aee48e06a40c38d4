"""New runs from a run: resume it, start afresh from its config, or branch it from a checkpoint.

The resumed or branched run is built off the UI thread (its checks read the checkpoint with
torch), then replaces the run on screen through `switch_to`. A finished run resumes only to train
further, so the app asks how far. A viewer app (no `resume_factory`) starts no run and says so.
"""

from __future__ import annotations

import json
import shlex
import shutil
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

from cockpit.app.host import Host
from cockpit.app.run_opening import RunOpening, checkpoints_of
from cockpit.app.switching import Switching
from cockpit.screens.dialogs import ConfirmScreen
from cockpit.screens.settings import Settings, SettingsScreen
from engine.config import read_small_text
from engine.contract import EngineHandle

ResumeFactory = Callable[[str, Sequence[str]], EngineHandle]
BRANCH = "the branch"  # how a refusal of the fork dialog's settings starts (then cut off)


def branch_settings_error(
    run_dir: Path, checkpoint: str | None, overrides: Sequence[str]
) -> str | None:
    """Why a branch of `run_dir` from `checkpoint` (a file name; None: the newest) would refuse
    `overrides`, checked as its resume checks them (`plan_resume`) against the
    run's config.json, cheaply (no checkpoint read, no torch): one line for the dialog, or None
    (the branch still makes its own full check when it starts)."""
    from engine.checkpoint import list_checkpoints, plan_resume, step_of
    from engine.config import ConfigError

    try:
        config = json.loads(read_small_text(run_dir / "config.json", "a run's config"))
    except (OSError, ValueError):
        return None
    step = step_of(checkpoint or "")
    if step is None:  # the newest
        saved = list_checkpoints(run_dir)
        step = saved[-1][0] if saved else 0
    try:
        plan_resume({"config": config, "step": step}, list(overrides), str(run_dir), where=BRANCH)
    except ConfigError as e:
        text = str(e)
        if text.startswith(str(run_dir)):
            return None  # about the run's own config, not these settings: the branch says
        return text.removeprefix(f"{BRANCH}: ").removeprefix("--set ")
    except (KeyError, TypeError, ValueError):
        return None  # a config.json of another layout: the branch's own check says
    return None


class RunStarts:
    """Resume, new run from a config, fork."""

    def __init__(
        self,
        host: Host,
        opening: RunOpening,
        switching: Switching,
        resume_factory: ResumeFactory | None,
    ) -> None:
        self.host = host
        self.opening = opening
        self.switching = switching
        self.resume_factory = resume_factory

    def no_in_process_runs(self) -> bool:
        if self.resume_factory is not None:
            return False
        self.host.notify(
            "this cockpit is a viewer and starts no run; train in a run of its own: "
            "cockpit start --resume RUN_DIR (or cockpit start --preset NAME)",
            title="Cannot start a run here",
            severity="warning",
            timeout=8,
        )
        return True

    def resume_run(self, run_dir: Path, overrides: Sequence[str] = ()) -> None:
        """Train the run in `run_dir` on from its newest checkpoint (in this app)."""
        if self.no_in_process_runs():
            return
        if not checkpoints_of(run_dir):
            self.host.notify(
                f"{run_dir.name} has no checkpoint to resume from; n starts a new run from its config",
                title="Cannot resume",
                severity="warning",
                timeout=8,
            )
            return
        self.opening.busy(f"checking {run_dir.name}...")
        self.start_worker(run_dir, list(overrides), None)

    def start_worker(self, target: Path, overrides: list[str], branch_of: Path | None) -> None:
        self.host.run_worker(
            partial(self.resume_in_worker, target, overrides, branch_of),
            thread=True, group="open-run", exclusive=True, exit_on_error=False,
        )  # fmt: skip

    def resume_in_worker(self, target: Path, overrides: list[str], branch_of: Path | None) -> None:
        """On a worker thread: build the resumed engine (its checks read the checkpoint with
        torch); a finished run asks how far to train on."""
        from engine.checkpoint import ResumeFinished
        from engine.rundir import NothingToTrain

        assert self.resume_factory is not None
        run_dir = target if target.is_dir() else target.parent
        title = f"Cannot {'fork' if branch_of is not None else 'resume'} {run_dir.name}"
        branch: Path | None = None  # the branch made here, until it trains
        try:
            if branch_of is not None:
                from engine.rundir import make_fork

                branch, source = make_fork(branch_of, overrides, None)
                run_dir = branch
            engine = self.resume_factory(str(run_dir), overrides)
        except ResumeFinished:
            self.host.call_from_thread(self._ask_train_on, run_dir)
            return
        except NothingToTrain as e:  # a branch from the last checkpoint: ask again, with more steps
            more = [*overrides, f"train.max_steps={2 * e.step}"]
            self.host.call_from_thread(self._ask_fork_again, target, more, str(e))
            return
        except Exception as e:  # noqa: BLE001 - on a worker thread: whatever went wrong, one line
            if branch is not None:  # made, never trained: nothing half-made is left to list
                shutil.rmtree(branch, ignore_errors=True)
            self.host.call_from_thread(self.opening.cannot, title, str(e))
            return
        if branch is not None:
            self.host.call_from_thread(self._train_branch, branch, source, engine)
            return
        self.host.call_from_thread(
            self.opening.leave_for, run_dir.name, engine, "resuming another run"
        )

    def _train_branch(self, branch: Path, source: Path, engine: EngineHandle) -> None:
        """The branch is made and its engine built: it trains here now (the dialog that asked
        for it said what happens to the run on screen), and a toast names it."""
        leaving = self.opening.leaving_note()
        self.host.notify(
            "\n".join((f"{branch}", f"from {source.name}", *([leaving] if leaving else []))),
            title=f"Forked: training {branch.name}",
            timeout=8,
        )
        self.opening.leave_for(branch.name, engine, "starting a branch", asked=True)

    def _ask_train_on(self, run_dir: Path) -> None:
        """A finished run resumes only to train further: ask for its new max_steps."""
        self.opening.not_busy()
        from engine.checkpoint import list_checkpoints

        saved = list_checkpoints(
            run_dir
        )  # the resume starts from the newest: its step is the run's
        step = saved[-1][0] if saved else 0
        initial = f"train.max_steps={2 * step}" if step else "train.max_steps="
        self.host.push_screen(
            SettingsScreen(
                f"Train {run_dir.name} on",
                f"{run_dir.name} is finished at step {step}, its train.max_steps.\nTo train "
                "on, raise it (and change any other setting a resume may):",
                initial=initial,
                required=True,
            ),
            lambda s: self.resume_run(run_dir, s.overrides) if s is not None else None,
        )

    def new_from_config(self, run_dir: Path) -> None:
        """A new run from step 0 with the config the run in `run_dir` was started with."""
        config = run_dir / "config.toml"
        if not config.is_file():
            self.host.notify(
                f"{run_dir.name} has no config.toml (an older run); start one: cockpit --preset NAME",
                title="Cannot start from its config",
                severity="warning",
                timeout=8,
            )
            return
        if self.no_in_process_runs():
            return
        label = str(config)
        question = self.opening.leave_question(f"a new run of {run_dir.name}'s config")
        if question is None and self.host.leaving_series_note():
            question = f"Start a new run of {run_dir.name}'s config?"
        if question is not None and self.host.leaving_series_note():
            question = f"{question}\n\n{self.host.leaving_series_note()}"
        if question is None:
            self.switching.switch_to(label, reason="starting another run")
            return
        self.host.push_screen(
            ConfirmScreen("New run", question, yes="Start", no="Cancel", purpose="switch"),
            lambda yes: (
                self.switching.switch_to(label, reason="starting another run") if yes else None
            ),
        )

    def ask_fork(self, run_dir: Path) -> None:
        """The branch dialog: which checkpoint, which settings change."""
        if self.no_in_process_runs():  # a viewer: said before anything is typed
            return
        checkpoints = checkpoints_of(run_dir)
        if not checkpoints:
            self.host.notify(
                f"{run_dir.name} has no checkpoint to branch from", title="Cannot fork", timeout=6
            )
            return

        def message() -> str:  # asked again while open: the step it names is the run's now
            series = self.host.leaving_series_note()
            return (
                "A new run from a checkpoint of this one, with changed settings (the LR and "
                "its schedule, batch, optimizer...); its curves continue this run's."
                + self._fork_enter_note()
                + (f"\n{series}" if series else "")
            )

        self.host.push_screen(
            SettingsScreen(
                f"Fork {run_dir.name}",
                message(),
                checkpoints=checkpoints,
                required=True,
                check=lambda s: branch_settings_error(run_dir, s.checkpoint, s.overrides),
                live=message,
            ),
            lambda s: self._fork_chosen(run_dir, s),
        )

    def _fork_enter_note(self) -> str:
        """What enter in a fork dialog does, as its own paragraph: the branch trains here, and
        the run on screen is left first."""
        leaving = self.opening.leaving_note()
        return f"\nEnter trains the branch here{': ' + leaving if leaving else '.'}"

    def _ask_fork_again(self, target: Path, overrides: list[str], why: str) -> None:
        self.opening.not_busy()
        self.host.push_screen(
            SettingsScreen(
                f"Fork {target.parent.name if target.is_file() else target.name}",
                f"{why.split(';')[0]}: raise train.max_steps to give the branch steps to train."
                + self._fork_enter_note(),
                initial=shlex.join(overrides),
                required=True,
                check=lambda s: branch_settings_error(
                    target.parent if target.is_file() else target,
                    target.name if target.is_file() else None,
                    s.overrides,
                ),
            ),
            lambda s: self.fork_run(target, s.overrides, asked=True) if s is not None else None,
        )

    def _fork_chosen(self, run_dir: Path, settings: Settings | None) -> None:
        if settings is None:
            return
        target = run_dir / settings.checkpoint if settings.checkpoint else run_dir
        self.fork_run(target, settings.overrides, asked=True)

    def fork_run(self, target: Path, overrides: Sequence[str], asked: bool = False) -> None:
        """Branch from `target` (a checkpoint, or a run dir: its newest) and train the branch
        here. Leaving the run on screen is asked first, before anything is made, unless the
        dialog that led here said what happens to it (`asked`)."""
        if self.no_in_process_runs():
            return
        leaving = "" if asked else self.opening.leaving_note()
        if not leaving:
            self._make_branch(target, overrides)
            return
        name = target.parent.name if target.is_file() else target.name
        self.host.push_screen(
            ConfirmScreen(
                "Fork",
                f"Train a branch of {name} here? {leaving}",
                yes="Fork",
                no="Cancel",
                purpose="switch",
            ),  # fmt: skip
            lambda yes: self._make_branch(target, overrides) if yes else None,
        )

    def _make_branch(self, target: Path, overrides: Sequence[str]) -> None:
        self.opening.busy(f"forking {target.name}...")
        self.start_worker(target, list(overrides), target)
