"""The memory plan as text (`cockpit plan`): the configuration, how a torchrun world divides the
work, each part's bytes and share of the device, the verdict, what the distributed rows estimate
rather than count, and the fixes with their new peaks.
"""

from __future__ import annotations

from engine.config.byte_sizes import format_bytes
from engine.config.run_config import RunConfig
from engine.data.shape_schedule import ShapeSchedule
from engine.distributed.parallel import FSDP_OPTIMIZERS
from engine.plan.fixes import Fix
from engine.plan.planner import MemoryPlan, compute_dtype
from engine.plan.recompute import Recompute


def world_lines(cfg: RunConfig, plan: MemoryPlan) -> list[str]:
    """How a distributed plan divides the work and the memory (nothing for one process)."""
    n = plan.world_size
    if plan.parallel == "single":
        return []
    t = cfg.train
    lines = [
        f"world: {n} ranks ({plan.parallel}), each {t.grad_accum // n} of the {t.grad_accum} "
        f"micro-batches of {t.batch_size} x {cfg.model.block_size} tokens: {cfg.tokens_per_step:,} "
        "tokens per optimizer step across the world, the same as one process"
    ]
    if plan.parallel == "fsdp":
        lines.append(
            f"per device: 1/{n} of the weights, gradients and optimizer state (every parameter "
            f"split on its first dimension, rows rounded up to a multiple of {n}); optimizers "
            f"that shard: {', '.join(FSDP_OPTIMIZERS)}"
        )
    else:
        lines.append(
            "per device: a whole replica of the weights, gradients and optimizer state, "
            "and DDP's gradient buckets"
        )
    return lines


def estimate_notes(cfg: RunConfig, plan: MemoryPlan) -> list[str]:
    """What the distributed rows estimate rather than count."""
    if plan.parallel == "ddp":
        return [
            "DDP grad buckets: two copies of the gradients' size, an estimate: torch's default "
            "buckets hold a copy of every gradient for the all-reduce, and at the second step, "
            "where torch rebuilds them, the old set is still held; NCCL's own buffers are not counted"
        ]
    if plan.parallel == "fsdp":
        dtype = repr(compute_dtype(cfg, plan.device)).removeprefix("torch.")
        return [
            f"all-gathered: an estimate, in {dtype}: the root (embeddings, final norm, head) whole "
            "with its gradient, two blocks whole (the one computing, the next prefetched) and one "
            "block's gradient; the collectives' own buffers are not counted"
        ]
    return []


def recompute_text(cfg: RunConfig) -> str:
    """', recompute the MLP of every block' (model.grad_checkpoint), or nothing."""
    setting = Recompute.of(cfg.model)
    return f", {setting.describe()}" if setting.blocks else ""


def schedule_lines(cfg: RunConfig) -> list[str]:
    """A batch-size schedule or sequence-length warmup, and which shape the plan is of."""
    schedule = ShapeSchedule.of(cfg)
    if not schedule.on:
        return []
    shape = f"{cfg.train.batch_size} x {cfg.model.block_size}"
    last = cfg.train.max_steps - 1
    last_shape = (schedule.batch_at(last), schedule.seq_at(last))
    if last_shape != (schedule.batch_size, schedule.block_size):  # the run ends mid-ramp
        return [
            f"schedule: {schedule.describe()}",
            f"  planned at the configured shape, {shape}, which this run does not reach (its ramps "
            f"reach it at step {schedule.ramp_ends:,}, past the run's last, {last:,}); "
            f"step 0 trains {schedule.tokens_at(0):,} tokens, the last step "
            f"{schedule.tokens_at(last):,} ({last_shape[0]} sequences of {last_shape[1]})",
        ]
    return [
        f"schedule: {schedule.describe()}",
        f"  planned at the largest shape, {shape} (from step {schedule.ramp_ends:,} on); step 0 "
        f"trains {schedule.tokens_at(0):,} tokens, growing to {cfg.tokens_per_step:,} a step",
    ]


def format_plan(cfg: RunConfig, plan: MemoryPlan, fixes: list[Fix]) -> str:
    cap = plan.capacity
    where = (
        plan.device
        if plan.parallel == "single"
        else f"each of {plan.world_size} {plan.device} devices"
    )
    lines = [
        f"{cfg.name}: {plan.n_params / 1e6:.1f}M parameters, micro-batch {cfg.train.batch_size} x {cfg.model.block_size} tokens"
        f" x {cfg.train.grad_accum} accumulation, {cfg.optim.name}, {compute_dtype(cfg, plan.device).__repr__().removeprefix('torch.')}"
        f"{recompute_text(cfg)} on {where}",
        *world_lines(cfg, plan),
        *schedule_lines(cfg),
        "",
    ]
    for label, value in plan.rows():
        share = f"{100 * value / cap:5.1f}%" if cap else ""
        lines.append(f"  {label:<16} {format_bytes(value):>11}  {share}")
    total_share = f"{100 * plan.total / cap:5.1f}%" if cap else ""
    lines.append(f"  {'peak (estimate)':<16} {format_bytes(plan.total):>11}  {total_share}")
    if cap:
        lines.append(f"  {'capacity':<16} {format_bytes(cap):>11}")
        verdict = "fits" if plan.fits else "DOES NOT FIT"
        per = "" if plan.parallel == "single" else " per device"
        lines += ["", f"{verdict}: {format_bytes(plan.total)} of {format_bytes(cap)}{per}"]
    if notes := estimate_notes(cfg, plan):
        lines += ["", *notes]
    if fixes and (cap is None or not plan.fits):
        lines += ["", "to lower peak memory (each on its own; pass as --set):"]
        width = max(58, *(len(fix.description) for fix in fixes))  # the columns stay aligned
        for fix in fixes:
            mark = "fits" if fix.plan.fits else ("" if fix.plan.fits is None else "still too big")
            sets = " ".join("--set " + o for o in fix.overrides)
            lines.append(
                f"  {fix.description:<{width}} {format_bytes(fix.plan.total):>11}  {mark:<13} {sets}"
            )
    return "\n".join(lines)
