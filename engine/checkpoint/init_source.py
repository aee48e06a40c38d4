"""Where the weights a run starts from are (`model.init_from`): a path, or a model name a
Hugging Face cache on this machine already holds (nothing is ever downloaded); and the one-line
refusals of a source. Torch-free: a resume's rules compare sources with it.
"""

from __future__ import annotations

import os
from pathlib import Path

from engine.config.run_config import ConfigError
from engine.config.user_files import UserFileError, check_regular_file

REQUIRED = "required"  # a preset's init_from: the run needs --init-from to start
WHAT_IT_MAY_BE = (
    "a Hugging Face GPT-2 directory (config.json + model.safetensors or pytorch_model.bin), a "
    "nanoGPT ckpt.pt, or a cockpit run directory, checkpoint or .safetensors export"
)


class InitFromError(ConfigError):
    """A source that cannot start this run; the message (one line) says why and what to do."""


def refusal(given: str, why: str) -> InitFromError:
    return InitFromError(f"--init-from {given}: {why}")


def required_refusal(preset: str | None = None) -> InitFromError:
    """The refusal of a run whose preset needs weights to start from and was given none."""
    who = f"preset {preset}" if preset else "this run (model.init_from = 'required')"
    return InitFromError(
        f"{who} fine-tunes existing weights: give them with --init-from DIR, DIR being "
        f"{WHAT_IT_MAY_BE} (cockpit downloads nothing)"
    )


def hf_cache_dirs() -> list[Path]:
    """Where a Hugging Face hub cache may be (the environment's first)."""
    found = []
    if os.environ.get("HF_HUB_CACHE"):
        found.append(Path(os.environ["HF_HUB_CACHE"]))
    if os.environ.get("HF_HOME"):
        found.append(Path(os.environ["HF_HOME"]) / "hub")
    found.append(Path.home() / ".cache" / "huggingface" / "hub")
    return [p.expanduser() for p in found]


def cached_snapshot(name: str) -> Path | None:
    """The snapshot directory a Hugging Face cache already holds for a model `name` (`gpt2`,
    `openai-community/gpt2`): the one refs/main names, else the newest; None when none."""
    repos = [name] if "/" in name else [name, f"openai-community/{name}"]
    for hub in hf_cache_dirs():
        for repo in repos:
            folder = hub / ("models--" + repo.replace("/", "--"))
            try:
                main = (folder / "refs" / "main").read_text().strip()
            except OSError:
                main = ""
            snapshots = folder / "snapshots"
            if main and (snapshots / main / "config.json").is_file():
                return (snapshots / main).absolute()
            try:
                held = [p for p in snapshots.iterdir() if (p / "config.json").is_file()]
            except OSError:
                continue
            if held:
                return max(held, key=lambda p: p.stat().st_mtime).absolute()
    return None


def source_path(given: str) -> Path:
    """The absolute path `given` names: a file or directory, else a model name a Hugging Face
    cache holds; an InitFromError when there is none."""
    path = Path(given).expanduser()
    if path.exists():
        return Path(os.path.abspath(path))  # `..` resolved, links kept as named
    looks_like_name = not given.startswith((".", "/", "~")) and given.count("/") <= 1
    if looks_like_name:
        cached = cached_snapshot(given)
        if cached is not None:
            return cached
    cache = f", and no Hugging Face cache on this machine holds {given}" if looks_like_name else ""
    raise refusal(
        given, f"no such file or directory{cache}; give {WHAT_IT_MAY_BE} (cockpit downloads nothing)"
    )


def refuse_unless_regular(given: str, file: Path) -> None:
    """Refuse a source file that is not a regular file (a FIFO would block its read for ever,
    past the first SIGTERM; a device never ends), in one line and without opening it."""
    try:
        check_regular_file(file, "a weights file")
    except UserFileError as e:
        raise refusal(given, str(e)) from None


def same_source(recorded: str, given: str) -> bool:
    """Whether `given` names what a run recorded as its init_from (an absolute path)."""
    if recorded == given:
        return True
    if not recorded or not given:
        return False
    try:
        return source_path(given) == Path(recorded)
    except InitFromError:
        return False
