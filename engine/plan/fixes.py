"""What to change when a configuration will not fit: the memory plan's fixes, and the refusal.

`suggest_fixes` tries each change one at a time on top of the configuration, cheapest in speed
first, and plans it again in the same world and mode. `check_fits` is the
pre-flight check a run makes: the plan, or one ConfigError naming the best fix that fits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from engine.config.byte_sizes import format_bytes
from engine.config.run_config import ConfigError, RunConfig
from engine.distributed.parallel import FSDP_OPTIMIZERS
from engine.plan.planner import (
    MemoryPlan,
    compute_dtype,
    keeps_first_moment,
    optimizer_state_bytes,
    param_shapes,
    plan_memory,
)
from engine.plan.recompute import RECOMPUTE_MODES, Recompute, cost_text, recomputed_share


@dataclass(frozen=True)
class Fix:
    description: str
    overrides: tuple[str, ...]
    plan: MemoryPlan


def _with(cfg: RunConfig, **sections: dict) -> RunConfig:
    return replace(
        cfg, **{name: replace(getattr(cfg, name), **values) for name, values in sections.items()}
    )


def _with_recompute(cfg: RunConfig, setting: Recompute) -> RunConfig:
    blocks = 0 if setting.blocks == setting.n_layer else setting.blocks
    return _with(cfg, model={"grad_checkpoint": setting.mode, "recompute_blocks": blocks})


def recompute_fixes(
    cfg: RunConfig,
    vocab_size: int,
    capacity: int | None,
    plan: Callable[[RunConfig], MemoryPlan],
) -> list[Fix]:
    """The recompute that costs the least forward compute and fits; with nothing that fits (or
    no capacity to fit), the settings that save the most: MLP in every block, and every block
    but the last (recomputing the last saves nothing: backward would rebuild it at once)."""
    m = cfg.model
    current = Recompute.of(m)
    before = plan(cfg).total

    def fix(setting: Recompute, trial_plan: MemoryPlan) -> Fix:
        what = f"{setting.describe()} ({cost_text(setting, m, vocab_size)})"
        return Fix(what, setting.overrides, trial_plan)

    def planned(setting: Recompute) -> MemoryPlan:
        return plan(_with_recompute(cfg, setting))

    n_layer = m.n_layer
    most = [Recompute("mlp", n_layer, n_layer), Recompute("full", max(1, n_layer - 1), n_layer)]
    if capacity is not None:
        best: tuple[float, Recompute, MemoryPlan] | None = None
        for mode in RECOMPUTE_MODES:
            # memory falls as more blocks recompute: the fewest that fit, by bisection
            low, high, found = 1, most[RECOMPUTE_MODES.index(mode)].blocks, None
            while low <= high:
                middle = (low + high) // 2
                trial_plan = planned(Recompute(mode, middle, n_layer))
                if trial_plan.fits:
                    found, high = (middle, trial_plan), middle - 1
                else:
                    low = middle + 1
            if found is None:
                continue
            setting = Recompute(mode, found[0], n_layer)
            share = recomputed_share(setting, m, vocab_size)
            if setting != current and (best is None or share < best[0]):
                best = (share, setting, found[1])
        if best is not None:
            return [fix(best[1], best[2])] if best[2].total < before else []
    return [
        fix(setting, trial_plan)
        for setting in most
        if setting != current and (trial_plan := planned(setting)).total < before
    ]


def suggest_fixes(
    cfg: RunConfig,
    vocab_size: int,
    device_type: str,
    capacity: int | None,
    world_size: int = 1,
    parallel: str = "single",
) -> list[Fix]:
    """Changes that lower peak memory, cheapest in speed first, each with its new plan (in the
    same world and mode; a DDP world is also offered FSDP)."""

    def plan(trial: RunConfig, mode: str = parallel) -> MemoryPlan:
        return plan_memory(trial, vocab_size, device_type, capacity, world_size, mode)

    fixes: list[Fix] = []
    t = cfg.train
    # 1. smaller micro-batches, more accumulation: the same effective batch, same result
    batch = t.batch_size
    while batch % 2 == 0:
        batch //= 2
        accum = t.grad_accum * (t.batch_size // batch)
        values = {"batch_size": batch, "grad_accum": accum}
        if t.batch_start:  # a batch-size schedule starts as much smaller, at least 1
            values["batch_start"] = max(1, t.batch_start * batch // t.batch_size)
        trial = _with(cfg, train=values)
        smaller = plan(trial)
        fixes.append(
            Fix(
                f"micro-batch {batch} x {accum} accumulation (same effective batch)",
                tuple(f"train.{key}={value}" for key, value in values.items()),
                smaller,
            )
        )
        if smaller.fits is not False:
            break
    if parallel == "ddp" and cfg.optim.name in FSDP_OPTIMIZERS:
        fixes.append(
            Fix(
                f"shard with FSDP over the {world_size} ranks",
                ("train.parallel=fsdp",),
                plan(cfg, "fsdp"),
            )
        )
    fixes += recompute_fixes(cfg, vocab_size, capacity, plan)
    if device_type == "cuda" and compute_dtype(cfg, device_type) == torch.float32:
        trial = _with(cfg, train={"dtype": "bfloat16"})
        fixes.append(
            Fix(
                "bf16 autocast",
                ("train.dtype=bfloat16",),
                plan(trial),
            )
        )
    for name, why in (
        ("adafactor", "factored second moments"),
        ("lion", "one state tensor"),
        ("muon", "one state tensor for matrices"),
    ):
        if parallel == "fsdp" and name not in FSDP_OPTIMIZERS:
            continue  # needs whole matrices (an FSDP run refuses it)
        # Adafactor's first moment in the trial as now; the current optimizer's as it is
        moment, now = keeps_first_moment(cfg, name), keeps_first_moment(cfg)
        if name != cfg.optim.name and optimizer_state_bytes(
            param_shapes(cfg, vocab_size), name, first_moment=moment
        ) < optimizer_state_bytes(param_shapes(cfg, vocab_size), cfg.optim.name, now):
            trial = _with(cfg, optim={"name": name})
            fixes.append(
                Fix(
                    f"optimizer {name} ({why})",
                    (f"optim.name={name}",),
                    plan(trial),
                )
            )
    return fixes


def check_fits(
    cfg: RunConfig,
    vocab_size: int,
    device_type: str,
    capacity: int,
    world_size: int = 1,
    parallel: str = "single",
) -> MemoryPlan:
    """The plan (per device, for `parallel` over `world_size` ranks); a ConfigError naming the
    best fix if the estimate exceeds the capacity."""
    plan = plan_memory(cfg, vocab_size, device_type, capacity, world_size, parallel)
    if plan.fits:
        return plan
    fixes = suggest_fixes(cfg, vocab_size, device_type, capacity, world_size, parallel)
    fitting = [f for f in fixes if f.plan.fits]
    hint = (
        f"try {' '.join('--set ' + o for o in fitting[0].overrides)} (estimate {format_bytes(fitting[0].plan.total)})"
        if fitting
        else "use a smaller model or micro-batch"
    )
    where, command = device_type, "`cockpit plan`"
    if parallel != "single":
        where = f"each {device_type} device ({parallel} over {world_size} ranks)"
        command = f"`cockpit plan --nproc {world_size} --parallel {parallel}`"
    raise ConfigError(
        f"{cfg.name} will not fit: estimated peak {format_bytes(plan.total)} of {format_bytes(capacity)} "
        f"on {where}; {hint}; {command} lists every option"
    )
