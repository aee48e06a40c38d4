"""How many threads torch's CPU arithmetic uses: `train.threads`, or the static default.

On CPU the static default leaves one core free (bench/threads.py, docs/guide/plan.md "CPU
threads": a thread per core collapses as soon as anything else wants a core): a run starts there
and then measures (engine/train/thread_tuner.py); `cockpit sample` and the ranks of torchrun keep
it. OMP_NUM_THREADS is kept, and so is torch's default on a GPU. Called on the thread that trains
(or samples): a thread takes the setting at its first parallel operation.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import torch


def usable_cores() -> int:
    """The cores this process may run on (a cgroup or taskset limit counts), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS has no affinity
        return max(1, os.cpu_count() or 1)


def auto_threads(cores: int) -> int:
    """The static default on CPU (where a run starts measuring): one core left free for
    everything else, at least one."""
    return max(1, cores - 1)


def chosen_threads(
    setting: int, device_type: str, env: Mapping[str, str] = os.environ
) -> int | None:
    """The thread count to set for `train.threads = setting` on `device_type`, or None to
    leave torch's own (a GPU, or OMP_NUM_THREADS set)."""
    if setting > 0:
        return setting
    if device_type != "cpu" or env.get("OMP_NUM_THREADS"):
        return None
    return auto_threads(usable_cores())


def apply_threads(setting: int, device_type: str) -> int:
    """Set torch's intra-op threads as `train.threads` says; returns the count in use."""
    threads = chosen_threads(setting, device_type)
    if threads is not None and threads != torch.get_num_threads():
        torch.set_num_threads(threads)
    return torch.get_num_threads()
