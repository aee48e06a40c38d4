"""`cockpit plan`: estimate peak memory before training: will it fit, and what to change."""

from __future__ import annotations

import argparse

from cockpit.subcommands.options import add_presets_dir_option, add_set_option
from engine.presets import DEFAULT_PRESET

NAME = "plan"
HELP = "estimate peak memory before training: will it fit, and what to change"
EPILOG = "Example: cockpit plan --preset local-300m --device-memory 24GB --set train.batch_size=16"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.add_argument("--preset", default=None, help=f"preset name or path (default: '{DEFAULT_PRESET}')")
    parser.add_argument(
        "--device-memory",
        metavar="SIZE",
        help="plan for a GPU with this much memory, e.g. 24GB (default: this machine's device)",
    )
    add_set_option(parser, "train.batch_size=16")
    parser.add_argument(
        "--data",
        metavar="PATH",
        help="the corpus to train on: its characters size a char-level vocabulary",
    )
    add_presets_dir_option(parser)


def run(args: argparse.Namespace) -> int:
    from engine.plan import format_plan, parse_size, plan_memory, suggest_fixes, vocab_size_for
    from engine.presets import load_preset

    cfg = load_preset(args.preset or DEFAULT_PRESET, args.overrides, args.presets_dir)
    if args.device_memory is not None:  # "" and "0" are refused, not ignored
        capacity = parse_size(args.device_memory)
        device_type = "cpu" if cfg.train.device == "cpu" else "cuda"
    else:
        from engine.device import device_capacity, select_device

        device = select_device(cfg.train.device)
        device_type = device.type
        capacity = device_capacity(device)
    vocab, how = vocab_size_for(cfg, args.data)
    plan = plan_memory(cfg, vocab, device_type, capacity)
    print(format_plan(cfg, plan, suggest_fixes(cfg, vocab, device_type, capacity)))
    print(
        f"\nvocabulary {vocab:,} ({how}); activations per Korthikanti et al. 2022 with fused attention, logits at 12 B each"
    )
    return 0 if plan.fits else 1
