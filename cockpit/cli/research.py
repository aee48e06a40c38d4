"""`cockpit research log [NAME]`: a series' research log (RUNS/research/NAME/log.tsv, one row per
experiment, as `cockpit ablate` and `cockpit research run` append them) as a table, or JSON for
scripts. `cockpit research run`: the keep-or-discard search over a changes file or an agent's
proposals, in the app (cockpit.app.researching) or headless."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import textwrap
from pathlib import Path
from typing import Any

from cockpit.cli.options import add_llm_arguments, add_notify_options, add_presets_dir_option

NAME = "research"
HELP = (
    "keep-or-discard search over candidate changes, and the research log of a series of experiments"
)
EPILOG = textwrap.dedent(
    """\
    examples:
      cockpit research log                       # the newest series' log
      cockpit research log ablate-tiny-5d67bf15 --json
      cockpit research log --runs /data/runs
      cockpit research run --preset speedrun-cpu --budget 5m --changes changes.toml --repeats 3
      cockpit research run --preset speedrun-cpu --budget 5m --llm http://127.0.0.1:11434/v1 \\
          --model qwen2.5:7b                   # in the app: you approve each proposal
      cockpit research run --preset speedrun-cpu --budget 5m --llm http://127.0.0.1:11434/v1 \\
          --model qwen2.5:7b --auto --hours 8 --keys optim.lr,optim.weight_decay,schedule.warmup_steps

    A changes file (each candidate is tried once, in order, on top of the best so far):
      optim.lr = [1e-3, 2e-3, 4e-3]  # a range: each value one candidate
      "model.mlp" = "relu2"          # one change
      [[change]]                     # several keys at once
      reason = "RMSNorm and no QK norm"
      "model.norm" = "rmsnorm"
      "model.qk_norm" = false

    In a terminal, run trains each experiment in the app (R: the research log; q: stop, the run
    on its way checkpointed); an --llm proposal waits in a dialog (a accept, e edit, r reject
    with a note the agent reads next) unless --auto. --headless, or no terminal: progress lines.

    Exit status of log: 0 printed, 2 no such log, or not one (one line says why). Of run: 0 the
    search is complete, 1 stopped (q, ctrl+c, SIGTERM, an --llm endpoint out of reach; the same
    command again continues) or the baseline failed, 2 refused (one line says why).
    """
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    actions = parser.add_subparsers(dest="research_action", metavar="ACTION", help="what to do")
    log = actions.add_parser(
        "log",
        help="print a series' research log (the newest series' when no NAME is given)",
        description="Print the research log of a series: each experiment's id, change (as --set "
        "spells it), parent, val bits per byte, tokens, training time, peak memory, status (kept, "
        "discarded, crashed, refused, rejected), reason, who proposed it and why it was kept or not.",
    )
    log.add_argument("name", nargs="?", metavar="NAME", help="the series (default: the newest log)")
    log.add_argument("--json", action="store_true", help="print JSON, for scripts")
    log.add_argument(
        "--runs",
        dest="runs_root",
        default="runs",
        metavar="DIR",
        help="the runs root the logs are under (default: runs)",
    )
    search = actions.add_parser(
        "run",
        help="keep-or-discard search: try each candidate of a changes file on the best so far",
        description="Train the baseline --repeats times (their spread of val bits per byte is the "
        "noise margin), then each candidate change of the changes file on top of the best "
        "configuration so far for the same training time; keep it when its val bpb is lower than "
        "the best's by more than the margin. Every experiment is a row of the research log; the "
        "best configuration is written as a preset, RUNS/research/NAME/best.toml. In a terminal "
        "each experiment trains in the app, and q stops the search; headless (--headless, or no "
        "terminal) ctrl+c or SIGTERM does. The run on its way is checkpointed; the same command "
        "again continues.",
    )
    search.add_argument(
        "--preset",
        required=True,
        metavar="NAME|PATH",
        help="the baseline: a preset name or a .toml file",
    )
    search.add_argument(
        "--budget",
        required=True,
        metavar="DURATION",
        help="each experiment's training time (90s, 5m, 1h), then the whole val split is evaluated",
    )
    search.add_argument(
        "--changes",
        metavar="FILE.toml",
        help="the candidate changes (see the example below); or --llm",
    )
    search.add_argument(
        "--repeats",
        type=int,
        default=2,
        metavar="N",
        help="baseline runs (other seeds) whose spread is the noise margin (at least 2; default 2)",
    )
    search.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting of every experiment, e.g. --set eval.batches=8 (repeatable)",
    )
    search.add_argument(
        "--steps", type=int, metavar="N", help="at most N steps per experiment (train.max_steps)"
    )
    search.add_argument(
        "--name",
        metavar="NAME",
        help="the search's name (default: research-PRESET-HASH of its settings)",
    )
    search.add_argument(
        "--runs",
        dest="runs_root",
        default="runs",
        metavar="DIR",
        help="the runs root (default: runs): runs in DIR/NAME, log and best.toml in DIR/research/NAME",
    )
    search.add_argument(
        "--data",
        metavar="PATH",
        help="local copy of the preset's corpus (or a text file or folder to train on)",
    )
    add_agent_arguments(search)
    add_presets_dir_option(search)
    search.add_argument(
        "--headless",
        action="store_true",
        help="no UI: print progress lines (for batch jobs; without a terminal it is headless too)",
    )
    search.add_argument("--no-telemetry", action="store_true", help="do not poll GPU/CPU telemetry")
    search.add_argument(
        "--no-mouse",
        action="store_true",
        help="turn off mouse tracking (saves bandwidth over slow SSH links)",
    )
    add_notify_options(search)
    search.epilog = EPILOG
    search.formatter_class = argparse.RawDescriptionHelpFormatter


def add_agent_arguments(search: argparse.ArgumentParser) -> None:
    agent = search.add_argument_group(
        "an agent that proposes (an OpenAI-compatible endpoint; pip install 'cockpit[agent]')"
    )
    add_llm_arguments(
        agent,
        "a chat completions endpoint proposes each change instead of a changes file, e.g. "
        "http://127.0.0.1:11434/v1 (Ollama); needs --model; in the app a person approves each "
        "proposal, headless needs --auto",
    )
    agent.add_argument(
        "--program",
        metavar="FILE.md",
        help="what the agent aims for and how, in Markdown (default: a built-in program)",
    )
    agent.add_argument(
        "--keys",
        metavar="K1,K2",
        help="the only settings the agent may change, e.g. optim.lr,optim.weight_decay",
    )
    agent.add_argument(
        "--auto",
        action="store_true",
        help="run unattended within --experiments and/or --hours: no dialog asks a person to "
        "approve each --llm proposal (needed with --llm headless)",
    )
    agent.add_argument(
        "--experiments",
        type=int,
        metavar="N",
        help="stop after N experiments (refused proposals not counted)",
    )
    agent.add_argument("--hours", type=float, metavar="H", help="start no experiment after H hours")


def agent_refusal(args: argparse.Namespace, attended: bool = False) -> str | None:
    """Why these agent options cannot run a search (one line), or None; `attended`: in the
    app, where a person approves each --llm proposal (no --auto needed)."""
    if args.changes and args.llm:
        return "--changes and --llm: one source of proposals, not both"
    if not args.changes and not args.llm:
        return "give the candidates: --changes FILE.toml, or --llm URL --model NAME --auto"
    if not args.llm:
        extra = [
            f"--{n.replace('_', '-')}" for n in ("model", "program", "keys") if getattr(args, n)
        ]
        if args.llm_key_env != "OPENAI_API_KEY":
            extra.append("--llm-key-env")
        if extra:
            return f"{', '.join(extra)}: only with --llm URL"
    elif not args.model:
        return "--llm needs --model NAME, the model the endpoint serves (e.g. --model qwen2.5:7b)"
    elif not args.auto and not attended:
        return (
            "--llm: this command runs unattended; add --auto with --experiments N or --hours H, "
            "its limits (or run it in a terminal, without --headless, to approve each proposal "
            "in the app)"
        )
    if args.auto and args.experiments is None and args.hours is None:
        return "--auto: bound the unattended search with --experiments N or --hours H"
    return None


def make_proposer(
    args: argparse.Namespace,
    spec: Any,
    ask: Any = None,
    say: Any = None,
) -> tuple[Any, str]:
    """The search's proposer (guarded by --experiments/--hours) and what it is, in words.
    `ask(proposal, context) -> Decision`: a person approves each --llm proposal (without
    --auto, in the app); `say(line)`: where the proposer's lines go (default: printed)."""
    from cockpit.research import Approving, ChangesFileProposer, settable_keys
    from cockpit.research.llm_proposer import (
        DEFAULT_PROGRAM,
        Guarded,
        LLMProposer,
        load_program,
        parse_keys,
        redacted_url,
    )
    from engine.config import ConfigError

    if (why := agent_refusal(args, attended=ask is not None)) is not None:
        raise ConfigError(why)
    say = say or (lambda line: print(line, flush=True))
    if args.llm:
        settable = settable_keys(spec.preset, spec.presets_dirs)
        proposer: Any = LLMProposer(
            args.llm,
            args.model,
            key_env=args.llm_key_env,
            program=load_program(args.program) if args.program else DEFAULT_PROGRAM,
            keys=parse_keys(args.keys, settable) if args.keys else None,
            base=spec.common_settings(),
            presets_dirs=spec.presets_dirs,
            say=say,
        )
        what = f"proposals from {args.model} at {redacted_url(args.llm)}"
        if ask is not None and not args.auto:
            proposer = Approving(proposer, ask)
            what += ", each approved by you"
    else:
        proposer = ChangesFileProposer.from_file(
            Path(args.changes), spec.preset, spec.common_settings(), spec.presets_dirs
        )
        what = f"{len(proposer.proposals)} candidate(s)"
    if args.experiments is not None or args.hours is not None:
        proposer = Guarded(
            proposer,
            experiments=args.experiments,
            hours=args.hours,
            say=say,
        )
    return proposer, what


def run(args: argparse.Namespace) -> int:
    from cockpit.ablation.research_log import find_log, read_log, to_json
    from engine.config import ConfigError

    if getattr(args, "research_action", None) == "run":
        return run_search(args)
    if getattr(args, "research_action", None) != "log":
        print(
            "cockpit research: say what to do: cockpit research log [NAME] prints a series' log, "
            "cockpit research run --preset P --budget 5m --changes FILE searches",
            file=sys.stderr,
        )
        return 2
    try:
        path = find_log(Path(args.runs_root), args.name)
        rows, damaged = read_log(path)
    except ConfigError as e:
        print(f"cockpit research log: {e}", file=sys.stderr)
        return 2
    try:
        if args.json:
            print(to_json(path.parent.name, path, rows, damaged))
        else:
            print(text_table(path, rows, damaged), end="")
    except BrokenPipeError:  # `cockpit research log | head`: the reader has had enough
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def text_table(path: Path, rows: list, damaged: int) -> str:
    """The log as an aligned table, then its tally and the best kept experiment."""
    from cockpit.ablation.results import fmt_bytes
    from cockpit.ablation.spec import plain_label

    lines = [f"research log {path.parent.name}: {path}", ""]
    head = [
        "id",
        "change",
        "parent",
        "val bpb",
        "tokens",
        "time",
        "peak memory",
        "status",
        "proposed by",
        "reason",
        "note",
    ]
    if not any(r.reason for r in rows):
        head.remove("reason")
    table = [head]
    for r in rows:
        cells = {
            "id": r.id,
            "change": r.change or "-",
            "parent": r.parent,
            "val bpb": f"{r.val_bpb:.4f}" if r.val_bpb is not None else "-",
            "tokens": f"{r.tokens:,}" if r.tokens is not None else "-",
            "time": f"{r.train_time_s:.1f} s" if r.train_time_s is not None else "-",
            "peak memory": fmt_bytes(r.peak_memory_bytes),
            "status": r.status,
            "proposed by": r.proposed_by,
            "reason": r.reason,
            "note": r.note,
        }
        table.append([plain_label(cells[name]) for name in head])
    if rows:
        widths = [max(len(row[i]) for row in table) for i in range(len(head))]
        right = {"val bpb", "tokens", "time", "peak memory"}
        for row in table:
            cells = [
                c.rjust(w) if h in right else c.ljust(w)
                for c, w, h in zip(row, widths, head, strict=True)
            ]
            lines.append("  ".join(cells).rstrip())
    else:
        lines.append("no experiment logged yet")
    tally = {
        s: sum(r.status == s for r in rows) for s in ("kept", "discarded", "crashed", "refused")
    }
    if any(r.status == "rejected" for r in rows):  # only where a person approves proposals
        tally["rejected"] = sum(r.status == "rejected" for r in rows)
    lines += ["", f"{len(rows)} experiments: " + ", ".join(f"{n} {s}" for s, n in tally.items())]
    measured = [r for r in rows if r.status == "kept" and r.val_bpb is not None]
    # a change is kept against the baseline's runs together: no one baseline run is "the best"
    changes = [r for r in measured if not r.parent.startswith("preset ")]
    if changes:
        best = min(changes, key=lambda r: r.val_bpb)
        lines.append(f"best kept: {plain_label(best.id)}, val bpb {best.val_bpb:.4f}")
    elif measured:
        mean = sum(r.val_bpb for r in measured) / len(measured)
        runs = f" (mean of {len(measured)} runs)" if len(measured) > 1 else ""
        lines.append(f"best kept: the baseline, no change kept; val bpb {mean:.4f}{runs}")
    if damaged:
        lines.append(
            f"{damaged} damaged line(s) skipped (cut short by a crash, or not rows of this log)"
        )
    return "\n".join(lines) + "\n"


def run_search(args: argparse.Namespace) -> int:
    """`cockpit research run`: the search to its end or a stop, in the app when there is a
    terminal (and no --headless), else headless."""
    from cockpit.cli.stop_signals import StopSignals
    from cockpit.cli.terminal import no_app_here
    from cockpit.research import Stopped
    from engine.config import ConfigError

    signals = StopSignals()
    in_app = not args.headless and no_app_here() is None
    try:
        search, runner, proposing = make_search(args, signals, in_app)
    except ConfigError as e:
        print(f"cockpit research run: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(
            f"cockpit research run: --runs {args.runs_root}: cannot write there ({e.strerror}); pass --runs DIR, a folder you can write",
            file=sys.stderr,
        )
        return 2
    log_cmd = log_command(args, search.name)
    if runner is not None:
        return run_in_app(args, runner, log_cmd)
    spec = search.spec
    print(
        f"research {search.name}: {spec.preset}, {proposing}, "
        f"{spec.repeats} baseline runs, {args.budget} each; runs in {search.runs_dir}",
        flush=True,
    )
    signals.install()
    try:
        state = search.run()
    except (Stopped, KeyboardInterrupt):
        print(stopped_line(log_cmd), flush=True)
        return 1
    except ConfigError as e:
        print(f"cockpit research run: {e}", file=sys.stderr)
        return 1 if "baseline measured" in str(e) else 2
    finally:
        signals.restore()
    print_done(search, state, log_cmd)
    return 0


def make_search(args: argparse.Namespace, signals: Any, in_app: bool) -> tuple[Any, Any, str]:
    """The search the command line describes, opened (its log read back): (Search, the app's
    SearchRunner or None headless, its proposer in words). ConfigError (one line) or OSError
    when it cannot start."""
    from cockpit.ablation.spec import canonical_setting, parse_duration
    from cockpit.research import Search, SearchSpec, check_search
    from engine.config import ConfigError

    root = Path(args.runs_root)
    spec = SearchSpec(
        preset=args.preset,
        budget=parse_duration(args.budget),
        settings=tuple(canonical_setting(t, f"--set {t!r}") for t in args.overrides),
        repeats=args.repeats,
        steps=args.steps,
        name=args.name,
        presets_dirs=tuple(args.presets_dir),
    )
    check_search(spec)
    if root.exists() and not root.is_dir():
        raise ConfigError(
            f"--runs {root}: not a directory; pass --runs DIR, a folder for the search"
        )
    if not in_app:
        proposer, proposing = make_proposer(args, spec)
        search = Search(
            spec,
            root,
            proposer,
            train_run=lambda run_dir, overrides, resume: _train(
                args, spec, signals, run_dir, overrides, resume
            ),
            stop_requested=lambda: bool(signals.received),
            say=lambda line: print(line, flush=True),
        )
        search.open()
        return search, None, proposing
    from cockpit.app.search_runner import open_search

    runner, proposing = open_search(
        spec,
        root,
        lambda ask, say: make_proposer(args, spec, ask=ask, say=say),
        build=lambda run_dir, overrides, resume: _build(args, spec, run_dir, overrides, resume),
        experiments=args.experiments,
    )
    return runner.search, runner, proposing


def log_command(args: argparse.Namespace, name: str) -> str:
    runs = "" if args.runs_root == "runs" else f" --runs {shlex.quote(str(args.runs_root))}"
    return f"cockpit research log {shlex.quote(name)}{runs}"


def stopped_line(log_cmd: str) -> str:
    return (
        f"research stopped: every experiment done is in the log ({log_cmd}); run the same "
        "command again to continue (a stopped run resumes)"
    )


def print_done(search: Any, state: Any, log_cmd: str) -> None:
    spec = search.spec
    kept = [r for r in state.rows if r.status == "kept" and r.parent != f"preset {spec.preset}"]
    print(
        f"research done: {len(state.rows)} experiments, {len(kept)} kept; best val bpb "
        f"{state.best_bpb:.4f} ({state.best_id})",
        flush=True,
    )
    print(
        f"best configuration: {search.best_path} (cockpit train --preset {shlex.quote(str(search.best_path))})"
    )
    print(f"research log: {search.log.path} ({log_cmd})")


def run_in_app(args: argparse.Namespace, runner: Any, log_cmd: str) -> int:
    """The search in the app (cockpit.app.researching); then what became of it, as headless
    says it. Exit status as headless: 0 complete, 1 stopped, 2 refused."""
    from functools import partial

    from cockpit.app.researching import ResearchApp
    from cockpit.cli.launch import run_app, train_arguments

    train = train_arguments(
        preset=runner.search.spec.preset, presets_dir=list(args.presets_dir),
        no_mouse=args.no_mouse, bell=args.bell, no_notify=args.no_notify,
        no_telemetry=args.no_telemetry,
    )  # fmt: skip
    run_app(train, runs_root=args.runs_root, app_class=partial(ResearchApp, runner=runner))
    runner.close()
    runner.join(3.0)  # a row being written is written; an agent's call is not waited for
    if runner.outcome == "done":
        print_done(runner.search, runner.state, log_cmd)
        return 0
    if runner.outcome in ("refused", "failed"):
        print(f"cockpit research run: {runner.message}", file=sys.stderr)
        print(f"research log: {runner.search.log.path} ({log_cmd})")
        return 2 if runner.outcome == "refused" else 1
    print(stopped_line(log_cmd), flush=True)
    return 1


def _train_args(
    args: argparse.Namespace,
    spec: Any,
    run_dir: Path,
    overrides: list[str],
    resume: bool,
    headless: bool,
) -> argparse.Namespace:
    """`cockpit train`'s arguments for one experiment's run (a resumed one: its directory)."""
    from cockpit.cli.launch import train_arguments

    common = dict(
        presets_dir=list(args.presets_dir), headless=headless, no_telemetry=args.no_telemetry,
    )  # fmt: skip
    if not headless:
        common.update(no_mouse=args.no_mouse, bell=args.bell, no_notify=args.no_notify)
    if resume:
        return train_arguments(resume=str(run_dir), overrides=[], **common)
    return train_arguments(
        preset=spec.preset, overrides=overrides, run_dir=str(run_dir), data=args.data, **common
    )  # fmt: skip


def _build(
    args: argparse.Namespace,
    spec: Any,
    run_dir: Path,
    overrides: list[str],
    resume: bool,
) -> Any:
    """One experiment's engine for the app (not started; on the search's thread), or None when
    the run stopped at its last step; ConfigError when `cockpit train` would refuse it."""
    from cockpit.cli.launch import make_trainer
    from cockpit.cli.preflight import preflight

    train = _train_args(args, spec, run_dir, overrides, resume, headless=False)
    if preflight(train) is not None:
        return None
    return make_trainer(train, interactive=True)


def _train(
    args: argparse.Namespace,
    spec: Any,
    signals: Any,
    run_dir: Path,
    overrides: list[str],
    resume: bool,
) -> str:
    """One experiment's run, headless, as `cockpit train` runs it; its final state."""
    from cockpit.cli.headless import ProgressPrinter
    from cockpit.cli.launch import make_trainer
    from cockpit.cli.preflight import preflight
    from engine.config import ConfigError
    from engine.events import RunState

    train = _train_args(args, spec, run_dir, overrides, resume, headless=True)
    if preflight(train) is not None:  # stopped at its last step: nothing left to train
        return RunState.FINISHED
    printer = ProgressPrinter(out=lambda line: print(line, flush=True))
    trainer = make_trainer(train, sinks=[printer], interactive=False)
    signals.attach(trainer)
    try:
        state = trainer.run()
    finally:
        signals.trainer = None  # between experiments a signal stops the search itself
    if state == RunState.FAILED and printer.refusal:
        raise ConfigError(f"{run_dir.name}: {printer.refusal}")
    return state
