"""Every check of a run's command line that can fail before anything starts: a refusal is a
ConfigError (one line, exit 2) with nothing touched."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from engine.config import DEFAULT_PRESET, ConfigError, parse_override


def preflight(args: argparse.Namespace) -> str | None:
    """Every check of a run's command line that can fail before anything starts (a ConfigError,
    one line): the preset and its --set, the corpus, the run directory, a resume. Returns the
    message to print instead of training when a resumed run is already finished."""
    init_from = getattr(args, "init_from", None)
    take_init_from(args)
    # Validate the preset before anything else so a typo is one line, not a UI.
    if args.resume is None:
        from engine.config import load_replay

        if args.allow_data_change:
            raise ConfigError(
                "--allow-data-change applies to --resume RUN_DIR only: a new run records "
                "whatever corpus it starts on; drop the flag"
            )
        # a run's config.toml: its [[changes]] checked from the starting values, step by step
        cfg = load_replay(args.preset or DEFAULT_PRESET, args.overrides, args.presets_dir).config
        if cfg.model.init_from:
            args.overrides = [*args.overrides, *check_init_from(cfg, args.overrides)]
        check_log_packages(cfg)
        check_device(cfg)
        check_float8(cfg)
        check_corpus_exists(cfg, args.data)
        check_tokenizer(cfg)
        if args.run_dir and torchrun_rank() == 0:  # rank 0 locks it: the others use it too
            check_run_dir_free(Path(args.run_dir))
        if args.run_dir:  # private, and holding no run: one run per directory
            from engine.rundir import check_new_run_dir

            check_new_run_dir(Path(args.run_dir))
    else:
        if not Path(args.resume).exists():
            raise ConfigError(f"--resume {args.resume}: no such run directory or checkpoint")
        from engine.rundir import branch_overrides

        # a branch not yet trained resumes with the settings it was forked with, then these
        args.overrides = [*branch_overrides(Path(args.resume)), *args.overrides]
        for text in args.overrides:
            parse_override(text)
        resumed = Path(args.resume)
        if init_from:
            check_resume_init_from(args.resume, init_from)
        # a run directory, or the one holding the checkpoint named (a file, or a sharded .dcp)
        resumed_dir = resumed if resumed.is_dir() and resumed.suffix != ".dcp" else resumed.parent
        if torchrun_rank() == 0:
            check_run_dir_free(resumed_dir)
        from engine.rundir import check_run_dir

        check_run_dir(resumed_dir)  # ours, and no one else can write in it or above it
        finished = check_resume(args)
        if finished is None:
            check_resume_corpus(args)
        return finished
    return None


def take_init_from(args: argparse.Namespace) -> None:
    """--init-from SOURCE as the --set it stands for, so that the run a background start
    spawns, the app's first run and a resume's rules all see it."""
    source = getattr(args, "init_from", None)
    if source:
        args.overrides = [*args.overrides, f"model.init_from={json.dumps(source, ensure_ascii=False)}"]
        args.init_from = None


def check_init_from(cfg: Any, overrides: list[str]) -> list[str]:
    """The weights a new run starts from, checked before anything starts (the source reads,
    its tokenizer is the corpus's, no --set model.* conflicts with its shape, its tensors fit
    that shape); returns the --set lines that give the run the source's shape and its absolute
    path, for every part that builds the run from the command line."""
    from engine.checkpoint import (
        REQUIRED,
        check_fits,
        check_tokenizer_name,
        open_source,
        required_refusal,
        shaped_overrides,
    )

    if cfg.model.init_from == REQUIRED:
        raise required_refusal(cfg.name)
    source = open_source(cfg.model.init_from)
    check_tokenizer_name(source, cfg.data.tokenizer)
    user = {}
    for text in overrides:
        section, name, value = parse_override(text)
        if section == "model":
            user[name] = value
    shaped = shaped_overrides(source, user)
    for key, value in shaped.items():
        setattr(cfg.model, key, value)
    check_fits(source, cfg.model)
    shaped["init_from"] = str(source.path)
    return [f"model.{key}={json.dumps(value, ensure_ascii=False)}" for key, value in shaped.items()]


def check_resume(args: argparse.Namespace) -> str | None:
    """Check a resume before anything starts, so a refusal is exit 2 with nothing touched: the
    checkpoint reads, --run-dir is not given, and every --set is one a resume may apply (the
    rules the run itself follows). Returns the message to print when the run is already
    finished."""
    from engine.checkpoint import CheckpointError, load_checkpoint, plan_resume
    if args.run_dir:
        raise ConfigError(
            f"--run-dir {args.run_dir} with --resume {args.resume}: a resumed run continues in its "
            "own directory; drop --run-dir (to branch a run, copy its directory and resume the copy)"
        )
    try:  # memory-mapped: the weights are not read
        state = load_checkpoint(Path(args.resume), mmap=True)
    except CheckpointError as e:
        raise ConfigError(str(e)) from None
    plan = plan_resume(state, args.overrides, state["_path"], label=args.resume)
    check_log_packages(plan.config)
    if plan.finished is None:  # one that trains on: on the device it names (this machine's?)
        check_device(plan.config)
    return plan.finished


def check_resume_init_from(resume: str, given: str) -> None:
    """--init-from with --resume: fine when it names the source the run started from, else one
    line that says which of the two to drop (not a resume's refusal of a --set)."""
    from engine.checkpoint import CheckpointError, load_checkpoint, same_source

    try:  # memory-mapped: the weights are not read
        state = load_checkpoint(Path(resume), mmap=True)
    except CheckpointError:
        return  # check_resume says what is wrong with this checkpoint
    recorded = str(state["config"].get("model", {}).get("init_from") or "")
    if same_source(recorded, given):
        return
    started = f"it started from {recorded}" if recorded else "it started from fresh weights"
    raise ConfigError(
        f"--init-from {given} with --resume {resume}: a resumed run's weights come from its own "
        f"checkpoint ({started}); drop --init-from to resume it, or drop --resume to start a new "
        f"run from {given}"
    )


def check_run_dir_free(run_dir: Path) -> None:
    """A run directory a live engine holds: one line and exit 2, before anything is touched
    (a resume from an older checkpoint would otherwise move that run's newer checkpoints)."""
    from engine.rundir import check_not_in_use

    check_not_in_use(run_dir)


def check_corpus_exists(cfg: Any, data_path: str | None) -> None:
    """A corpus path that names nothing usable (missing, no text files in the folder): one line
    and exit 2 before anything starts. What is inside is read by the run (a bad record there is
    the run's failure, with the same one line); Tiny Shakespeare may still be downloaded."""
    if cfg.data.source == "tinyshakespeare" and data_path is None:
        return
    from engine.data import DataError, resolve_source

    try:
        resolve_source(cfg.data, data_path, download=False)
    except DataError as e:
        raise ConfigError(str(e)) from None


def check_device(cfg: Any) -> None:
    """train.device naming a device this machine lacks (cuda without CUDA, mps without MPS, a
    bad name): the run's own refusal, one line and exit 2 before anything starts. 'auto' and
    'cpu' always resolve, and need no torch here."""
    if cfg.train.device in ("auto", "cpu"):
        return
    from engine.train import select_device

    select_device(cfg.train.device)


def check_float8(cfg: Any) -> None:
    """train.float8 that no run could start with here (no torchao, a device without float8,
    model.n_embd not a multiple of 16): the run's own refusal, one line and exit 2 before
    anything starts."""
    if cfg.train.float8 == "off":
        return
    from engine.model import check_float8 as check
    from engine.train import select_device

    check(cfg.train.float8, select_device(cfg.train.device), cfg.model.n_embd)


def check_tokenizer(cfg: Any) -> None:
    """A BPE tokenizer the run could not load (its tiktoken file not cached, offline): the
    run's own refusal, one line and exit 2 before anything starts."""
    from engine.data import DataError, check_tokenizer_loads

    try:
        check_tokenizer_loads(cfg.data.tokenizer)
    except DataError as e:
        raise ConfigError(str(e)) from None


def check_log_packages(cfg: Any) -> None:
    """`[log]` sinks whose package is missing, or whose port is taken: one line and exit 2,
    before anything starts."""
    if cfg.log.tensorboard:
        from engine.rundir import summary_writer_class

        summary_writer_class()
    if torchrun_rank() == 0:  # rank 0 alone serves the endpoint
        from engine.rundir import check_metrics_port

        check_metrics_port(cfg.log.metrics_port)


def check_resume_corpus(args: argparse.Namespace) -> None:
    """Refuse a resume whose corpus is gone or changed before anything starts (exit 2)."""
    from engine.checkpoint import CheckpointError, load_checkpoint
    from engine.config import config_from_dict
    from engine.data import DataError, resume_data_path

    try:  # memory-mapped: the weights are not read
        state = load_checkpoint(Path(args.resume), mmap=True)
        cfg = config_from_dict(state["config"], source=state["_path"])
    except (CheckpointError, ConfigError):
        return  # check_resume (or the run itself) says what is wrong with this checkpoint
    try:
        resume_data_path(state, cfg.data, args.data, args.allow_data_change)
    except DataError as e:  # refused, or --data names nothing usable
        raise ConfigError(f"--resume {args.resume}: {e}") from None


def torchrun_rank() -> int:
    """This process's rank under torchrun (0 without it)."""
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0
