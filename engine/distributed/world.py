"""The run's place among ranks under `torchrun`, and the collectives the loop needs.

A world of one is a single process: no process group, every helper a no-op. With more ranks the
default group is NCCL on CUDA and gloo on CPU; a second, gloo group carries cockpit's own small
messages (commands, telemetry), so they never queue behind NCCL traffic.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from engine.config.run_config import ConfigError

# How long a collective may wait for a rank before the run gives up on it. Pauses never come
# near it (the ranks exchange a message every PAUSED_POLL_S); a rank killed outright is noticed
# at once by gloo (its sockets close); this bounds a rank that hangs.
COLLECTIVE_TIMEOUT_S = float(os.environ.get("COCKPIT_COLLECTIVE_TIMEOUT_S", "600"))


@dataclass(frozen=True)
class World:
    """This process's rank among `world_size` (torchrun's RANK, WORLD_SIZE, LOCAL_RANK)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    restart_count: int = 0  # torchrun --max-restarts: how many times the workers were restarted
    launched: bool = False  # started by torchrun (which sets TORCHELASTIC_RUN_ID), at any size

    @property
    def distributed(self) -> bool:
        """In a process group: several ranks. One rank, even under torchrun, has nobody to
        exchange with: a process group would only add a wrapper and a collective per step."""
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0: writes the metrics file, serves the control socket, owns the run directory."""
        return self.rank == 0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> World:
        try:
            world_size = int(environ.get("WORLD_SIZE", "1"))
            rank = int(environ.get("RANK", "0"))
            local_rank = int(environ.get("LOCAL_RANK", str(rank)))
            restarts = int(environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
        except ValueError:
            raise ConfigError(
                "RANK, WORLD_SIZE and LOCAL_RANK must be integers (torchrun sets them); "
                "launch with torchrun, or unset them for one process"
            ) from None
        if world_size < 1 or not 0 <= rank < world_size:
            raise ConfigError(
                f"RANK {rank} of WORLD_SIZE {world_size} is not a rank of that world; "
                "launch with torchrun"
            )
        launched = "TORCHELASTIC_RUN_ID" in environ and "MASTER_ADDR" in environ
        return cls(rank, world_size, local_rank, restarts, launched)


def rank_seed(seed: int, rank: int) -> int:
    """The batch sampler's seed on `rank`: rank 0 keeps a single process's, so one rank of a
    world trains on the same batches as the run did alone."""
    return seed + 1 + 7919 * rank


def init_world(world: World, device: torch.device) -> Any:
    """Join the process groups (once per process); returns the gloo group for the cockpit's
    messages, or None for a single process."""
    if not world.distributed:
        return None
    import torch.distributed as dist

    timeout = datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S)
    if not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        kwargs: dict[str, Any] = {"device_id": device} if device.type == "cuda" else {}
        if world.restart_count > 0 and "MASTER_ADDR" in os.environ:
            kwargs.update(store=_restart_store(world, timeout), rank=world.rank)
            kwargs["world_size"] = world.world_size
        dist.init_process_group(backend=backend, timeout=timeout, **kwargs)
    if dist.get_backend() == "gloo":
        return dist.group.WORLD
    return dist.new_group(backend="gloo", timeout=timeout)


def _restart_store(world: World, timeout: datetime.timedelta) -> Any:
    """torchrun's store under a prefix of this restart: the workers of an earlier attempt left
    their addresses in it, and a restarted rank would dial the dead ones."""
    import torch.distributed as dist

    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        world.world_size,
        is_master=world.is_main and not agent_store,
        timeout=timeout,
    )
    return dist.PrefixStore(f"cockpit-restart-{world.restart_count}/", store)


def leave_world() -> None:
    """Destroy the process groups at the end of the run (a clean exit for torchrun)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def rank_device(requested: torch.device, world: World) -> torch.device:
    """One GPU per rank: cuda becomes cuda:LOCAL_RANK; other devices are shared."""
    if world.distributed and requested.type == "cuda":
        index = world.local_rank
        if index >= torch.cuda.device_count():
            raise ConfigError(
                f"LOCAL_RANK {index} but {torch.cuda.device_count()} GPU(s) visible: start at "
                "most one process per GPU (--nproc-per-node)"
            )
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return requested


def mean_over_ranks(values: torch.Tensor, world: World) -> torch.Tensor:
    """The element-wise mean of `values` over the ranks (the tensor itself for one process)."""
    if not world.distributed:
        return values
    import torch.distributed as dist

    out = values.clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out / world.world_size


def sum_over_ranks(values: torch.Tensor, world: World) -> torch.Tensor:
    if not world.distributed:
        return values
    import torch.distributed as dist

    out = values.clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out


def gather_to_all(value: Any, world: World, group: Any = None) -> list[Any]:
    """Every rank's `value` (picklable), in rank order, on every rank."""
    if not world.distributed:
        return [value]
    import torch.distributed as dist

    out: list[Any] = [None] * world.world_size
    dist.all_gather_object(out, value, group=group)
    return out


def from_main(value: Any, world: World, group: Any = None) -> Any:
    """Rank 0's `value` on every rank (e.g. the run directory, whose name has a timestamp)."""
    if not world.distributed:
        return value
    import torch.distributed as dist

    box = [value]
    dist.broadcast_object_list(box, src=0, group=group)
    return box[0]


def is_collective_failure(error: BaseException) -> bool:
    """An error from a collective whose peer went away (gloo, NCCL, or the store)."""
    import torch.distributed as dist

    kinds = tuple(k for k in (getattr(dist, "DistError", None),) if k is not None)
    text = str(error)
    return isinstance(error, kinds) or any(
        marker in text for marker in ("Connection closed by peer", "Connection reset", "NCCL", "timed out", "Timeout")
    )


def roster(world: World, group: Any = None) -> list[tuple[str, int]]:
    """(host, pid) of every rank, in rank order: who to name when one is lost."""
    import socket as socket_module

    return gather_to_all((socket_module.gethostname(), os.getpid()), world, group)


def lost_ranks(ranks: list[tuple[str, int]], me: int) -> str:
    """Which ranks are gone, as far as this one can tell: on this host, a rank whose process
    no longer exists; on other hosts it cannot look."""
    import socket as socket_module
    import time

    host = socket_module.gethostname()
    elsewhere = [f"{r} ({h})" for r, (h, _) in enumerate(ranks) if r != me and h != host]
    local = [(r, pid) for r, (h, pid) in enumerate(ranks) if r != me and h == host]
    # a process killed closes its sockets before it is a zombie: look again for a moment
    deadline = time.monotonic() + 2.0
    while True:
        gone = [f"rank {r} (pid {pid})" for r, pid in local if _process_gone(pid)]
        if gone or not local or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    if gone:
        return f"{', '.join(gone)} is gone (killed, or out of memory?)"
    if elsewhere:
        return f"lost contact with a rank on another host: one of {', '.join(elsewhere)}"
    return "lost contact with another rank (it hung or failed)"


def _process_gone(pid: int) -> bool:
    """No such process, or a zombie its launcher has not reaped yet (just killed)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # alive, someone else's
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False
