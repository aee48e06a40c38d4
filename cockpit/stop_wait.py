"""What the user reads while a quit or a preset switch waits for the run to stop.

A stop with a checkpoint happens at the next step boundary, which can be minutes away (a GPU
preset on a CPU): these notes say what it waits for, for how long it has waited and how to cut
it short. Pure functions of the run's state, its last step and the clock, so they are tested
without an app.
"""

from __future__ import annotations

import shlex

from textual.markup import escape

from cockpit.durations import fmt_duration
from engine.events import RunState

LONG_STEP_S = 10.0  # steps at least this long: the quit dialog warns that the save can be far off

NOTE_REFRESH_S = 1.0  # while a quit or switch waits for a step boundary, its countdown ticks this often


def stop_wait(
    state: str,
    last_step: tuple[float, float] | None,
    started: float | None,
    now: float,
    preparing: bool = False,
) -> str:
    """Where a stop with a checkpoint stands: the time to the next step boundary (from
    `last_step`, the newest step's (event time, step time)) and the time waited since
    `started` (both on the clock events are stamped with). While the corpus is `preparing`
    there is nothing to save: the preparation stops at its next piece."""
    waited = fmt_duration(max(0.0, now - (started or now)))
    if preparing and state not in RunState.ENDED:
        what = "stopping the corpus preparation (nothing trained yet: nothing to save)"
    elif state == RunState.SAVING:
        what = "writing the final checkpoint"
    elif state in RunState.ENDED:
        what = f"the run has {state}"
    elif state == RunState.PAUSED:
        what = "saving a checkpoint and stopping"
    elif last_step is None or last_step[1] <= 0:
        what = "saving when the first step ends (none has finished yet: no estimate)"
    else:
        t, step_s = last_step
        left = t + step_s - now
        took = fmt_duration(step_s)
        if left >= 0.5:
            what = f"saving at the next step boundary, in ~{fmt_duration(left)} (a step takes {took})"
        else:
            what = f"saving at the next step boundary, any moment now (a step takes {took})"
    return f"{what} · waited {waited}"


def quit_note(wait: str, attached: bool = False) -> str:
    """What quitting waits for, how long it has waited, and how to stop waiting (a viewer of a
    run in another process can leave at once: the run still saves and stops on its own)."""
    if attached:
        return f"stopping the run: {wait} · ctrl+c again: leave now (it still saves and stops)"
    return f"quitting: {wait} · ctrl+c again: quit now without saving"


def leave_question(preset: str, run_dir: str, read_only: bool, preparing: bool = False) -> str:
    """The question an attached viewer is asked on q (markup): detach, stop the run, cancel."""
    where = f" ({escape(run_dir)})" if run_dir else ""
    command = escape(f"cockpit attach {shlex.quote(run_dir) if run_dir else 'RUN_DIR'}")
    msg = (
        f"Detach from [b]{escape(preset)}[/b]{where}? The run goes on; "
        f"[b]{command}[/b] comes back to it."
    )
    if read_only:
        return msg + "\n\nThis viewer is read-only: it cannot stop the run."
    if preparing:
        return msg + "\n\nOr stop it: it is still preparing its corpus, nothing to save yet."
    return msg + "\n\nOr stop the run: a checkpoint at the next step boundary, then it ends."


def quit_question(
    preset: str, running: bool, state: str, step_s: float, preparing: bool = False
) -> str:
    """The quit dialog's question (markup); a long step warns that the save may be far off."""
    if not running:
        return "Quit cockpit? No run is in progress."
    if preparing:
        return (
            f"Stop preparing the corpus of [b]{preset}[/b] and quit? "
            "Nothing is trained yet: there is nothing to save."
        )
    msg = f"Save a checkpoint of [b]{preset}[/b] at the next step, stop it and quit?"
    if step_s >= LONG_STEP_S and state not in RunState.ENDED:
        msg += (
            f"\n\nA step takes {fmt_duration(step_s)} here: the checkpoint may be that far "
            "away. While it waits, ctrl+c again quits without saving."
        )
    return msg
