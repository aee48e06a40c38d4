"""`cockpit presets`: list the presets and where they come from; `presets show` prints one
resolved, as TOML that is itself a preset."""

from __future__ import annotations

import argparse
from pathlib import Path

from cockpit.cli.options import add_presets_dir_option, add_set_option

NAME = "presets"
HELP = "list the presets and where they come from; `presets show NAME` prints one resolved"
EPILOG = (
    "Examples: cockpit presets show tiny --set optim.lr=2e-3 > mine.toml; "
    "cockpit train --preset mine.toml"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    add_presets_dir_option(parser)
    # For shell completion and scripts: hidden from --help, the list is what people read.
    parser.add_argument("--names", action="store_true", help=argparse.SUPPRESS)
    actions = parser.add_subparsers(
        dest="presets_action", metavar="ACTION", help="what to do (default: list the presets)"
    )
    show = actions.add_parser(
        "show",
        help="print a preset resolved (extends and --set applied) as commented TOML",
        description="Print a preset resolved (extends and --set applied) as TOML, each key's "
        "help above it. Saved to a file, the output is itself a preset.",
    )
    show.add_argument("preset", metavar="NAME|PATH", help="preset name or path to a .toml file")
    add_set_option(show)
    # Its own dest: a subparser's defaults would otherwise replace `presets --presets-dir`.
    add_presets_dir_option(show, dest="show_presets_dir")


def run(args: argparse.Namespace) -> int:
    if getattr(args, "presets_action", None) == "show":
        extra_dirs = [*args.presets_dir, *args.show_presets_dir]
        print(show_preset(args.preset, args.overrides, extra_dirs), end="")
        return 0
    from engine.config import discover, search_dirs

    presets = discover(args.presets_dir)
    if args.names:
        for name in presets:
            print(name)
        return 0
    width = max((len(n) for n in presets), default=10)
    for info in presets.values():
        print(f"{info.name:<{width}}  {info.origin:<13}  {info.description}")
    print("\nsearched (later wins): " + ", ".join(str(d) for d, _ in search_dirs(args.presets_dir)))
    return 0


def show_preset(name_or_path: str, overrides: list[str], extra_dirs: list[str]) -> str:
    """The preset resolved, as TOML with a header saying where it came from."""
    from engine.config import config_to_toml, extends_chain, load_preset

    cfg = load_preset(name_or_path, overrides, extra_dirs)  # a bad name or key: ConfigError
    chain = extends_chain(name_or_path, extra_dirs)
    return config_to_toml(cfg, header=show_header(name_or_path, chain, overrides))


def show_header(name_or_path: str, chain: list[Path], overrides: list[str]) -> str:
    lines = [f"Preset '{name_or_path}' resolved, every key written: {chain[0]}"]
    if len(chain) > 1:
        lines.append("extends: " + " -> ".join(str(p) for p in chain[1:]))
    if overrides:
        lines.append("with: " + " ".join(f"--set {o}" for o in overrides))
    lines.append("Saved to a file, this is a preset: cockpit train --preset FILE.toml")
    return "\n".join(lines)
