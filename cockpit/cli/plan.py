"""`cockpit plan`: estimate peak memory before training: will it fit, and what to change."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from cockpit.cli.options import add_presets_dir_option, add_set_option
from engine.config import DEFAULT_PRESET

if TYPE_CHECKING:
    from engine.config import RunConfig

NAME = "plan"
HELP = "estimate peak memory before training: will it fit, and what to change"
EPILOG = (
    "Examples: cockpit plan --preset local-300m --device-memory 24GB --set train.batch_size=16; "
    "cockpit plan --preset local-300m --device-memory 24GB --nproc 8 --parallel fsdp"
)
PARALLEL_CHOICES = ("ddp", "fsdp", "auto")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.add_argument("--preset", default=None, help=f"preset name or path (default: '{DEFAULT_PRESET}')")
    parser.add_argument(
        "--device-memory",
        metavar="SIZE",
        help="plan for a GPU with this much memory, e.g. 24GB (default: this machine's device)",
    )
    parser.add_argument(
        "--nproc",
        metavar="N",
        default="1",
        help="plan each device of a torchrun world of N processes (default: 1)",
    )
    parser.add_argument(
        "--parallel",
        metavar="MODE",
        default=None,
        help="with --nproc N: ddp (a replica per rank), fsdp (sharded) or auto (ddp when one "
        "device fits the model, else fsdp); default: the config's train.parallel when it names "
        "ddp or fsdp, else ddp",
    )
    add_set_option(parser, "train.batch_size=16")
    parser.add_argument(
        "--data",
        metavar="PATH",
        help="the corpus to train on: its characters size a char-level vocabulary",
    )
    add_presets_dir_option(parser)
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the plan as JSON (bytes as numbers, the fixes with their --set), for scripts",
    )


def parse_nproc(text: str) -> int:
    from engine.config import ConfigError

    try:
        nproc = int(text)
    except ValueError:
        nproc = 0
    if nproc < 1:
        raise ConfigError(f"--nproc {text!r}: expected a number of processes, 1 or more, like 8")
    return nproc


def choose_parallel(args: argparse.Namespace, cfg: RunConfig, nproc: int) -> str:
    """The mode asked for ("ddp", "fsdp" or "auto"); one-line ConfigErrors for what cannot be."""
    from engine.config import ConfigError

    mode = args.parallel
    if mode is None:
        mode = cfg.train.parallel if cfg.train.parallel in ("ddp", "fsdp") else "ddp"
    if mode not in PARALLEL_CHOICES:
        raise ConfigError(f"--parallel {mode!r}: expected one of {', '.join(PARALLEL_CHOICES)}")
    if nproc == 1 and args.parallel in ("fsdp", "ddp"):
        raise ConfigError(
            f"--parallel {args.parallel} needs --nproc 2 or more (one process trains unsharded, "
            "without DDP); give --nproc N, or drop --parallel"
        )
    return mode


def resolve_world(cfg: RunConfig, nproc: int, mode: str, fits_one_device: bool) -> str:
    """The mode the engine would train in ("single", "ddp" or "fsdp"), refused as
    `parallel_plan` refuses it (the FSDP optimizer message in this subcommand's words)."""
    from engine.config import ConfigError
    from engine.distributed import FSDP_OPTIMIZERS, World, parallel_plan

    chosen = ("ddp" if fits_one_device else "fsdp") if mode == "auto" else mode
    why = " (auto: the model does not fit one device)" if mode == "auto" else ""
    if nproc > 1 and chosen == "fsdp" and cfg.optim.name not in FSDP_OPTIMIZERS:
        raise ConfigError(
            f"--parallel fsdp{why} shards every matrix across ranks, and optim.name="
            f"{cfg.optim.name} needs whole matrices; use --set optim.name=adamw (or lion), "
            "or --parallel ddp"
        )
    pinned = replace(cfg, train=replace(cfg.train, parallel=chosen))
    return parallel_plan(pinned, World(world_size=nproc)).mode  # refuses an unshared grad_accum


def run(args: argparse.Namespace) -> int:
    from engine.config import load_preset, parse_size
    from engine.plan import format_plan, plan_memory, suggest_fixes, vocab_size_for

    cfg = load_preset(args.preset or DEFAULT_PRESET, args.overrides, args.presets_dir)
    nproc = parse_nproc(args.nproc)
    mode = choose_parallel(args, cfg, nproc)
    if args.device_memory is not None:  # "" and "0" are refused, not ignored
        capacity = parse_size(args.device_memory)
        device_type = "cpu" if cfg.train.device == "cpu" else "cuda"
    else:
        from engine.train import device_capacity, select_device

        device = select_device(cfg.train.device)
        device_type = device.type
        capacity = device_capacity(device)
    vocab, how = vocab_size_for(cfg, args.data)
    fits_alone = bool(plan_memory(cfg, vocab, device_type, capacity).fits)
    parallel = resolve_world(cfg, nproc, mode, fits_alone)
    from engine.distributed import per_rank_batch

    cfg = per_rank_batch(cfg, nproc)
    plan = plan_memory(cfg, vocab, device_type, capacity, nproc, parallel)
    fixes = suggest_fixes(cfg, vocab, device_type, capacity, nproc, parallel)
    if args.json:
        print(json.dumps(plan_json(cfg.name, plan, fixes, vocab), indent=2))
        return 0 if plan.fits else 1
    print(format_plan(cfg, plan, fixes))
    from engine.model import chunk_tokens_for, padded_vocab_size

    multiple = cfg.model.vocab_multiple
    padded = padded_vocab_size(vocab, multiple)
    head = f", padded to {padded:,} (model.vocab_multiple = {multiple})" if padded != vocab else ""
    tokens = cfg.train.batch_size * cfg.model.block_size
    chunk = chunk_tokens_for(padded, tokens)
    loss = (
        "the loss on the whole micro-batch's logits (12 B each)"
        if chunk >= tokens
        else f"the loss in chunks of {chunk:,} tokens (the full logits never held)"
    )
    if cfg.train.float8 != "off" and chunk < tokens:  # a float8 head's matmul is never chunked
        loss = "the loss on the whole micro-batch's logits (12 B each: a float8 head is not chunked)"
    print(
        f"\nvocabulary {vocab:,} ({how}){head}; activations per Korthikanti et al. 2022"
        f" with fused attention; {loss}"
    )
    return 0 if plan.fits else 1


def plan_json(preset: str, plan: Any, fixes: list[Any], vocab: int) -> dict[str, Any]:
    """`cockpit plan --json`: the figures the table prints, unrounded; capacity and fits are
    null when the device's memory is unknown. The fixes are listed, as the table lists them, only
    when the plan does not fit or may not."""
    shown = fixes if not plan.fits else []
    return {
        "preset": preset,
        "device": plan.device,
        "capacity": plan.capacity,
        "fits": plan.fits,
        "n_params": plan.n_params,
        "vocab_size": vocab,
        "parallel": plan.parallel,
        "world_size": plan.world_size,
        "memory": {name: value for name, value in plan.rows()},
        "total": plan.total,
        "fixes": [
            {
                "description": fix.description,
                "set": list(fix.overrides),
                "total": fix.plan.total,
                "fits": fix.plan.fits,
            }
            for fix in shown
        ],
    }
