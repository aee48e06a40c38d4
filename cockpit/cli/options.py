"""Options several subcommands share, defined once so their names and help agree."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from engine.config import DEFAULT_PRESET


def add_set_option(parser: argparse.ArgumentParser, example: str = "optim.lr=3e-4") -> None:
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"override a preset value, e.g. --set {example} (repeatable)",
    )


def add_presets_dir_option(parser: argparse.ArgumentParser, dest: str = "presets_dir") -> None:
    parser.add_argument(
        "--presets-dir",
        dest=dest,
        action="append",
        default=[],
        metavar="DIR",
        help="extra folder of presets (repeatable; later ones win)",
    )


def add_run_options(parser: argparse.ArgumentParser, headless: bool = True) -> None:
    """The options of a run (`train`, and `start` without --headless)."""
    parser.add_argument(
        "--preset", default=None, help=f"preset name or path to a .toml file (default: '{DEFAULT_PRESET}')"
    )
    parser.add_argument(
        "--data",
        metavar="PATH",
        help="local text file or folder to train on (or the local copy of the preset's corpus); "
        "with --resume, where the run's corpus is now (its sha256 must match)",
    )
    parser.add_argument(
        "--allow-data-change",
        action="store_true",
        help="with --resume: train on the corpus even though its sha256 is not the recorded one",
    )
    add_set_option(parser)
    parser.add_argument(
        "--run-dir",
        metavar="DIR",
        help="where checkpoints and metrics.jsonl go (default: runs/PRESET-TIME)",
    )
    parser.add_argument(
        "--resume",
        metavar="RUN_DIR",
        help="continue the run in RUN_DIR (or from one checkpoint file)",
    )
    parser.add_argument(
        "--init-from",
        metavar="SOURCE",
        help="start from existing weights (step 0, a fresh optimizer; the model's shape is "
        "theirs): a Hugging Face GPT-2 directory, a nanoGPT ckpt.pt, or a cockpit run "
        "directory, checkpoint or .safetensors export (same as --set model.init_from=SOURCE)",
    )
    add_presets_dir_option(parser)
    if headless:
        parser.add_argument(
            "--headless",
            action="store_true",
            help="no UI: print progress lines (for batch jobs and CI)",
        )
    parser.add_argument(
        "--no-mouse",
        action="store_true",
        help="turn off mouse tracking (saves bandwidth over slow SSH links)",
    )
    parser.add_argument("--no-telemetry", action="store_true", help="do not poll GPU/CPU telemetry")
    add_notify_options(parser)
    parser.add_argument(
        "--notify",
        action="append",
        default=[],
        metavar="[FORMAT:]URL",
        help="post a notice to URL when the run finishes, fails, stops on a fault, stalls or "
        "reaches its target (repeatable); FORMAT: json, ntfy, slack or discord, inferred from the "
        "URL when left out; added to the endpoints of $XDG_CONFIG_HOME/cockpit/notify.toml",
    )
    parser.add_argument(
        "--tensorboard",
        action="store_true",
        help="also write TensorBoard event files to RUN_DIR/tensorboard (same as --set log.tensorboard=true)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve the live run's figures to Prometheus on 127.0.0.1:PORT/metrics, with the token "
        "in RUN_DIR/metrics.token (same as --set log.metrics_port=PORT)",
    )


def add_notify_options(parser: argparse.ArgumentParser) -> None:
    """How the app tells you a run finished, failed, paused on a fault or stalled."""
    parser.add_argument(
        "--bell",
        action="store_true",
        help="ring the terminal bell too when the run finishes, fails, pauses on a fault or stalls",
    )
    parser.add_argument(
        "--no-notify",
        action="store_true",
        help="no desktop notifications (OSC 9/777, through SSH and tmux) for those events",
    )


def notify_settings(args: argparse.Namespace) -> Any:
    from cockpit.app.notifications import NotifySettings

    return NotifySettings(desktop=not args.no_notify, bell=args.bell)


def add_runs_root_option(parser: argparse.ArgumentParser, default: str = "runs") -> None:
    """The DIR where `ps` and `runs` look for run directories, and their --json."""
    parser.add_argument(
        "root", nargs="?", default=default, metavar="DIR",
        help=f"where to look for run directories, a few levels deep (default: {default})",
    )  # fmt: skip


def runs_root_problem(subcommand: str, root: str) -> str | None:
    """The one line refusing a DIR that is not a directory (None when it is one)."""
    path = Path(root)
    if not path.exists():
        return f"cockpit {subcommand}: {root}: no such directory; name the folder your runs are in: cockpit {subcommand} DIR"
    if not path.is_dir():
        return f"cockpit {subcommand}: {root} is a file, not a directory; name the folder your runs are in: cockpit {subcommand} DIR"
    return None


def add_llm_arguments(group: Any, llm_help: str) -> None:
    """An OpenAI-compatible endpoint's options (the research search's and the autopilot's):
    `--llm URL` (what it proposes, `llm_help`), `--model`, and where its API key is read from."""
    group.add_argument("--llm", metavar="URL", help=llm_help)
    group.add_argument("--model", metavar="NAME", help="the model the --llm endpoint serves")
    group.add_argument(
        "--llm-key-env",
        metavar="VAR",
        default="OPENAI_API_KEY",
        help="the environment variable holding the endpoint's API key (default: OPENAI_API_KEY; "
        "unset: none, as local servers need); the key is never written to any file",
    )
