"""The commands the keys, footer and palette run: pause, checkpoint, LR, sample, eval, roll back,
the plot toggles, zoom and help.

The key table names them (keys, labels, help, palette); this is what they do, on the app
(Textual looks `action_*` up on the app, where the bindings are declared). Each command goes to
the engine's thread-safe method and shows up when the engine acknowledges it with an event.
"""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from cockpit.app.key_table import COMMANDS, LR_STEP, MAIN_ACTIONS, RUN_ACTIONS, Command, help_rows
from cockpit.figures.live_decisions import (
    cooldown_refusal,
    run_config,
    shown_refusal,
    shown_value,
)
from cockpit.figures.numbers import fmt_int
from cockpit.screens.cooldown import CooldownScreen
from cockpit.screens.dialogs import ConfirmScreen, HelpScreen, PutBack
from cockpit.screens.live_settings import LiveSettingsScreen, SchedulePreview
from cockpit.screens.lr_dialog import LrFollow, LrScreen
from engine.config import describe
from engine.contract import EngineHandle
from engine.events import RunStarted, RunState

if TYPE_CHECKING:
    from textual.app import App

    from cockpit.app.session import Session

    _AppBase = App[None]  # for type checkers only: at run time a plain mixin
else:
    _AppBase = object


# The steering keys (the commands that need a running engine), by key: pressed while they cannot
# act (a read-only viewer, a run that ended), each says why in one line instead of nothing.
STEERING_BY_KEY: dict[str, Command] = {
    key: cmd for cmd in COMMANDS if cmd.needs_engine for key in cmd.keys.split(",")
}


class CommandActions(_AppBase):
    """`CockpitApp`'s key and palette commands, and which of them apply now (`check_action`)."""

    session: Session  # the app's one record of the run on screen and the session

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in MAIN_ACTIONS and self.screen is not self.main_screen:
            return False  # a dialog is open: its own keys only
        return self.offered(action)

    def offered(self, action: str) -> bool | None:
        """Whether the footer, the help and the palette offer `action` in the run's state (the
        open screen aside): a key that would do nothing is not offered at all (None: shown
        disabled)."""
        if action in ("pause", "resume"):
            paused = self._pause_target_state() == RunState.PAUSED
            if (action == "resume") != paused:
                return False  # the other one of the pair is shown
        if action in RUN_ACTIONS and self.read_only:
            return False  # a read-only viewer: hidden (the footer says read-only instead)
        if action in RUN_ACTIONS and (not self.engine_running or self.session.state in RunState.ENDED):
            return False  # the run ended or its engine is gone: nothing to steer
        if action == "presets" and self.attached:
            return False  # runs start with `cockpit start`, not in a viewer (action_presets says)
        return True

    def refresh_offers(self) -> None:
        """What is offered changed (the run's state, its engine, the viewer): the footer and the
        palette follow, and the samples panel names s only while a press would sample."""
        self.refresh_bindings()
        self.main_screen.samples_panel.offer_sampling(self.offered("sample") is True)

    def steering_refusal(self) -> str | None:
        """Why the steering keys cannot act now, as one line (None: they can)."""
        state = self.session.state
        if state in RunState.ENDED:
            if self.attached:
                ckpt = self.session.view.last_checkpoint
                hint = f"cockpit start --resume {shlex.quote(self.current_run_dir or 'RUN_DIR')} trains it on" if ckpt else "q quits"
            elif getattr(self, "resume_factory", None) is not None:  # this app starts runs
                hint = "h lists the runs (resume or fork one), p starts another preset"
            else:
                hint = "q quits"
            return f"the run {state}: nothing trains to steer; {hint}"  # stopped, finished, failed
        if self.read_only:
            return "this viewer only watches: its keys cannot change the run; attach without --read-only to steer it"
        if not self.engine_running:
            return "no run in progress; p picks a preset to train"
        return None

    def refuse_steering_key(self, key: str) -> bool:
        """A steering key pressed on the main screen while it cannot act: one toast saying why
        (the same one not again while it is on screen). Returns whether it said so."""
        cmd = STEERING_BY_KEY.get(key)
        if cmd is None or self.screen is not self.main_screen or self.offered(cmd.name) is not False:
            return False
        why = self.steering_refusal()
        if why is None:
            return False
        title = cmd.title or cmd.footer
        now = time.monotonic()
        if self.session.refusal_said == (title, why) and now < self.session.refusal_until:
            return True
        self.session.refusal_said, self.session.refusal_until = (title, why), now + 6
        self.notify(why, title=title, severity="warning", timeout=6)
        return True

    def action_read_only_note(self) -> None:
        self.notify(
            "this viewer only watches: its keys cannot change the run; attach without "
            "--read-only to steer it",
            title="Read-only",
            timeout=6,
        )

    def _pause_target_state(self) -> str:
        """The state space toggles from: the one last asked for, else the engine's own (read
        live: the last drained event can be a step behind a quick second press)."""
        if self.session.view.requested:
            return self.session.view.requested
        trainer = self.session.trainer
        live = trainer.state if trainer is not None and self.engine_running else None
        return live if isinstance(live, str) else self.session.state

    def _command(self, name: str, send: Callable[[EngineHandle], None]) -> bool:
        """`send(handle)` gives the run command `name` (the title of a failure's toast)."""
        trainer = self.session.trainer
        if trainer is None or not self.engine_running:
            self.notify("no run in progress", severity="warning", timeout=3)
            return False
        try:
            send(trainer)
        except Exception as e:  # noqa: BLE001 - a refused command must not take the UI down
            self.notify(f"{type(e).__name__}: {e}", title=f"{name} failed", severity="error")
            return False
        return True

    # The footer flips between Pause and Resume when the engine acknowledges (`_set_state`),
    # not at the key press: rebuilding the footer costs the UI thread tens of milliseconds,
    # which would slow the very step the engine must finish before it can pause.
    def _said_when_starting(self, title: str, what: str) -> None:
        """A command sent while the run is still starting (preparing its data, building its
        model) waits for its first step, minutes away perhaps, with nothing on screen to show
        it: say so in one line."""
        if self.session.state == RunState.STARTING:
            self.notify(
                f"{what} at the first step: the run is still starting (preparing its data, "
                "building its model)",
                title=title,
                timeout=4,
            )

    def action_pause(self) -> None:
        if self._command("pause", lambda run: run.pause()):
            self.session.view.requested = RunState.PAUSED
            self._said_when_starting("Pause", "it pauses")

    def action_resume(self) -> None:
        if self._command("resume", lambda run: run.resume()):
            self.session.view.requested = RunState.RUNNING

    def action_toggle_pause(self) -> None:
        current = self._pause_target_state()
        if current == RunState.PAUSED:
            if self._command("resume", lambda run: run.resume()):
                self.session.view.requested = RunState.RUNNING
        elif self._command("pause", lambda run: run.pause()):
            self.session.view.requested = RunState.PAUSED
            self._said_when_starting("Pause", "it pauses")

    def action_checkpoint(self) -> None:
        # One save per press-burst: more presses before the engine answers add nothing to save
        # and, once, a note that it is on its way (never a toast per press).
        if self.session.view.checkpoint_pending:
            if not self.session.view.checkpoint_nagged:
                self.session.view.checkpoint_nagged = True
                self._checkpoint_toast("already saving at the next step boundary", "Checkpoint", 3)
            return
        if self._command("checkpoint", lambda run: run.checkpoint()):
            self.session.view.checkpoint_pending, self.session.view.checkpoint_nagged = True, False
            self.session.view.checkpoint_said = self._checkpoint_toast(
                "saving at the next step boundary...", "Checkpoint", 3
            )

    def _checkpoint_toast(self, message: str, title: str, timeout: float, new: bool = False) -> bool:
        """A checkpoint toast, unless one is still on screen: a burst of c presses shows what is
        happening once, not once per press. `new` (a file written, or the answer to a request
        that was announced) is always shown. Returns whether it was shown."""
        now = time.monotonic()
        if not new and now < self.session.checkpoint_toast_until:
            return False
        self.session.checkpoint_toast_until = now + timeout
        self.notify(message, title=title, timeout=timeout)
        return True

    def action_lr_up(self) -> None:
        if self._command("scale_lr", lambda run: run.scale_lr(LR_STEP)):
            self._said_when_starting(f"LR ×{LR_STEP:g}", f"the LR is scaled ×{LR_STEP:g}")

    def action_lr_down(self) -> None:
        if self._command("scale_lr", lambda run: run.scale_lr(1.0 / LR_STEP)):
            self._said_when_starting(f"LR ÷{LR_STEP:g}", f"the LR is scaled ÷{LR_STEP:g}")

    def action_rollback(self) -> None:
        """Back to the last checkpoint with half the LR: at once when paused at a NaN or a
        spike; on a healthy run only after a question that shows what would be lost."""
        ckpt = self.session.view.last_checkpoint
        if ckpt is None:
            self.notify(
                "no checkpoint to roll back to yet (c saves one; l lowers the LR)",
                title="Roll back",
                severity="warning",
                timeout=4,
            )
            return
        if self.session.view.anomaly is not None and self.session.state == RunState.PAUSED:
            self._command("rollback", lambda run: run.rollback(0.5))
            return
        # The run pauses while the question is open: what it names (the checkpoint, the steps
        # lost) stays what a yes does; it said "training goes on", and a checkpoint saved
        # meanwhile made the yes roll back to another than the one named.
        training = self.session.state in (RunState.RUNNING, RunState.SAVING)
        paused_here = training and self._command("pause", lambda run: run.pause())
        if paused_here:
            self.session.view.requested = RunState.PAUSED
        shown: list[str] = []  # the checkpoint the question names now
        put_back = PutBack()

        def question() -> str:
            view = self.session.view
            step, path, _ = view.last_checkpoint or ckpt
            shown[:] = [path]
            lost = max(0, view.step - step)
            if self.session.state == RunState.PAUSED:
                waiting = "paused while you decide" + (": Cancel resumes it" if paused_here else "")
            elif paused_here:
                waiting = "pausing while you decide"
            else:
                waiting = self.session.state
            # what the engine restores with the checkpoint: changes made since are undone
            changes = put_back(view.info.config if view.info else None, view.checkpoint_config)
            settings = (
                f"\n\nSettings go back to those at step {fmt_int(step)}: {describe(changes)}."
                if changes
                else ""
            )
            return (
                f"Roll back to [b]{os.path.basename(path)}[/b] at step {fmt_int(step)}?\n\n"
                f"This discards the {fmt_int(lost)} step{'' if lost == 1 else 's'} trained since "
                f"(the run is {waiting}) and halves the LR for the rest of the run.{settings}"
            )

        self.push_screen(
            ConfirmScreen(
                "Roll back", question(), yes="Roll back", no="Cancel", purpose="rollback",
                danger=True, live=question,
            ),  # fmt: skip
            lambda yes: self._rollback_answer(yes, shown[0], paused_here),
        )

    def _rollback_answer(self, yes: bool | None, shown: str, paused_here: bool) -> None:
        """Roll back to the checkpoint the question named (`shown`), or not at all: a yes before
        the pause is seen (the events before it all drained), or with a newer checkpoint seen
        since than the one named, is said, and nothing is rolled back."""
        ckpt = self.session.view.last_checkpoint
        if yes and paused_here and self.session.state != RunState.PAUSED:
            # until the pause is seen, a checkpoint saved before it may not be drained yet: the
            # engine's newest could be another than the one named
            self.notify(
                f"not rolled back: the run had not paused yet, so {os.path.basename(shown)} "
                "was not sure to be its newest checkpoint; r asks again",
                title="Roll back",
                severity="warning",
                timeout=8,
            )
            yes = False
        elif yes and ckpt is not None and ckpt[1] != shown:
            self.notify(
                f"not rolled back: {os.path.basename(ckpt[1])} was saved as you answered (the "
                f"question named {os.path.basename(shown)}); r asks again",
                title="Roll back",
                severity="warning",
                timeout=8,
            )
            yes = False
        if yes:  # naming it: the engine refuses, too, if another was saved since
            self._command("rollback", lambda run: run.rollback(0.5, checkpoint=shown))
        elif paused_here and self.session.state not in RunState.ENDED:
            self.action_resume()  # running, as it was before the question

    def action_sample(self) -> None:
        if self._command("sample", lambda run: run.sample()):
            self.notify("sampling at the next step boundary...", timeout=3)

    def action_evaluate(self) -> None:
        if self._command("evaluate", lambda run: run.evaluate()):
            self.notify("evaluating at the next step boundary...", timeout=3)

    def action_lr_dialog(self) -> None:
        if not self.engine_running:
            return

        def run_now() -> tuple[RunStarted | None, int, float, float | None]:
            view = self.session.view
            return view.info, view.step, view.scale, view.lr

        follow = LrFollow(run_now)
        now = follow()
        self.push_screen(LrScreen(now.lr, now.scale, now.plan, follow=follow), self._lr_chosen)

    def _lr_chosen(self, result: tuple[str, float] | None) -> None:
        if result is None:
            return
        op, value = result
        if op == "set":
            self._command("set_lr", lambda run: run.set_lr(value))
        else:
            self._command("scale_lr", lambda run: run.scale_lr(value))

    def action_live_settings(self) -> None:
        """The live settings screen: every setting the run may change, on the app's view of its
        config at its step; a read-only viewer (or a run that no longer trains) sees them only."""
        cfg = run_config(self.session.view.info)
        if cfg is None:
            self.notify("the run's settings are not known yet", title="Live settings", timeout=3)
            return
        screen = LiveSettingsScreen(
            cfg,
            self.session.view.step,
            read_only=self._settings_read_only(),
            avoid=self.main_screen.lr_panel.region,
            follow=lambda: self.session.view.step,
            lr_scale=self.session.view.scale,
        )
        self.push_screen(screen, self._settings_chosen)

    def _settings_read_only(self) -> str:
        """Why this app cannot change the run's settings ("" when it can)."""
        if self.read_only:
            return "this viewer only watches; attach without --read-only to change them"
        if not self.engine_running or self.session.state in RunState.ENDED:
            info = self.session.view.info
            run = shlex.quote(info.run_dir) if info is not None and info.run_dir else "RUN_DIR"
            return f"the run is not training; cockpit train --resume {run} --set KEY=VALUE changes them"
        return ""

    def action_cool_down(self) -> None:
        """"Cool down now": a WSD decay from the next step, its length asked first; on any other
        schedule (or one cooling down already) the refusal says why."""
        cfg = run_config(self.session.view.info)
        if cfg is None:  # the run has not started yet: say so, as S does
            self.notify("the run's settings are not known yet", title="Cool down now", timeout=3)
            return
        refused = cooldown_refusal(cfg, self.session.view.step)
        if refused is not None:
            self.notify(
                shown_refusal(refused), title="Cool down now", severity="warning", timeout=6
            )
            return
        screen = CooldownScreen(cfg, self.session.view.step, follow=lambda: self.session.view.step)
        self.push_screen(screen, self._settings_chosen)

    def _settings_chosen(self, settings: dict[str, object] | None) -> None:
        if self.main_screen.lr_panel.clear_preview():
            self.main_screen.lr_panel.flush(force=True)
        if not settings:
            return
        if self._command("set_settings", lambda run: run.set_settings(dict(settings))):
            asked = ", ".join(f"{key}={shown_value(value)}" for key, value in settings.items())
            self.notify(f"{asked}: at the next step boundary...", title="Settings", timeout=3)

    def on_schedule_preview(self, message: SchedulePreview) -> None:
        """A settings screen's schedule, drawn on the LR panel before it is applied."""
        panel = self.main_screen.lr_panel
        open_here = isinstance(self.screen, (LiveSettingsScreen, CooldownScreen))
        if message.curve is None or not open_here:  # a late preview of a closed screen: none
            changed = panel.clear_preview()
        else:
            changed = panel.set_preview(message.curve, message.max_steps)
        if changed:  # drawn at once: a plot redraw per change typed, none for the same curve
            panel.flush(force=True)

    def action_toggle_x(self) -> None:
        """`t`: the loss x axis cycles steps -> tokens -> training time."""
        self.main_screen.loss_panel.cycle_x_axis()
        self.main_screen.loss_panel.flush(force=True)

    def action_toggle_log(self) -> None:
        self.main_screen.loss_panel.toggle_log()
        self.main_screen.loss_panel.flush(force=True)

    def action_cycle_smoothing(self) -> None:
        self.main_screen.loss_panel.cycle_smoothing()
        self.main_screen.loss_panel.flush(force=True)

    def action_cycle_x_window(self) -> None:
        window = self.main_screen.loss_panel.cycle_x_window()
        if window is None and not self.main_screen.loss_panel.x_window:
            self.notify("the whole run is shown", timeout=2)  # too short for a window yet
        self.main_screen.loss_panel.flush(force=True)

    def action_toggle_y_all(self) -> None:
        self.main_screen.loss_panel.toggle_y_all()
        self.main_screen.loss_panel.flush(force=True)

    def action_zoom(self) -> None:
        self.main_screen.zoom()

    def action_zoom_panel(self, panel_id: str) -> None:
        self.main_screen.zoom_panel(panel_id)

    def action_help(self) -> None:
        self.push_screen(HelpScreen(help_rows(self.offered)))  # the keys that do something now
