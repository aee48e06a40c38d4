"""Ending a run: the final state and what is saved with it, then letting go of what it holds.

The Trainer's loop ends in `finish` (stopped, given up, or trained to max_steps), or never starts
for a resumed run with nothing left to do (`finish_already_finished`); `release` runs whatever
happened, last, in `run()`'s finally. Functions of the Trainer, as engine/train/setup.py's are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from engine.distributed.world import leave_world
from engine.events import RunState
from engine.train.cadence import evaluate, sample

if TYPE_CHECKING:
    from engine.train.trainer import Trainer


def finish(run: Trainer) -> None:
    """The loop is over: save and say why it ended (stopped, failed) or that it finished."""
    run._flush()
    if run._stop_requested is not None:
        # Step 0: nothing trained, nothing to save (the same seed makes the same weights).
        # Failed: keep the weights only if they are intact, never a NaN as the newest.
        if run._stop_requested and run.step > 0 and (run._failure is None or weights_finite(run)):
            # saving -> stopped: the state it was in is not gone back to in between
            run.checkpointer.save("stop", ending=True, wait=False)
        if run._failure is not None:
            run._set_state(RunState.FAILED, run._failure)
        else:
            run._set_state(RunState.STOPPED, run._stop_reason)
        return
    run._last_eval = evaluate(run)
    if run.cfg.sample.interval:
        sample(run)
    saved = run.checkpointer.save_and_mark("final", ending=True)
    # A full disk: paused until the final checkpoint is written (engine/train/disk_full.py), unless
    # the run is stopped meanwhile.
    while saved is None and run.disk.checkpoint is not None and run._stop_requested is None:
        if run._should_stop():
            break
        run.command_handler.apply_queued()
    if run.disk.checkpoint is not None:
        run._set_state(
            RunState.FINISHED, f"the final checkpoint was not written ({run.disk.failure})"
        )
        return
    run._set_state(RunState.FINISHED, "")


def finish_already_finished(run: Trainer) -> None:
    """Resumed with nothing to train: no second final eval, sample or save, no record on disk."""
    assert run._already_finished is not None
    run._alert("info", run._already_finished, "finished")
    run._set_state(RunState.FINISHED, "already finished")


def wind_down(run: Trainer) -> None:
    """Just before the final state is recorded: stop the telemetry poller and close the log
    sinks (TensorBoard...), which need no final state, so that what they say on closing is
    recorded before it and the final state is the last record of metrics.jsonl. Once only."""
    poller, run.telemetry_poller = run.telemetry_poller, None
    if poller is not None:
        poller.stop()
    log_sinks, run.log_sinks = run.log_sinks, []
    for sink in log_sinks:
        close = getattr(sink, "close", None)
        problem = close() if close else None
        if isinstance(problem, str):
            run._alert("warning", problem, "log")


def release(run: Trainer) -> None:
    """Stop the telemetry poller, the batch prefetch and the sinks, and leave the process
    group: whatever state the run ended in (without a final state, if it never got one)."""
    wind_down(run)  # done already where the run has its final state
    run.disk.cancel()  # a retry timer of a run paused for its disk
    if hasattr(run, "train_batches"):
        run.train_batches.close()  # the batch prefetch thread ends with the run
    # the metrics file last: it records what the others report on closing (the final state's
    # sinks: the control socket, summary.json, the app's, which say nothing on closing)
    for sink in reversed(run.sinks):
        close = getattr(sink, "close", None)
        problem = close() if close else None
        if isinstance(problem, str):
            run._alert("warning", problem, "log")
    if run.world.distributed:
        leave_world()


def weights_finite(run: Trainer) -> bool:
    return all(bool(torch.isfinite(p).all()) for p in run.model.parameters())
