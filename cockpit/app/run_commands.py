"""The run's commands: sent to the engine handle's thread-safe methods, followed until acknowledged.

Pause, checkpoint, LR, sample, eval, settings and roll back, with the dialogs that ask for their
values. Each shows up when the engine acknowledges it with an event; until then the session
keeps what was asked (`view.requested`, `view.checkpoint_pending`).
"""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Callable

from cockpit.app.host import Host
from cockpit.app.key_table import LR_STEP
from cockpit.app.session import Session
from cockpit.figures.live_decisions import (
    PutBack,
    cooldown_refusal,
    run_config,
    shown_refusal,
    shown_value,
)
from cockpit.figures.numbers import fmt_int
from cockpit.screens.cooldown import CooldownScreen
from cockpit.screens.dialogs import ConfirmScreen
from cockpit.screens.live_settings import LiveSettingsScreen
from cockpit.screens.lr_dialog import LrFollow, LrScreen
from engine.config import describe
from engine.contract import EngineHandle
from engine.events import RunStarted, RunState


class RunCommands:
    """Sends the run's commands through the session's engine handle; says what is refused."""

    def __init__(self, host: Host) -> None:
        self.host = host

    @property
    def session(self) -> Session:
        return self.host.session

    def send(self, name: str, send: Callable[[EngineHandle], None]) -> bool:
        """`send(handle)` gives the run command `name` (the title of a failure's toast)."""
        trainer = self.session.trainer
        if trainer is None or not self.session.engine_running:
            self.host.notify("no run in progress", severity="warning", timeout=3)
            return False
        try:
            send(trainer)
        except (ValueError, RuntimeError, OSError) as e:  # refused or unreachable: said, the UI goes on
            self.host.notify(f"{type(e).__name__}: {e}", title=f"{name} failed", severity="error")
            return False
        return True

    def pause_target_state(self) -> str:
        """The state space toggles from: the one last asked for, else the engine's own (read
        live: the last drained event can be a step behind a quick second press)."""
        if self.session.view.requested:
            return self.session.view.requested
        trainer = self.session.trainer
        live = trainer.state if trainer is not None and self.session.engine_running else None
        return live if isinstance(live, str) else self.session.state

    # The footer flips between Pause and Resume when the engine acknowledges (`set_state`), not at
    # the key press: rebuilding the footer costs the UI thread tens of milliseconds, which would
    # slow the very step the engine must finish before it can pause.
    def said_when_starting(self, title: str, what: str) -> None:
        """A command sent while the run is still starting waits for its first step, minutes
        away perhaps, with nothing on screen to show it: say so in one line."""
        if self.session.state == RunState.STARTING:
            self.host.notify(
                f"{what} at the first step: the run is still starting (preparing its data, "
                "building its model)",
                title=title,
                timeout=4,
            )

    def pause(self) -> None:
        if self.send("pause", lambda run: run.pause()):
            self.session.view.requested = RunState.PAUSED
            self.said_when_starting("Pause", "it pauses")

    def resume(self) -> None:
        if self.send("resume", lambda run: run.resume()):
            self.session.view.requested = RunState.RUNNING

    def toggle_pause(self) -> None:
        if self.pause_target_state() == RunState.PAUSED:
            self.resume()
        else:
            self.pause()

    def checkpoint(self) -> None:
        # One save per press-burst: more presses before the engine answers add nothing to save
        # and, once, a note that it is on its way (never a toast per press).
        view = self.session.view
        if view.checkpoint_pending:
            if not view.checkpoint_nagged:
                view.checkpoint_nagged = True
                self.checkpoint_toast("already saving at the next step boundary", "Checkpoint", 3)
            return
        if self.send("checkpoint", lambda run: run.checkpoint()):
            view.checkpoint_pending, view.checkpoint_nagged = True, False
            view.checkpoint_said = self.checkpoint_toast(
                "saving at the next step boundary...", "Checkpoint", 3
            )

    def checkpoint_toast(self, message: str, title: str, timeout: float, new: bool = False) -> bool:
        """A checkpoint toast, unless one is still on screen (`new`, a file written, always is).
        Returns whether it was shown."""
        now = time.monotonic()
        if not new and now < self.session.checkpoint_toast_until:
            return False
        self.session.checkpoint_toast_until = now + timeout
        self.host.notify(message, title=title, timeout=timeout)
        return True

    def lr_up(self) -> None:
        if self.send("scale_lr", lambda run: run.scale_lr(LR_STEP)):
            self.said_when_starting(f"LR ×{LR_STEP:g}", f"the LR is scaled ×{LR_STEP:g}")

    def lr_down(self) -> None:
        if self.send("scale_lr", lambda run: run.scale_lr(1.0 / LR_STEP)):
            self.said_when_starting(f"LR ÷{LR_STEP:g}", f"the LR is scaled ÷{LR_STEP:g}")

    def sample(self) -> None:
        if self.send("sample", lambda run: run.sample()):
            self.host.notify("sampling at the next step boundary...", timeout=3)

    def evaluate(self) -> None:
        if self.send("evaluate", lambda run: run.evaluate()):
            self.host.notify("evaluating at the next step boundary...", timeout=3)

    def stop(self, checkpoint: bool, reason: str) -> bool:
        return self.send("stop", lambda run: run.stop(checkpoint=checkpoint, reason=reason))

    # the LR dialog ---------------------------------------------------------------------------------
    async def set_lr_by_dialog(self) -> None:
        """`l`: set or scale the LR, the plan ahead drawn as it is typed, and send what enter
        chose (run in a worker: it waits for the dialog's answer)."""
        if not self.session.engine_running:
            return

        def run_now() -> tuple[RunStarted | None, int, float, float | None]:
            view = self.session.view
            return view.info, view.step, view.scale, view.lr

        follow = LrFollow(run_now)
        now = follow()
        chosen = await self.host.push_screen_wait(
            LrScreen(now.lr, now.scale, now.plan, follow=follow)
        )
        if chosen is None:
            return
        op, value = chosen
        if op == "set":
            self.send("set_lr", lambda run: run.set_lr(value))
        else:
            self.send("scale_lr", lambda run: run.scale_lr(value))

    # live settings -----------------------------------------------------------------------------
    def open_live_settings(self) -> None:
        """Every setting the run may change, on the app's view of its config at its step; a
        read-only viewer (or a run that no longer trains) sees them only."""
        view = self.session.view
        cfg = run_config(view.info)
        if cfg is None:
            self.host.notify("the run's settings are not known yet", title="Live settings", timeout=3)
            return
        screen = LiveSettingsScreen(
            cfg,
            view.step,
            read_only=self.settings_read_only(),
            avoid=self.host.main_screen.lr_panel.region,
            follow=lambda: self.session.view.step,
            lr_scale=view.scale,
            top=self.host.main_screen.status_line.region.bottom,
        )
        self.host.push_screen(screen, self.settings_chosen)

    def settings_read_only(self) -> str:
        """Why this app cannot change the run's settings ("" when it can)."""
        if self.session.read_only:
            return "this viewer only watches; attach without --read-only to change them"
        if not self.session.engine_running or self.session.state in RunState.ENDED:
            info = self.session.view.info
            run = shlex.quote(info.run_dir) if info is not None and info.run_dir else "RUN_DIR"
            return f"the run is not training; cockpit train --resume {run} --set KEY=VALUE changes them"
        return ""

    def open_cool_down(self) -> None:
        """"Cool down now": a WSD decay from the next step, its length asked first; on any other
        schedule (or one cooling down already) the refusal says why."""
        cfg = run_config(self.session.view.info)
        if cfg is None:  # the run has not started yet: say so, as S does
            self.host.notify("the run's settings are not known yet", title="Cool down now", timeout=3)
            return
        refused = cooldown_refusal(cfg, self.session.view.step)
        if refused is not None:
            self.host.notify(
                shown_refusal(refused), title="Cool down now", severity="warning", timeout=6
            )
            return
        screen = CooldownScreen(cfg, self.session.view.step, follow=lambda: self.session.view.step)
        self.host.push_screen(screen, self.settings_chosen)

    def settings_chosen(self, settings: dict[str, object] | None) -> None:
        lr_panel = self.host.main_screen.lr_panel
        if lr_panel.clear_preview():
            lr_panel.flush(force=True)
        if not settings:
            return
        if self.send("set_settings", lambda run: run.set_settings(dict(settings))):
            asked = ", ".join(f"{key}={shown_value(value)}" for key, value in settings.items())
            self.host.notify(f"{asked}: at the next step boundary...", title="Settings", timeout=3)

    # rolling back --------------------------------------------------------------------------------
    def rollback(self) -> None:
        """Back to the last checkpoint with half the LR: at once when paused at a NaN or a
        spike; on a healthy run only after a question that shows what would be lost."""
        session = self.session
        ckpt = session.view.last_checkpoint
        if ckpt is None:
            self.host.notify(
                "no checkpoint to roll back to yet (c saves one; l lowers the LR)",
                title="Roll back",
                severity="warning",
                timeout=4,
            )
            return
        if session.view.anomaly is not None and session.state == RunState.PAUSED:
            self.send("rollback", lambda run: run.rollback(0.5))
            return
        # The run pauses while the question is open: what it names (the checkpoint, the steps
        # lost) stays what a yes does.
        training = session.state in (RunState.RUNNING, RunState.SAVING)
        paused_here = training and self.send("pause", lambda run: run.pause())
        if paused_here:
            session.view.requested = RunState.PAUSED
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

        self.host.push_screen(
            ConfirmScreen(
                "Roll back", question(), yes="Roll back", no="Cancel", purpose="rollback",
                danger=True, live=question,
            ),  # fmt: skip
            lambda yes: self.rollback_answer(yes, shown[0], paused_here),
        )

    def rollback_answer(self, yes: bool | None, shown: str, paused_here: bool) -> None:
        """Roll back to the checkpoint the question named (`shown`), or not at all: a yes before
        the pause is seen, or with a newer checkpoint seen since, is said and does nothing."""
        ckpt = self.session.view.last_checkpoint
        if yes and paused_here and self.session.state != RunState.PAUSED:
            # until the pause is seen, a checkpoint saved before it may not be drained yet: the
            # engine's newest could be another than the one named
            self.host.notify(
                f"not rolled back: the run had not paused yet, so {os.path.basename(shown)} "
                "was not sure to be its newest checkpoint; r asks again",
                title="Roll back",
                severity="warning",
                timeout=8,
            )
            yes = False
        elif yes and ckpt is not None and ckpt[1] != shown:
            self.host.notify(
                f"not rolled back: {os.path.basename(ckpt[1])} was saved as you answered (the "
                f"question named {os.path.basename(shown)}); r asks again",
                title="Roll back",
                severity="warning",
                timeout=8,
            )
            yes = False
        if yes:  # naming it: the engine refuses, too, if another was saved since
            self.send("rollback", lambda run: run.rollback(0.5, checkpoint=shown))
        elif paused_here and self.session.state not in RunState.ENDED:
            self.resume()  # running, as it was before the question
