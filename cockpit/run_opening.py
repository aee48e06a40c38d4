"""Other runs, from inside the app: the `RunOpening` mixin of `CockpitApp`.

`h` opens the runs screen (cockpit/runs_screen.py); from there, or from a finished run's view,
the app opens a run (a live one by attaching to it, one that is over in a read-only view drawn
from its files: engine/recorded.py), resumes one, starts a new run from one's config, branches
one from a checkpoint, or overlays runs on the loss curve (cockpit/overlay.py). Reading files,
connecting and building engines happen in thread workers; the UI thread only switches.

The app holds one run at a time: the run on screen is left losing nothing first (the app's own
run is checkpointed and stopped, a run in another process is detached from and goes on).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual import work
from textual.worker import get_current_worker

from cockpit.commands import COMMANDS, RUN_ACTIONS
from cockpit.numbers import fmt_int
from cockpit.screens import ConfirmScreen
from cockpit.settings_screen import Settings, SettingsScreen
from engine.contract import EngineHandle
from engine.events import RunState

if TYPE_CHECKING:
    from textual.app import App

    _AppBase = App[None]  # for type checkers only: at run time a plain mixin
else:
    _AppBase = object

# What any run's view offers (a new run from its config, a branch from one of its checkpoints),
# and a finished run's view instead of steering (resume).
RUN_DIR_ACTIONS = frozenset({"new_from_config", "fork_run"})
RECORD_ACTIONS = frozenset({"resume_run"})
# The keys of the commands that steer a run: on a finished run's view they say why they do nothing.
STEERING_KEYS = frozenset(
    key
    for cmd in COMMANDS
    if cmd.name in RUN_ACTIONS and cmd.name != "rollback"  # r resumes there
    for key in cmd.keys.split(",")
)
ResumeFactory = Callable[[str, Sequence[str]], EngineHandle]


def open_engine(run_dir: Path) -> EngineHandle:
    """The engine handle of the run in `run_dir`: attached to over its control socket while an
    engine holds it, else read back from its files. Raises with a one-line message."""
    from cockpit.subcommands.runs import engine_holds

    if engine_holds(run_dir):
        from engine.remote import RemoteEngine

        return RemoteEngine(run_dir)
    from engine.recorded import RecordedRun

    return RecordedRun(run_dir)


def checkpoints_of(run_dir: Path) -> list[str]:
    """The run's checkpoint names, newest step first (ckpt-STEP.pt and sharded ckpt-STEP.dcp)."""
    from engine.remote import _CKPT_RE

    try:
        names = os.listdir(run_dir)
    except OSError:
        return []
    found = [(int(m.group(1)), name) for name in names if (m := _CKPT_RE.match(name))]
    return [name for _, name in sorted(found, reverse=True)]


class RunOpening(_AppBase):
    """The runs screen and what it leads to; a finished run's view and its keys."""

    # set by CockpitApp.__init__
    trainer: EngineHandle | None
    state: str
    view: Any
    resume_factory: ResumeFactory | None
    runs_root: str
    engine_running: bool
    attached: bool
    read_only: bool

    # what the run on screen is ----------------------------------------------------------------
    @property
    def viewing_record(self) -> bool:
        """The run on screen is over and drawn from its files: nothing runs to steer."""
        return bool(getattr(self.trainer, "recorded", False))

    @property
    def current_run_dir(self) -> str | None:
        run_dir = getattr(self.view.info, "run_dir", None) or getattr(self.trainer, "run_dir", None)
        return str(run_dir) if run_dir else None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        on_main = self.screen is self.main_screen
        if action == "read_only_note":
            return on_main and self.read_only and not self.viewing_record
        if action == "run_over_note":
            return on_main and self.viewing_record
        if action in RECORD_ACTIONS:
            return on_main and self.viewing_record
        if action in RUN_DIR_ACTIONS:
            return False if not on_main else True if self.current_run_dir else None
        if self.viewing_record and action in RUN_ACTIONS:
            return False  # hidden, as in a read-only viewer: a press says why (on_key)
        return super().check_action(action, parameters)

    def on_key(self, event: Any) -> None:
        if self.viewing_record and self.screen is self.main_screen and event.key in STEERING_KEYS:
            self.action_run_over_note()

    def action_run_over_note(self) -> None:
        name = os.path.basename(self.current_run_dir or "") or self.preset
        self.notify(
            f"{name} is {self.state}: this view is drawn from its files and nothing runs to "
            "steer. r resumes it, n starts a new run from its config, f branches it from a "
            "checkpoint, h lists the runs",
            title="Run is over",
            timeout=8,
        )

    # the runs screen ---------------------------------------------------------------------------
    def action_runs(self) -> None:
        """`h`: every run under the runs directory; what is picked there comes back here."""
        from cockpit.runs_screen import RunsScreen

        overlaid = [o.key for o in self.loss_panel.overlays]
        self.push_screen(
            RunsScreen(Path(self.runs_root), current=self.current_run_dir, selected=overlaid),
            self._runs_chosen,
        )

    def _runs_chosen(self, choice: Any) -> None:
        if choice is None:
            return
        dirs = [Path(d) for d in choice.run_dirs]
        if not dirs:
            return
        match choice.action:
            case "open":
                self.open_run(dirs[0])
            case "overlay":
                self.overlay_runs(dirs)
            case "resume":
                self.resume_run(dirs[0])
            case "new":
                self.new_from_config(dirs[0])
            case "fork":
                self.fork_run(dirs[0], list(choice.overrides))

    # opening a run -----------------------------------------------------------------------------
    def open_run(self, run_dir: Path) -> None:
        """Show the run in `run_dir` instead of the one on screen (attached or read back)."""
        if self._is_current(run_dir):
            self.notify(f"{run_dir.name} is the run on screen", timeout=3)
            return
        self._status_note = f"opening {run_dir.name}..."
        self.refresh_status()
        self._open_in_worker(run_dir)

    @work(thread=True, exit_on_error=False, group="open-run", exclusive=True)
    def _open_in_worker(self, run_dir: Path) -> None:
        try:
            engine = open_engine(run_dir)
        except Exception as e:  # noqa: BLE001 - one line, whatever went wrong
            self.call_from_thread(self._cannot, f"Cannot open {run_dir.name}", str(e))
            return
        if get_current_worker().is_cancelled:
            _close(engine)
            return
        self.call_from_thread(self._leave_for, run_dir.name, engine, "opening another run")

    def _leave_for(self, label: str, engine: EngineHandle, reason: str) -> None:
        """Switch to `engine` once the user agrees to leave the run on screen."""
        self._status_note = ""
        question = self._leave_question(label)

        def switch() -> None:
            self._drop_overlay(getattr(engine, "run_dir", None))  # now it is the run itself
            self.switch_to(label, lambda: engine, reason=reason)

        if question is None:
            switch()
            return

        def answered(yes: bool) -> None:
            if yes:
                switch()
            else:
                _close(engine)

        self.push_screen(
            ConfirmScreen("Open run", question, yes="Open", no="Cancel", purpose="switch"),
            answered,
        )

    def _leave_question(self, label: str) -> str | None:
        """What leaving the run on screen does, as a question; None when nothing is lost."""
        if not self.engine_running or self.trainer is None:
            return None
        here = f"{self.preset} (step {fmt_int(self.view.step)})"
        if self.attached:
            return f"Open {label}? This cockpit detaches from {here}: that run goes on."
        if self.state in RunState.ENDED:
            return None
        return (
            f"Open {label}? {here} is saved (a checkpoint) and stopped first; resume it later "
            "from the runs screen (h)."
        )

    def _is_current(self, run_dir: Path) -> bool:
        current = self.current_run_dir
        return current is not None and os.path.realpath(current) == os.path.realpath(run_dir)

    def _cannot(self, title: str, message: str) -> None:
        self._status_note = ""
        self.refresh_status()
        self.notify(message, title=title, severity="error", timeout=10)

    # resume, a new run from a config, a branch --------------------------------------------------
    def action_resume_run(self) -> None:
        """`r` on a finished run's view: train it on from its last checkpoint."""
        if self.current_run_dir:
            self.resume_run(Path(self.current_run_dir))

    def action_new_from_config(self) -> None:
        """`n`: a new run (step 0) with the whole config of the run on screen."""
        if self.current_run_dir:
            self.new_from_config(Path(self.current_run_dir))

    def action_fork_run(self) -> None:
        """`f`: a branch of the run on screen from one of its checkpoints, changed settings."""
        if self.current_run_dir:
            self.ask_fork(Path(self.current_run_dir))

    def _no_in_process_runs(self) -> bool:
        if self.resume_factory is not None:
            return False
        self.notify(
            "this cockpit is a viewer and starts no run; train in a run of its own: "
            "cockpit start --resume RUN_DIR (or cockpit start --preset NAME)",
            title="Cannot start a run here",
            severity="warning",
            timeout=8,
        )
        return True

    def resume_run(self, run_dir: Path, overrides: Sequence[str] = ()) -> None:
        """Train the run in `run_dir` on from its newest checkpoint (in this app)."""
        if self._no_in_process_runs():
            return
        if not checkpoints_of(run_dir):
            self.notify(
                f"{run_dir.name} has no checkpoint to resume from; n starts a new run from its config",
                title="Cannot resume",
                severity="warning",
                timeout=8,
            )
            return
        self._status_note = f"checking {run_dir.name}..."
        self.refresh_status()
        self._resume_in_worker(run_dir, list(overrides), None)

    @work(thread=True, exit_on_error=False, group="open-run", exclusive=True)
    def _resume_in_worker(self, target: Path, overrides: list[str], branch_of: Path | None) -> None:
        """Build the resumed engine off the UI thread (its checks read the checkpoint with
        torch); a finished run asks how far to train on."""
        from cockpit.subcommands.fork import NothingToTrain
        from engine.resume import ResumeFinished

        assert self.resume_factory is not None
        run_dir = target if target.is_dir() else target.parent
        title = f"Cannot {'fork' if branch_of is not None else 'resume'} {run_dir.name}"
        try:
            if branch_of is not None:
                from cockpit.subcommands.fork import make_fork

                run_dir, _ = make_fork(branch_of, overrides, None)
            engine = self.resume_factory(str(run_dir), overrides)
        except ResumeFinished as e:
            self.call_from_thread(self._ask_train_on, run_dir, str(e))
            return
        except NothingToTrain as e:  # a branch from the last checkpoint: ask again, with more steps
            more = [*overrides, f"train.max_steps={2 * e.step}"]
            self.call_from_thread(self._ask_fork_again, target, more, str(e))
            return
        except Exception as e:  # noqa: BLE001 - one line, whatever went wrong
            self.call_from_thread(self._cannot, title, str(e))
            return
        self.call_from_thread(self._leave_for, run_dir.name, engine, "resuming another run")

    def _ask_train_on(self, run_dir: Path, finished: str) -> None:
        """A finished run resumes only to train further: ask for its new max_steps."""
        self._status_note = ""
        self.refresh_status()
        step = _finished_step(finished)
        initial = f"train.max_steps={2 * step}" if step else "train.max_steps="
        self.push_screen(
            SettingsScreen(
                f"Train {run_dir.name} on",
                f"{finished.split(';')[0]}.\nTo train on, raise its train.max_steps (and "
                "change any other setting a resume may):",
                initial=initial,
                required=True,
            ),
            lambda s: self.resume_run(run_dir, s.overrides) if s is not None else None,
        )

    def new_from_config(self, run_dir: Path) -> None:
        """A new run from step 0 with the config the run in `run_dir` was started with."""
        config = run_dir / "config.toml"
        if not config.is_file():
            self.notify(
                f"{run_dir.name} has no config.toml (an older run); start one: cockpit --preset NAME",
                title="Cannot start from its config",
                severity="warning",
                timeout=8,
            )
            return
        if self._no_in_process_runs():
            return
        label = str(config)
        question = self._leave_question(f"a new run of {run_dir.name}'s config")
        if question is None:
            self.switch_to(label, reason="starting another run")
            return
        self.push_screen(
            ConfirmScreen("New run", question, yes="Start", no="Cancel", purpose="switch"),
            lambda yes: self.switch_to(label, reason="starting another run") if yes else None,
        )

    def ask_fork(self, run_dir: Path) -> None:
        """The branch dialog: which checkpoint, which settings change."""
        checkpoints = checkpoints_of(run_dir)
        if not checkpoints:
            self.notify(
                f"{run_dir.name} has no checkpoint to branch from", title="Cannot fork", timeout=6
            )
            return
        self.push_screen(
            SettingsScreen(
                f"Fork {run_dir.name}",
                "A new run from a checkpoint of this one, with changed settings (the LR and "
                "its schedule, batch, optimizer...); its curves continue this run's.",
                checkpoints=checkpoints,
                required=True,
            ),
            lambda s: self._fork_chosen(run_dir, s),
        )

    def _ask_fork_again(self, target: Path, overrides: list[str], why: str) -> None:
        self._status_note = ""
        self.refresh_status()
        self.push_screen(
            SettingsScreen(
                f"Fork {target.parent.name if target.is_file() else target.name}",
                f"{why.split(';')[0]}: raise train.max_steps to give the branch steps to train.",
                initial=shlex.join(overrides),
                required=True,
            ),
            lambda s: self.fork_run(target, s.overrides) if s is not None else None,
        )

    def _fork_chosen(self, run_dir: Path, settings: Settings | None) -> None:
        if settings is None:
            return
        target = run_dir / settings.checkpoint if settings.checkpoint else run_dir
        self.fork_run(target, settings.overrides)

    def fork_run(self, target: Path, overrides: Sequence[str]) -> None:
        """Branch from `target` (a checkpoint, or a run dir: its newest) and train the branch."""
        if self._no_in_process_runs():
            return
        self._status_note = f"forking {target.name}..."
        self.refresh_status()
        self._resume_in_worker(target, list(overrides), target)

    # overlays ----------------------------------------------------------------------------------
    def overlay_runs(self, run_dirs: Sequence[Path]) -> None:
        """Overlay these runs' loss curves on the run on screen (read in a worker)."""
        others = [d for d in run_dirs if not self._is_current(d)]
        if not others:
            self.notify("that is the run on screen: pick others to compare with it", timeout=4)
            return
        self._status_note = f"reading {len(others)} run{'s' if len(others) > 1 else ''}..."
        self.refresh_status()
        self._read_overlays(list(others))

    @work(thread=True, exit_on_error=False, group="overlays", exclusive=True)
    def _read_overlays(self, run_dirs: list[Path]) -> None:
        from cockpit.overlay import Overlay
        from engine.run_history import read_curves

        overlays, problems = [], []
        for run_dir in run_dirs:
            try:
                overlays.append(Overlay(read_curves(run_dir)))
            except Exception as e:  # noqa: BLE001 - one line per run that cannot be read
                problems.append(str(e))  # it names the run
        if not get_current_worker().is_cancelled:
            self.call_from_thread(self._show_overlays, overlays, problems)

    def _show_overlays(self, overlays: list[Any], problems: list[str]) -> None:
        self._status_note = ""
        self.refresh_status()
        if problems:
            self.notify("\n".join(problems), title="Cannot compare", severity="error", timeout=10)
        if overlays:
            self.loss_panel.set_overlays(overlays)
            self.loss_panel.flush(force=True)
            names = ", ".join(o.name for o in overlays)
            self.notify(f"the loss curve shows {names} too", title="Comparing", timeout=4)

    def _drop_overlay(self, run_dir: Any) -> None:
        if run_dir is None:
            return
        kept = [
            o for o in self.loss_panel.overlays
            if os.path.realpath(o.key) != os.path.realpath(run_dir)
        ]
        if len(kept) < len(self.loss_panel.overlays):
            self.loss_panel.set_overlays(kept)

    def action_clear_overlays(self) -> None:
        if not self.loss_panel.overlays:
            self.notify("no other run is overlaid; h picks runs to compare", timeout=4)
            return
        self.loss_panel.set_overlays([])
        self.loss_panel.flush(force=True)


def _close(engine: Any) -> None:
    close = getattr(engine, "close", None)
    if callable(close):
        close()


def _finished_step(message: str) -> int:
    """The step a 'finished' refusal names ('... finished at step 300 ...'), else 0."""
    import re

    found = re.search(r"step (\d[\d,]*)", message)
    return int(found.group(1).replace(",", "")) if found else 0
