"""Saving and restoring a run's checkpoints.

The Checkpointer is built with what a checkpoint holds (the model, the optimizer's holder and
`states`: objects with state_dict/load_state_dict, whose entries are the checkpoint's top-level
keys) and where it goes. A write that fails (a full disk) is an alert and a pause, never a lost
run; a manual save that would repeat the last one is acknowledged, not written again.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch

from engine.checkpoint import store as ckpt
from engine.checkpoint.resume import optimizer_settings, put_settings, restore_optimizer
from engine.config.run_config import CheckpointConfig, OptimConfig
from engine.distributed.sharded import (
    is_sharded,
    load_sharded,
    load_whole_into_sharded,
    save_sharded,
)
from engine.distributed.world import World, from_main
from engine.events import CheckpointSaved, Eval, RunState
from engine.optim.adafactor import legacy_state_notes
from engine.optim.optimizers import build_optimizer
from engine.train.disk_full import write_failure

if TYPE_CHECKING:
    from engine.config.run_config import RunConfig
    from engine.data.preparation import PreparedData
    from engine.train.counters import Counters
    from engine.train.disk_full import DiskWait
    from engine.train.reporter import Reporter

# Not of the states: the weights go apart in a sharded run, is_best is the save's own
HEAVY_KEYS = ("model", "optimizer", "scaler", "is_best")


def is_new_best(last_eval: Eval | None, step: int, best_val: float) -> bool:
    """True when a checkpoint saved at `step` should become best.pt: the evaluation at its own
    step beat the best val loss so far. An evaluation between checkpoints marks nothing: its
    weights are not on disk, and the next checkpoint's weights are not the ones it measured."""
    return (
        last_eval is not None
        and last_eval.step == step
        and math.isfinite(last_eval.val_loss)
        and last_eval.val_loss < best_val
    )


class Stateful(Protocol):
    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


class OptimizerHolder(Protocol):
    """Where the run's optimizer is read from: a restore may replace it."""

    optimizer: Any


class Nested:
    """A state kept under one key of the checkpoint (the grad scaler's, under "scaler"; the
    settings timeline's records, under "settings_changes"). `missing`: what a checkpoint
    written before the key existed stands for (None: the key is required)."""

    def __init__(self, key: str, part: Any, missing: Any = None) -> None:
        self.key, self.part, self.missing = key, part, missing

    def state_dict(self) -> dict[str, Any]:
        return {self.key: self.part.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if self.key not in state and self.missing is not None:
            self.part.load_state_dict(self.missing)
            return
        self.part.load_state_dict(state[self.key])


class RunDescription:
    """What the weights were trained with: the config in force (changes made while training
    included: `cfg` is the run's own, changed in place), the config the run started with
    (config.toml's starting values), the tokenizer, the corpus. A resume reads them before
    anything is built, so restoring them does nothing."""

    def __init__(self, cfg: RunConfig, data: PreparedData, start: RunConfig | None = None) -> None:
        self.cfg, self.data, self.start = cfg, data, start

    def state_dict(self) -> dict[str, Any]:
        start = {} if self.start is None else {"start_config": ckpt.plain_data(self.start.to_dict())}
        return {
            "config": ckpt.plain_data(self.cfg.to_dict()),
            **start,
            "tokenizer": ckpt.plain_data(self.data.tokenizer.to_meta()),
            "data_meta": ckpt.plain_data(self.data.meta),
            "data_source": ckpt.plain_data(self.data.record),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Nothing: the resume plan has read them already."""


class Checkpointer:
    """Writes and restores the checkpoints of one run.

    `run_dir` is None for a fresh run until its directory is created (nothing is saved
    before); `sharded`: every rank writes its shards (FSDP). `disk` waits for room when a
    write fails."""

    def __init__(
        self,
        *,
        run_dir: Path | None,
        world: World,
        group: Any,
        settings: CheckpointConfig,
        sharded: bool,
        model: torch.nn.Module,
        optimizer: OptimizerHolder,
        optim: OptimConfig,
        device_type: str,
        states: Mapping[str, Stateful],
        counters: Counters,
        reporter: Reporter,
        disk: DiskWait,
        last_checkpoint: Path | None = None,
    ) -> None:
        self.run_dir = run_dir
        self.world = world
        self.group = group
        self.settings = settings
        self.sharded = sharded
        self.model = model
        self.holder = optimizer
        self.optim = optim
        self.device_type = device_type
        self.states = states
        self.counters = counters
        self.reporter = reporter
        self.disk = disk
        self.last_checkpoint = last_checkpoint  # the newest written or restored
        self.last_save: tuple[Path, str] | None = None  # path, fingerprint: a repeat writes nothing

    def state(self, *, weights: bool = True, is_best: bool = False) -> dict[str, Any]:
        """What a save now writes: tensors and plain data only (it loads with
        torch.load(weights_only=True)). weights=False: a sharded run's, whose weights and
        optimizer go into its shards. Every rank takes part (the RNGs are gathered)."""
        heavy = (
            {"model": self.model.state_dict(), "optimizer": self.holder.optimizer.state_dict()}
            if weights
            else {}
        )
        state: dict[str, Any] = {"version": ckpt.FORMAT_VERSION, **heavy}
        for part in self.states.values():
            state.update(part.state_dict())
        state["is_best"] = is_best
        return state

    def fingerprint(self) -> str:
        """A hash of what a save now would write, weights and optimizer moments aside: those
        change only with a step or a restore, and both change what is hashed (step, LR scale)."""
        state = self.state(weights=False)
        for heavy in HEAVY_KEYS:
            state.pop(heavy, None)
        return ckpt.state_fingerprint(state)

    def save_manual(self) -> None:
        """The `checkpoint` command: asked again at the same step, nothing changed since that
        save, so acknowledge the file already on disk rather than write the same one again."""
        saved = self.last_save
        fingerprint = self.fingerprint()  # every rank takes part (it gathers their RNGs)
        same = saved is not None and saved[0].exists() and saved[1] == fingerprint
        if from_main(same, self.world, self.group):  # rank 0's files decide, for every rank
            assert saved is not None
            self.reporter.emit(
                CheckpointSaved(step=self.counters.step, path=str(saved[0]), reason="manual")
            )
        else:
            self.save("manual")

    def save(
        self, reason: str, *, is_best: bool = False, ending: bool = False, wait: bool = True
    ) -> Path | None:
        """Write a checkpoint (recording `is_best` in it) and go back to the state before it; a
        failure (a full disk...) is an alert and a pause until it can be written, never a lost
        run. `ending`: a save the run ends after (its final state comes next, not the one
        before); `wait=False`: a stop's, which ends the run even if it fails (the alert says so)."""
        report = self.reporter
        previous = report.state
        report.set_state(RunState.SAVING, reason)
        path, failure = self.write(is_best=is_best)
        if failure is not None:
            if wait:
                self.disk.checkpoint_failed(failure, reason, previous == RunState.RUNNING)
            else:
                report.alert(
                    "error",
                    f"checkpoint at step {self.counters.step} failed ({failure}); the previous "
                    "one is intact",
                    "disk",
                )
            return None
        self.saved(path, reason)
        if not ending:
            report.set_state(previous, "")
        return path

    def write(self, *, is_best: bool = False) -> tuple[Path, str | None]:
        """Write the checkpoint of this step (every rank takes part); its path, and what went
        wrong in the OS's words (the same on every rank) or None."""
        assert self.run_dir is not None, "a checkpoint is saved once the run has its directory"
        step, keep_last = self.counters.step, self.settings.keep_last
        # on every rank: it gathers their batch orders (a sharded run's weights go apart)
        state = self.state(weights=not self.sharded, is_best=is_best)
        failure = None
        path = ckpt.checkpoint_path(self.run_dir, step, self.sharded)
        if self.sharded:  # every rank writes its shards
            optimizer = self.holder.optimizer
            failure = save_sharded(path, state, self.model, optimizer, self.world, self.group)
            if failure is None and self.world.is_main:
                ckpt.prune_checkpoints(self.run_dir, keep_last)
        elif self.world.is_main:  # rank 0 alone writes (a run directory on a shared disk)
            try:
                path = ckpt.save_checkpoint(self.run_dir, step, state, keep_last)
                # on disk whole (written aside, then renamed): the last checkpoint even if the
                # ranks' agreement below fails because one of them is gone
                self.last_checkpoint = path
            except (OSError, RuntimeError) as e:  # torch.save's RuntimeError over a disk's OSError
                failure = write_failure(e)
                if failure is None:
                    raise  # not the disk: a bug, with its traceback in error.log
        return path, from_main(failure, self.world, self.group)  # the ranks pause together

    def saved(self, path: Path, reason: str) -> None:
        """`path` is written: the run's last checkpoint, announced."""
        self.last_checkpoint = path
        self.last_save = (path, self.fingerprint())
        self.reporter.emit(CheckpointSaved(step=self.counters.step, path=str(path), reason=reason))

    def save_and_mark(
        self, reason: str, last_eval: Eval | None, *, ending: bool = False
    ) -> Path | None:
        """Save a checkpoint; it becomes best.pt when `last_eval`, the eval at this very step,
        beat every earlier checkpoint's val loss. An eval between checkpoints marks nothing:
        its weights are not on disk, and the next checkpoint's are not the ones it measured."""
        counters = self.counters
        is_best = is_new_best(last_eval, counters.step, counters.best_val)
        previous_best = counters.best_val
        if is_best:
            assert last_eval is not None
            counters.best_val = last_eval.val_loss  # saved inside the checkpoint: a resume agrees
        path = self.save(reason, is_best=is_best, ending=ending)
        if path is None:
            counters.best_val = previous_best  # not on disk: it cannot be best.pt
        elif is_best and self.settings.keep_best and self.world.is_main:
            assert self.run_dir is not None
            ckpt.mark_best(self.run_dir, path)
        return path

    def restore(self, state: dict[str, Any]) -> list[str]:
        """Put a loaded checkpoint's weights, optimizer (replaced in its holder) and states
        into the run; what a person should know of it (a world of another size, an optimizer
        state of an older format)."""
        notes: list[str] = []
        if state.get("_sharded") or is_sharded(self.model):
            # DCP reshards to this world (or to one unsharded process) as it loads; a whole
            # checkpoint (one process resumed an FSDP run) goes to each rank as its shards
            same_optimizer = state["config"].get("optim", {}).get("name") == self.optim.name
            if not same_optimizer:
                self.holder.optimizer = build_optimizer(self.model, self.optim, self.device_type)
            settings = optimizer_settings(self.holder.optimizer)
            optimizer = self.holder.optimizer if same_optimizer else None
            if state.get("_sharded"):
                load_sharded(Path(state["_path"]), self.model, optimizer)
            else:
                load_whole_into_sharded(state, self.model, optimizer)
            put_settings(self.holder.optimizer, settings)
        else:
            ckpt.load_model_state(self.model, state)
            notes = legacy_state_notes(state, self.optim)
            self.holder.optimizer = restore_optimizer(
                self.holder.optimizer, self.model, state, self.optim, self.device_type
            )
        for part in self.states.values():
            part.load_state_dict(state)
        self.last_checkpoint = Path(state["_path"])
        saved_world = int(state.get("world_size", 1))
        if saved_world == self.world.world_size:
            return notes
        return [
            *notes,
            f"resumed on {self.world.world_size} rank(s) from a checkpoint of {saved_world}: "
            f"the data order from step {self.counters.step} is new"
        ]
