"""The `cockpit` command: the app by default, `train --headless` for batch jobs, `presets`.

Every user error ends as one line on stderr and exit status 2; no traceback reaches a user.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cockpit.durations import fmt_duration, fmt_rough_duration
from engine.config import ConfigError, parse_override
from engine.events import Event, RunState
from engine.presets import DEFAULT_PRESET

SUBCOMMANDS = ("train", "presets", "plan")
PLAN_EPILOG = (
    "Example: cockpit plan --preset local-300m --device-memory 24GB --set train.batch_size=16"
)


def _run_options(parser: argparse.ArgumentParser) -> None:
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
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a preset value, e.g. --set optim.lr=3e-4 (repeatable)",
    )
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
        "--presets-dir",
        action="append",
        default=[],
        metavar="DIR",
        help="extra folder of presets (repeatable; later ones win)",
    )
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cockpit",
        description="Train small GPT models and steer the run from the terminal.",
        epilog="Run `cockpit` alone to open the app on the default preset; `cockpit train --headless` for batch jobs.",
    )
    sub = parser.add_subparsers(dest="command")
    _run_options(sub.add_parser("train", help="train a preset (the app, or --headless)"))
    plan = sub.add_parser(
        "plan",
        help="estimate peak memory before training: will it fit, and what to change",
        epilog=PLAN_EPILOG,
    )
    plan.add_argument("--preset", default=None, help=f"preset name or path (default: '{DEFAULT_PRESET}')")
    plan.add_argument(
        "--device-memory",
        metavar="SIZE",
        help="plan for a GPU with this much memory, e.g. 24GB (default: this machine's device)",
    )
    plan.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    plan.add_argument("--data", metavar="PATH", help="corpus (for a char-level vocabulary)")
    plan.add_argument("--presets-dir", action="append", default=[], metavar="DIR")
    presets = sub.add_parser("presets", help="list the presets and where they come from")
    presets.add_argument("--presets-dir", action="append", default=[], metavar="DIR")
    return parser


def parse_args(argv: list[str]) -> argparse.Namespace:
    # `cockpit --preset x` is `cockpit train --preset x`: training is the default command.
    if not argv or (argv[0] not in SUBCOMMANDS and argv[0] not in ("-h", "--help")):
        argv = ["train", *argv]
    return build_parser().parse_args(argv)


class ProgressPrinter:
    """Headless progress: one step line at most every `interval_s`; evals, checkpoints,
    samples, alerts and state changes always."""

    def __init__(self, out: Callable[[str], None] = print, interval_s: float = 2.0) -> None:
        self.out = out
        self.interval_s = interval_s
        self._last = -float("inf")
        self._max_steps = 0
        self._start_step = 0
        self._t0 = time.monotonic()
        self._closed = False
        self._last_error = ""

    def _say(self, line: str) -> None:
        """Print a line; a reader that went away (`| head`, a closed pipe) must not stop the
        run: the metrics file has every record, so printing just ends."""
        if self._closed:
            return
        try:
            self.out(line)
        except BrokenPipeError:
            self._closed = True
            with contextlib.suppress(OSError, ValueError):
                # interpreter shutdown flushes stdout again: point it at /dev/null first
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())

    def __call__(self, event: Event) -> None:
        kind = event.kind
        if kind == "run_started":
            self._max_steps, self._start_step = event.max_steps, event.start_step
            self._t0 = time.monotonic()
            resumed = f", resumed from {event.resumed_from}" if event.resumed_from else ""
            self._say(
                f"{event.preset}: {event.n_params / 1e6:.2f}M parameters on {event.device} ({event.dtype}), "
                f"{event.tokenizer} vocab {event.vocab_size}, {event.train_tokens:,} train tokens; "
                f"run dir {event.run_dir}{resumed}"
            )
            for note in getattr(event, "notes", ()):
                self._say(f"resume: {note}")
        elif kind == "step":
            now = time.monotonic()
            if now - self._last < self.interval_s and event.step != self._max_steps:
                return
            self._last = now
            done = event.step - self._start_step
            eta = (now - self._t0) / done * (self._max_steps - event.step) if done else 0.0
            self._say(
                f"step {event.step:>6}/{self._max_steps} | loss {event.loss:.4f} | lr {event.lr:.2e} | "
                f"{event.tokens_per_s:,.0f} tok/s | ETA {fmt_duration(eta)}"
            )
        elif kind == "eval":
            scope = "whole val split" if event.full_split else "estimate"
            self._say(
                f"eval   {event.step:>6} | train {event.train_loss:.4f} | val {event.val_loss:.4f} ({scope}) | train time {fmt_duration(event.train_time_s)}"
            )
        elif kind == "sample":
            text = (event.prompt + event.text).replace("\n", "⏎ ")
            self._say(f"sample {event.step:>6} | {text[:160]}")
        elif kind == "checkpoint":
            self._say(f"saved  {event.step:>6} | {event.path} ({event.reason})")
        elif kind == "alert":
            if event.level == "error":
                self._last_error = event.message
            self._say(f"{event.level}: {event.message}")
        elif kind == "lr_changed":
            self._say(
                f"lr     {event.step:>6} | {event.old_lr:.2e} -> {event.new_lr:.2e} (x{event.scale:.3g} on the schedule)"
            )
        elif kind == "state" and event.state in RunState.ENDED:
            # a failure's reason was usually just printed as its error alert: not twice
            reason = event.reason if event.reason != self._last_error else ""
            self._say(f"{event.state} at step {event.step}" + (f": {reason}" if reason else ""))


def make_trainer(
    args: argparse.Namespace,
    preset: str | None = None,
    *,
    first: bool = True,
    sinks: list[Any] = (),
    interactive: bool = True,
) -> Any:
    """Build a (not yet started) Trainer from the command line; `preset` overrides --preset.

    --set, --data, --run-dir and --resume apply to the run named on the command line only,
    not to presets picked later from the app's menu.
    """
    from engine.presets import load_preset
    from engine.trainer import Trainer

    name = preset or args.preset or DEFAULT_PRESET
    resume = args.resume if first else None
    overrides = args.overrides if first else []
    # When resuming, the checkpoint's config is the base and --set applies on top of it.
    cfg = load_preset(name, [] if resume else overrides, args.presets_dir)
    return Trainer(
        cfg,
        run_dir=args.run_dir if first else None,
        data_path=args.data if first else None,
        resume=resume,
        resume_overrides=overrides if resume else (),
        sinks=sinks,
        telemetry=not args.no_telemetry,
        interactive=interactive,
        allow_data_change=args.allow_data_change if first else False,
    )


SIGNAL_REASONS = {"SIGINT": "SIGINT (ctrl+c)", "SIGTERM": "SIGTERM", "SIGHUP": "SIGHUP"}


def signal_reason(signum: int) -> str:
    """The reason a stop by this signal records in the run's final state."""
    name = signal.Signals(signum).name
    return SIGNAL_REASONS.get(name, name)


class StopSignals:
    """SIGINT, SIGTERM and SIGHUP, caught from the start of `cockpit train`.

    Each asks the run to stop at its next step boundary (checkpointing what was trained), with
    the signal's name as the recorded reason. A signal that comes before the run exists (while
    torch is imported or the corpus prepared) is kept and handed to the run once it is attached,
    rather than killing the process with nothing on disk. A second ctrl+c aborts at once.
    """

    def __init__(self) -> None:
        self.received: list[int] = []
        self.trainer: Any = None
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)):
            if sig is not None:
                self._previous[sig] = signal.signal(sig, self._on_signal)

    def restore(self, only: tuple[int, ...] | None = None) -> None:
        """Put back the handlers there were before (all, or `only` these signals)."""
        for sig in list(self._previous):
            if only is None or sig in only:
                signal.signal(sig, self._previous.pop(sig))

    def attach(self, trainer: Any) -> None:
        """From now on signals stop `trainer`; one already received stops it now."""
        self.trainer = trainer
        if self.received:
            trainer.stop(checkpoint=True, reason=signal_reason(self.received[0]))

    def _on_signal(self, signum: int, _frame: Any) -> None:
        if self.received and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second ctrl+c: the user really wants out
        self.received.append(signum)
        name = signal.Signals(signum).name
        trainer = self.trainer
        if trainer is None or trainer.step == 0:
            what = "stopping before the first step (nothing trained yet: no checkpoint)"
        else:
            what = "saving a checkpoint and stopping"
        print(f"{name}: {what} (ctrl+c again to abort)", file=sys.stderr)
        if trainer is not None:
            trainer.stop(checkpoint=True, reason=signal_reason(signum))


def run_headless(args: argparse.Namespace, signals: StopSignals | None = None) -> int:
    if signals is None:
        signals = StopSignals()
        signals.install()
    trainer = make_trainer(args, sinks=[ProgressPrinter()], interactive=False)
    signals.attach(trainer)
    state = trainer.run()
    if state == "failed":
        return 1  # the reason is printed and is the final state record's
    return 0


def exit_when_ended(trainer: Any, grace_s: float, timeout_s: float = 300.0) -> None:
    """Wait for the run to end (its checkpoint written), then end the process after `grace_s`."""
    deadline = time.monotonic() + timeout_s
    while trainer is not None and trainer.state not in RunState.ENDED:
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    time.sleep(grace_s)
    os._exit(0)


FAR_STEP_S = 60.0  # a preset whose step takes at least this long here is far beyond this machine
BPE_VOCAB = {"r50k_base": 50257, "p50k_base": 50281, "cl100k_base": 100277, "o200k_base": 200019}


def preset_fit_warning(
    preset: str, presets_dir: list[str], known_peak: tuple[str, float] | None = None
) -> str:
    """Why `preset` is far beyond this machine ("" when it is not): its memory plan does not
    fit, or one optimizer step takes FAR_STEP_S or more even at the device's peak FLOP/s.

    `known_peak` is (device, FLOP/s) of the run on screen, reused when it ran on the same kind
    of device (measuring again while it trains would understate the peak). Uses torch (the
    meta-device model of `plan_memory`, a short matmul when no peak is known): call it off the
    UI thread.
    """
    import torch

    from engine.device import device_capacity, select_device
    from engine.flops import flops_per_token, measure_peak, table_peak
    from engine.plan import compute_dtype, format_bytes, plan_memory
    from engine.presets import load_preset

    try:
        cfg = load_preset(preset, [], presets_dir)
        device = select_device(cfg.train.device)
    except ConfigError as e:
        return str(e)
    capacity = device_capacity(device)
    tokenizer = cfg.data.tokenizer
    vocab = 256 if tokenizer == "char" else BPE_VOCAB.get(tokenizer, 50257)
    plan = plan_memory(cfg, vocab, device.type, capacity)
    m = cfg.model
    position = m.block_size * m.n_embd if m.pos_emb == "learned" else 0
    step_flops = flops_per_token(plan.n_params - position, m) * cfg.tokens_per_step
    peak = None
    if known_peak is not None and known_peak[0].split(":")[0] == device.type:
        peak = known_peak[1]
    elif device.type == "cuda":
        found = table_peak(torch.cuda.get_device_name(device), compute_dtype(cfg, "cuda"))
        peak = found.flops if found is not None else None
    if peak is None:
        peak = measure_peak(device, torch.float32, size=512, seconds=0.2).flops
    step_s = step_flops / peak
    fits = bool(plan.fits)
    if fits and step_s < FAR_STEP_S:
        return ""
    if device.type == "cpu":
        where = f"{os.cpu_count()} CPU cores even at their measured peak ({peak / 1e9:.0f} GFLOP/s)"
    else:
        where = f"{device} even at its peak ({peak / 1e12:.0f} TFLOP/s)"
    memory = f"needs ~{format_bytes(plan.total)} of memory; this machine has {format_bytes(capacity)}"
    text = f"{preset} is far beyond this machine: it {memory}"
    text += "." if fits else " (it does not fit: starting it is refused)."
    if step_s >= FAR_STEP_S:
        text += (
            f" One step ({cfg.tokens_per_step:,} tokens, {step_flops:.1e} FLOPs) takes"
            f" ~{fmt_rough_duration(step_s)} on {where}, {cfg.train.max_steps:,} steps"
            f" ~{fmt_rough_duration(step_s * cfg.train.max_steps)}"
            + (": it is sized for a GPU." if device.type == "cpu" else ".")
        )
    return text


def run_app(args: argparse.Namespace, signals: StopSignals | None = None) -> int:
    from cockpit.app import CockpitApp, run_app
    from cockpit.runs import format_exit_report
    from engine.data import data_available, is_stand_in_corpus
    from engine.presets import load_preset

    def preset_data_available(preset: str) -> tuple[bool, str, bool]:
        """(ok, note, stand-in) of a preset picked from the menu (--data is not applied)."""
        try:
            cfg = load_preset(preset, [], args.presets_dir)
        except ConfigError as e:
            return False, str(e), False
        return (*data_available(cfg.data), is_stand_in_corpus(cfg.data))

    def fit_warning(preset: str, known_peak: tuple[str, float] | None) -> str:
        return preset_fit_warning(preset, args.presets_dir, known_peak)

    first = [True]

    def factory(preset: str) -> Any:
        trainer = make_trainer(args, preset, first=first[0])
        first[0] = False
        return trainer

    app = CockpitApp(
        factory,
        args.preset or DEFAULT_PRESET,
        preset_dirs=args.presets_dir,
        data_available=preset_data_available,
        fit_warning=fit_warning,
    )
    def on_signal(signum: int, _frame: Any) -> None:
        # SIGHUP: the terminal is gone (the SSH link dropped); SIGTERM: a scheduler wants the
        # machine. Either way: checkpoint, stop and exit, as a confirmed quit does. With no
        # terminal left, restoring it can block forever, so once the run has ended the process
        # leaves on its own after a grace period.
        # The run records the signal as its reason (the quit that follows asks too late).
        trainer = app.trainer
        if trainer is not None:
            trainer.stop(checkpoint=True, reason=signal_reason(signum))
        if signum == getattr(signal, "SIGHUP", None):
            grace = 0.5
        else:
            app.call_later(app._quit_answer, True)
            grace = 10.0
        threading.Thread(target=exit_when_ended, args=(trainer, grace), daemon=True).start()

    for sig in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if sig is not None:
            signal.signal(sig, on_signal)
    if signals is not None:
        signals.restore(only=(signal.SIGINT,))  # in the app ctrl+c is a key: it asks, like q
        if signals.received:  # before the app was up: no run has started, nothing to save
            name = signal.Signals(signals.received[0]).name
            print(f"cockpit: {name} before the app started: no run was started", file=sys.stderr)
            return 0
    run_app(app, mouse=not args.no_mouse)
    # The terminal is restored: say where the run is and how to pick it up again.
    runs = app.exit_summary()
    print(format_exit_report(runs, forced=app.quit_forced))
    lost = app.quit_forced and bool(runs) and runs[-1].unsaved_steps > 0
    return 1 if lost else 0


def list_presets(args: argparse.Namespace) -> int:
    from engine.presets import discover, search_dirs

    presets = discover(args.presets_dir)
    width = max((len(n) for n in presets), default=10)
    for info in presets.values():
        print(f"{info.name:<{width}}  {info.origin:<13}  {info.description}")
    print("\nsearched (later wins): " + ", ".join(str(d) for d, _ in search_dirs(args.presets_dir)))
    return 0


def show_plan(args: argparse.Namespace) -> int:
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


def check_resume(args: argparse.Namespace) -> str | None:
    """Check a resume before anything starts, so a refusal is exit 2 with nothing touched: the
    checkpoint reads, --run-dir is not given, and every --set is one a resume may apply
    (engine/resume.py, the rules the run itself follows). Returns the message to print when
    the run is already finished."""
    from engine import checkpoint as ckpt
    from engine.resume import plan_resume

    if args.run_dir:
        raise ConfigError(
            f"--run-dir {args.run_dir} with --resume {args.resume}: a resumed run continues in its "
            "own directory; drop --run-dir (to branch a run, copy its directory and resume the copy)"
        )
    try:  # memory-mapped: the weights are not read
        state = ckpt.load_checkpoint(Path(args.resume), mmap=True)
    except ckpt.CheckpointError as e:
        raise ConfigError(str(e)) from None
    return plan_resume(state, args.overrides, state["_path"], label=args.resume).finished


def check_resume_corpus(args: argparse.Namespace) -> None:
    """Refuse a resume whose corpus is gone or changed before anything starts (exit 2)."""
    from engine import checkpoint as ckpt
    from engine.config import config_from_dict
    from engine.data import DataError, resume_data_path

    try:  # memory-mapped: the weights are not read
        state = ckpt.load_checkpoint(Path(args.resume), mmap=True)
        cfg = config_from_dict(state["config"], source=state["_path"])
    except (ckpt.CheckpointError, ConfigError):
        return  # check_resume (or the run itself) says what is wrong with this checkpoint
    try:
        resume_data_path(state, cfg.data, args.data, args.allow_data_change)
    except DataError as e:  # refused, or --data names nothing usable
        raise ConfigError(f"--resume {args.resume}: {e}") from None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    # Before anything slow (torch, the corpus): a SIGTERM during startup must stop the run
    # cleanly with its reason recorded, not kill the process with nothing on disk.
    signals = StopSignals()
    if args.command not in ("presets", "plan"):
        signals.install()
    try:
        if args.command == "presets":
            return list_presets(args)
        if args.command == "plan":
            return show_plan(args)
        # Validate the preset before anything else so a typo is one line, not a UI.
        if args.resume is None:
            from engine.presets import load_preset

            if args.allow_data_change:
                raise ConfigError(
                    "--allow-data-change applies to --resume RUN_DIR only: a new run records "
                    "whatever corpus it starts on; drop the flag"
                )
            load_preset(args.preset or DEFAULT_PRESET, args.overrides, args.presets_dir)
        else:
            if not Path(args.resume).exists():
                raise ConfigError(f"--resume {args.resume}: no such run directory or checkpoint")
            for text in args.overrides:
                parse_override(text)
            finished = check_resume(args)
            if finished is not None:
                print(finished)  # nothing to train; nothing touched
                return 0
            check_resume_corpus(args)
        if args.headless or not sys.stdout.isatty() or os.environ.get("TERM") == "dumb":
            if not args.headless:
                print(
                    "cockpit: no terminal, running headless (pass --headless to say so)",
                    file=sys.stderr,
                )
            return run_headless(args, signals)
        return run_app(args, signals)
    except ConfigError as e:
        print(f"cockpit: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("cockpit: interrupted", file=sys.stderr)
        return 130
    finally:
        signals.restore()


if __name__ == "__main__":
    sys.exit(main())
