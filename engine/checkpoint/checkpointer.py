"""Saving and restoring a run's checkpoints: the mechanics beside the trainer's decision.

The Trainer decides what goes into a checkpoint (`Trainer._checkpoint_state`); the Checkpointer
writes it (a full disk is an alert and a pause, never a lost run), marks best.pt, acknowledges
a manual save that would repeat the last one, and restores a loaded state into the run.
Files and formats are engine/checkpoint/store.py's.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from engine.checkpoint import store as ckpt
from engine.checkpoint.best import is_new_best
from engine.checkpoint.resume import optimizer_settings, put_settings, restore_optimizer
from engine.distributed.sharded import (
    is_sharded,
    load_sharded,
    load_whole_into_sharded,
    save_sharded,
)
from engine.distributed.world import from_main, rank_seed
from engine.events import CheckpointSaved, RunState
from engine.model.optimizers import build_optimizer
from engine.train.disk_full import write_failure

if TYPE_CHECKING:
    from engine.train.trainer import Trainer


class Checkpointer:
    """Writes and restores the checkpoints of one run (`run`: the trainer it saves)."""

    def __init__(self, run: Trainer) -> None:
        self.run = run
        self.last_save: tuple[Path, str] | None = None  # path, fingerprint: c repeats nothing

    def fingerprint(self) -> str:
        """A hash of what a save now would write, weights and optimizer moments aside: those
        change only with a step or a restore, and both change what is hashed (step, LR scale)."""
        state = self.run._checkpoint_state(weights=False)
        for heavy in ("model", "optimizer", "scaler", "is_best"):  # is_best: same weights
            state.pop(heavy, None)
        return ckpt.state_fingerprint(state)

    def save_manual(self) -> None:
        """The `checkpoint` command: c pressed again at the same step changed nothing since that
        save, so acknowledge the file already on disk rather than write the same one again."""
        run, saved = self.run, self.last_save
        fingerprint = self.fingerprint()  # every rank takes part (it gathers their RNGs)
        same = saved is not None and saved[0].exists() and saved[1] == fingerprint
        if from_main(same, run.world, run.sync.group):  # rank 0's files decide, for every rank
            assert saved is not None
            run.emit(CheckpointSaved(step=run.step, path=str(saved[0]), reason="manual"))
        else:
            self.save("manual")

    def save(self, reason: str, *, ending: bool = False, wait: bool = True) -> Path | None:
        """Write a checkpoint and go back to the state before it; a failure (a full disk...) is
        an alert and a pause until it can be written (engine/train/disk_full.py), never a lost run.
        `ending`: a save the run ends after (its final state comes next, not the one before);
        `wait=False`: a stop's, which ends the run even if it fails (the alert says so)."""
        run = self.run
        previous = run.state
        run._set_state(RunState.SAVING, reason)
        path, failure = self.write()
        if failure is not None:
            if wait:
                run.disk.checkpoint_failed(failure, reason, previous == RunState.RUNNING)
            else:
                run._alert(
                    "error",
                    f"checkpoint at step {run.step} failed ({failure}); the previous one is intact",
                    "disk",
                )
            return None
        self.saved(path, reason)
        if not ending:
            run._set_state(previous, "")
        return path

    def write(self) -> tuple[Path, str | None]:
        """Write the checkpoint of this step (every rank takes part); its path, and what went
        wrong in the OS's words (the same on every rank) or None."""
        run = self.run
        sharded = run.parallel.mode == "fsdp"
        # on every rank: it gathers their batch orders (a sharded run's weights go apart)
        state = run._checkpoint_state(weights=not sharded)
        failure = None
        path = ckpt.checkpoint_path(run.run_dir, run.step, sharded)
        if sharded:  # every rank writes its shards (engine/distributed/sharded.py)
            failure = save_sharded(path, state, run.model, run.optimizer, run.world, run.sync.group)
            if failure is None and run.world.is_main:
                ckpt.prune_checkpoints(run.run_dir, run.cfg.checkpoint.keep_last)
        elif run.world.is_main:  # rank 0 alone writes (a run directory on a shared disk)
            try:
                path = ckpt.save_checkpoint(
                    run.run_dir, run.step, state, run.cfg.checkpoint.keep_last
                )
            except Exception as e:  # torch.save raises RuntimeError from a full disk's OSError
                failure = write_failure(e)
                if failure is None:
                    raise  # not the disk: a bug, with its traceback in error.log
        return path, from_main(failure, run.world, run.sync.group)  # the ranks pause together

    def saved(self, path: Path, reason: str) -> None:
        """`path` is written: the run's last checkpoint, announced."""
        run = self.run
        run.last_checkpoint = path
        self.last_save = (path, self.fingerprint())
        run.emit(CheckpointSaved(step=run.step, path=str(path), reason=reason))

    def save_and_mark(self, reason: str, *, ending: bool = False) -> Path | None:
        """Save a checkpoint; it becomes best.pt when the eval at this very step beat every
        earlier checkpoint's val loss. An eval between checkpoints marks nothing: its weights
        are not on disk, and the next checkpoint's are not the ones it measured."""
        run = self.run
        is_best = is_new_best(run._last_eval, run.step, run.best_val)  # engine/checkpoint/best.py
        previous_best = run.best_val
        if is_best:
            run.best_val = run._last_eval.val_loss  # saved inside the checkpoint, so a resume agrees
        run._checkpoint_is_best = is_best
        try:
            path = self.save(reason, ending=ending)
        finally:
            run._checkpoint_is_best = False
        if path is None:
            run.best_val = previous_best  # not on disk: it cannot be best.pt
        elif is_best and run.cfg.checkpoint.keep_best and run.world.is_main:
            ckpt.mark_best(run.run_dir, path)
        return path

    def restore(self, state: dict[str, Any]) -> None:
        """Put a loaded checkpoint's weights, optimizer (replaced), counters and RNGs into the run."""
        run = self.run
        if state.get("_sharded") or is_sharded(run.model):
            # DCP reshards to this world (or to one unsharded process) as it loads; a whole
            # checkpoint (one process resumed an FSDP run) goes to each rank as its shards
            same_optimizer = state["config"].get("optim", {}).get("name") == run.cfg.optim.name
            if not same_optimizer:
                run.optimizer = build_optimizer(run.model, run.cfg.optim, run.device.type)
            settings = optimizer_settings(run.optimizer)
            optimizer = run.optimizer if same_optimizer else None
            if state.get("_sharded"):
                load_sharded(Path(state["_path"]), run.model, optimizer)
            else:
                load_whole_into_sharded(state, run.model, optimizer)
            put_settings(run.optimizer, settings)
        else:
            ckpt.load_model_state(run.model, state)
            run.optimizer = restore_optimizer(
                run.optimizer, run.model, state, run.cfg.optim, run.device.type
            )
        run.scaler.load_state_dict(state["scaler"])
        run.step = state["step"]
        run.lr_scale = state["lr_scale"]
        run.train_time_s = state["train_time_s"]
        run.tokens = state["tokens"]
        run.best_val = state["best_val"]
        ckpt.restore_global_rng(state["rng"], run.device.type)
        by_rank = state.get("batch_rng_by_rank")
        rank = run.world.rank
        if by_rank is not None and state.get("world_size") == run.world.world_size:
            run.train_batches.generator.set_state(by_rank[rank])  # each rank its own order
            ckpt.restore_global_rng(state["rng_by_rank"][rank], run.device.type)
        elif run.world.distributed:
            # another world size: each rank starts an order of its own from this step
            seed = rank_seed(run.cfg.train.seed, run.world.rank) + run.step
            run.train_batches.set_rng_state(torch.Generator().manual_seed(seed).get_state())
        else:
            run.train_batches.generator.set_state(state["batch_rng"])  # rank 0's order
        saved_world = int(state.get("world_size", 1))
        if saved_world != run.world.world_size:
            run.resume_notes.append(
                f"resumed on {run.world.world_size} rank(s) from a checkpoint of {saved_world}: "
                f"the data order from step {run.step} is new"
            )
        run.sample_generator.set_state(
            state["sample_rng"].to(run.sample_generator.device)
            if run.device.type == "cpu"
            else state["sample_rng"]
        )
        run.last_checkpoint = Path(state["_path"])
