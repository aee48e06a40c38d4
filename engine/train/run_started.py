"""The RunStarted event: everything the UI and the metrics file learn about a run as it starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from engine.config.run_config import RunConfig
from engine.data.preparation import PreparedData
from engine.data.shape_schedule import ShapeSchedule
from engine.events import RunStarted
from engine.model.gpt import GPT
from engine.optim.schedule import planned_curve
from engine.plan.flops import Peak
from engine.plan.planner import MemoryPlan


def run_started(
    cfg: RunConfig,
    *,
    run_dir: Path,
    device: torch.device,
    dtype: torch.dtype,
    model: GPT,
    data: PreparedData,
    start_step: int,
    resumed_from: Any,
    memory_plan: MemoryPlan,
    flops_per_token: float,
    peak: Peak,
    notes: list[str],
    train_time_s: float,
    planned_lr: tuple[tuple[int, float], ...] | None = None,
    schedule: ShapeSchedule | None = None,
    tokens_schedule: tuple[tuple[int, int], ...] | None = None,
) -> RunStarted:
    """`planned_lr`: the schedule as the run followed it (a resume's, `planned_as_followed`);
    None: the schedule of `cfg` over the whole run. `schedule`: the shapes the run trains
    (None: `cfg`'s); `tokens_schedule`: its tokens a step as the run followed them (a resume's,
    `tokens_as_followed`; None: `schedule`'s from step 0)."""
    if schedule is None:
        schedule = ShapeSchedule.of(cfg)
    return RunStarted(
        run_dir=str(run_dir),
        preset=cfg.name,
        description=cfg.description,
        config=cfg.to_dict(),
        device=str(device),
        dtype=str(dtype).removeprefix("torch."),
        n_params=model.num_params(non_embedding=False),
        n_params_non_embedding=model.num_params(),
        vocab_size=data.tokenizer.vocab_size,
        tokenizer=data.tokenizer.name,
        train_tokens=len(data.train),
        val_tokens=len(data.val),
        start_step=start_step,
        max_steps=cfg.train.max_steps,
        tokens_per_step=cfg.tokens_per_step,
        planned_lr=planned_curve(cfg) if planned_lr is None else planned_lr,
        resumed_from=resumed_from,
        memory_plan=memory_plan.as_dict(),
        flops_per_token=flops_per_token,
        peak_flops=peak.flops,
        peak_source=peak.source,
        notes=tuple(notes),
        data_source=data.record,
        train_time_s=train_time_s,
        tokens_schedule=schedule.changes(cfg.train.max_steps) if tokens_schedule is None else tokens_schedule,
    )
