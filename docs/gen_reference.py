"""Write the generated reference pages from the code they describe.

    python docs/gen_reference.py           # rewrite docs/reference/{cli,config,metrics}.md
    python docs/gen_reference.py --check   # exit 1, naming the pages, if any is out of date

- cli.md: every subcommand's usage and options, from the argparse parser the `cockpit`
  command itself builds (a new flag appears here by itself);
- config.md: every config section and key with its type, default, allowed values and help
  text, from the config dataclasses (the same help `cockpit presets show` prints);
- metrics.md: every record kind of metrics.jsonl and its fields, from the event dataclasses;
  what each field means is written below (a new field without a line here stops the build).

The hand-written parts of those pages are the templates in this file. The tests check that the
committed pages are what this script writes now (tests/docs/test_reference_pages.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import html
import json
import re
import sys
import textwrap
import typing
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
REFERENCE = REPO / "docs" / "reference"
WIDTH = 100  # prose and table source lines are wrapped here (the docs' limit is 120)
USAGE_WIDTH = 80  # a usage line as wide as the site's code blocks, so it needs no scrolling
HEADER = (
    "<!-- Generated from the code by docs/gen_reference.py: change the code or that script's\n"
    "     templates, then run python docs/gen_reference.py -->\n"
)

if str(REPO) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(REPO))


# ---------------------------------------------------------------------------------------------
# Shared text helpers


def wrap(text: str, indent: str = "") -> str:
    """A paragraph wrapped to WIDTH, never inside a word or a hyphenated name."""
    return textwrap.fill(
        " ".join(text.split()),
        width=WIDTH,
        initial_indent=indent,
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    )


def cell(text: str) -> str:
    """Plain text (with `code` spans) as the inside of an HTML table cell."""
    escaped = html.escape(" ".join(text.split()), quote=False)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)


def code(text: str) -> str:
    return f"<code>{html.escape(text, quote=False)}</code>"


def html_table(headers: Iterable[str], rows: Iterable[tuple[str, list[str]]]) -> str:
    """A table whose source lines stay under WIDTH however long a help text is (a Markdown
    table row is one line). `rows` are (the row's id or "", its cells as HTML); the first cell
    is the row's name."""
    lines = ["<table>", "<thead><tr>" + "".join(f"<th>{h}</th>" for h in headers) + "</tr></thead>"]
    lines.append("<tbody>")
    for row_id, cells in rows:
        line = f'<tr id="{row_id}">' if row_id else "<tr>"
        # the first column names the row: kept on one line (Material breaks code anywhere)
        first, *rest = cells
        pieces = [f'<td style="white-space:nowrap">{first}</td>', *(f"<td>{c}</td>" for c in rest)]
        for piece in [*pieces, "</tr>"]:
            if len(line) + len(piece) <= WIDTH:
                line += piece
                continue
            lines.append(line)
            # a long cell wraps at its spaces (whitespace inside a cell is one space in HTML)
            *full, line = textwrap.wrap(
                piece, width=WIDTH, break_long_words=False, break_on_hyphens=False
            )
            lines += full
        lines.append(line)
    lines += ["</tbody>", "</table>"]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# cli.md


CLI_INTRO = """\
# Command line

`cockpit --help` and `cockpit COMMAND --help` describe every option, as this page does: it is
generated from the same parser. `python -m cockpit` is the same program and `cockpit --version`
says which.

The default command is `train`: `cockpit --preset tiny` is `cockpit train --preset tiny`, and
`cockpit` alone opens the app on the `default` preset. `cockpit --detach ...` (or `cockpit train
--detach ...`) is `cockpit start ...`: the run goes on in the background.

**Exit status.** 0: the run finished or was stopped (by you or by a signal); 1: the run failed,
including a NaN it could not recover from (the reason is printed, and is the final `state`
record's `reason` in `metrics.jsonl`); 2: a bad command line, preset or input, said in one line
on stderr (`cockpit: ...`) before anything starts.

**Signals.** SIGINT (ctrl+c, headless), SIGTERM and SIGHUP save a checkpoint at the next step
boundary and exit cleanly (status 0); the final `state` record's `reason` names the signal
(`SIGTERM`, `SIGHUP`, `SIGINT (ctrl+c)`). They are caught from the first moment: one that
arrives before anything was trained stops the run unsaved. A ctrl+c before the run exists
(while `cockpit` is still importing, torch included; any subcommand) exits at once:
`cockpit: interrupted`, status 130, no traceback, nothing written. A second ctrl+c aborts at
once. In the app, ctrl+c is a key that asks, like `q`.

Every command takes `-h`/`--help`, left out of the tables below.
"""

# Hand-written notes printed after a command's generated usage and options.
CLI_NOTES: dict[str, str] = {
    "train": """\
Without a terminal (a batch job, `CI=true`) or on a dumb one (`TERM=dumb`), `cockpit train`
runs headless and says which; under torchrun every rank runs headless and rank 0 serves the control socket.
Headless, it prints a progress line at most every 2 seconds, plus every evaluation, sample and
checkpoint:

```text
step    462/2000 | loss 2.2242 | lr 9.22e-04 | 17,540 tok/s | ETA 1:02
eval      500 | train 2.2629 | val 2.2702 (whole val split) | train time 18s
```

`--set` applies on top of the preset, or with `--resume` on top of the checkpoint's config: see
[the config reference](config.md#where-values-come-from).
""",
    "completion": """\
Shell completion (subcommands, options, preset names, paths) is generated from the parser:

```sh
cockpit completion bash > ~/.local/share/bash-completion/completions/cockpit
cockpit completion zsh > ~/.zfunc/_cockpit        # with fpath+=(~/.zfunc) before compinit
cockpit completion fish > ~/.config/fish/completions/cockpit.fish
```
""",
}


def cli_page() -> str:
    parser = _cockpit_parser()
    parts = [HEADER, CLI_INTRO]
    parts.append("## `cockpit`\n")
    parts.append(_command_text(parser, parser.description or "", top=True))
    for name, help_text, subparser in _subcommands(parser):
        parts.extend(_command_section(name, help_text, subparser, level=2))
    page = "\n".join(parts).rstrip("\n") + "\n"
    headings = [h.replace(" ", "-") for h in re.findall(r"^#+ `(cockpit[^`]*)`$", page, re.M)]
    ids = [*headings, *re.findall(r'<tr id="([^"]+)">', page)]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise SystemExit(f"docs/gen_reference.py: cli.md would have these ids twice: {twice}")
    return page


def _cockpit_parser() -> argparse.ArgumentParser:
    from cockpit.cli import build_parser

    return build_parser()


def _subcommands(
    parser: argparse.ArgumentParser,
) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, help, parser) of each subcommand, in the order `--help` lists them."""
    found = []
    for action in parser._actions:  # argparse keeps its subparsers nowhere public
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                found.append((name, helps.get(name, ""), sub))
    return found


def _command_section(
    name: str, help_text: str, parser: argparse.ArgumentParser, level: int
) -> list[str]:
    parts = [f"{'#' * level} `{parser.prog}`\n"]
    parts.append(_command_text(parser, help_text))
    for sub_name, sub_help, sub in _subcommands(parser):
        parts.extend(_command_section(sub_name, sub_help, sub, level + 1))
    return parts


def _command_text(parser: argparse.ArgumentParser, help_text: str, top: bool = False) -> str:
    description = parser.description or help_text
    text = [wrap(_sentence(description)), ""]
    text += ["```text", _usage(parser), "```", ""]
    rows = [(f"{parser.prog.replace(' ', '-')}-{_anchor(a)}", _option_cells(a))
            for a in parser._actions if _shown(a)]  # fmt: skip
    if rows:
        text += [html_table(("option", "what it does"), rows), ""]
    if parser.epilog:
        if parser.formatter_class is argparse.RawDescriptionHelpFormatter:
            text += ["```text", parser.epilog.rstrip("\n"), "```", ""]
        else:
            text += [wrap(parser.epilog), ""]
    name = parser.prog.split(" ", 1)[1] if " " in parser.prog else ""
    if name in CLI_NOTES:
        text += [CLI_NOTES[name]]
    return "\n".join(text)


def _sentence(text: str) -> str:
    text = text.strip()
    if not text:
        return text
    text = text[0].upper() + text[1:]
    return text if text.endswith((".", ":")) else text + "."


def _usage(parser: argparse.ArgumentParser) -> str:
    """The usage line as `--help` shows it, written here rather than by argparse's formatter,
    whose wrapping and spelling change between Python versions (the page must not)."""
    actions = [a for a in parser._actions if a.help != argparse.SUPPRESS]
    parts = []
    for action in sorted(actions, key=lambda a: not a.option_strings):  # options first
        if action.option_strings:
            text = " ".join(p for p in (action.option_strings[0], _arguments(action)) if p)
            parts.append(text if action.required else f"[{text}]")
        else:
            parts.append(_arguments(action))
    lines, line = [], parser.prog
    for part in parts:
        if len(line) + 1 + len(part) > USAGE_WIDTH and line.strip():
            lines.append(line)
            line = " " * len(parser.prog)
        line += " " + part
    return "\n".join([*lines, line])


def _metavar(action: argparse.Action) -> str:
    if isinstance(action.metavar, str):
        return action.metavar
    if action.choices:
        return "{" + ",".join(str(c) for c in action.choices) + "}"
    return action.dest.upper() if action.option_strings else action.dest


def _arguments(action: argparse.Action) -> str:
    """What follows the option's name (or stands for a positional), by its nargs."""
    if action.nargs == 0:
        return ""
    name = _metavar(action)
    return {
        None: name,
        argparse.OPTIONAL: f"[{name}]",
        argparse.ZERO_OR_MORE: f"[{name} ...]",
        argparse.ONE_OR_MORE: f"{name} [{name} ...]",
        argparse.PARSER: f"{name} ...",
    }.get(action.nargs, " ".join([name] * action.nargs) if isinstance(action.nargs, int) else name)


def _shown(action: argparse.Action) -> bool:
    if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
        return False
    return not isinstance(action, argparse._SubParsersAction)


def _invocation(action: argparse.Action) -> str:
    """The option as its row names it: `--data PATH`, `-n, --names`, or a positional's name."""
    if not action.option_strings:
        return _metavar(action)
    arguments = _arguments(action)
    return ", ".join(action.option_strings) + (f" {arguments}" if arguments else "")


def _anchor(action: argparse.Action) -> str:
    """The option's part of its row's id; a positional's is marked (fork's RUN_DIR|CKPT is
    not its --run-dir)."""
    if action.option_strings:
        return action.option_strings[-1].lstrip("-").replace("_", "-")
    return "arg-" + re.sub(r"[^a-z0-9]+", "-", (action.metavar or action.dest).lower()).strip("-")


def _option_cells(action: argparse.Action) -> list[str]:
    help_text = _expand_help(action)
    if action.required and action.option_strings:
        help_text = f"required: {help_text}"
    return [code(_invocation(action)), cell(help_text)]


def _expand_help(action: argparse.Action) -> str:
    """The help text with argparse's %(default)s-style fields filled in, as --help does."""
    text = str(action.help or "")
    if "%" not in text:
        return text
    fields = {k: v for k, v in vars(action).items() if v is not argparse.SUPPRESS}
    return text % {**fields, "prog": "cockpit"}


# ---------------------------------------------------------------------------------------------
# config.md


CONFIG_INTRO = """\
# Config keys

A run is described by a preset: a TOML file whose tables are the sections below. Every key has a
type, a default (what a preset that leaves it out gets), and often an allowed range or a list of
choices; a value outside them is refused in one line naming the file, the key and what was
expected, for example

```text
presets/mine.toml: model.n_layers: unknown key 'n_layers' (did you mean 'n_layer'?)
```

This page is generated from the config's own help texts, the ones `cockpit presets show NAME`
prints as a comment above each key.

## Where values come from

- **A preset**: `--preset NAME` (a built-in or user preset) or `--preset path/to/file.toml`.
  `cockpit presets` lists them with where each comes from. User presets live in
  `~/.config/cockpit/presets/` (`$XDG_CONFIG_HOME/cockpit/presets`, or `$COCKPIT_PRESETS_DIR`)
  and in any folder given with `--presets-dir DIR`. On a name clash the later source wins:
  built-in, then the user folder, then each `--presets-dir` in order.
- **`extends`**: a preset may start from another and change a few keys; its tables are merged
  over the parent's, key by key (an example below).
- **`--set section.key=value`** (repeatable) applies on top, in order. Values are TOML, so
  `3e-4`, `true` and `["a", "b"]` work, and a bare word that is not TOML is a string
  (`--set data.source=tinyshakespeare`); a key that exists in one section only may drop the
  section: `--set n_layer=6`.
- **A resume** (`--resume RUN_DIR`) starts from the checkpoint's config instead of a preset, and
  `--set` applies on top of it: `--resume RUN_DIR --set train.max_steps=5000` extends a run. A
  resume refuses changes to `model.*` (but `model.grad_checkpoint`, `model.recompute_blocks`
  and `model.dropout`),
  `data.*` and `train.seed`.

A preset that starts from another:

```toml
extends = "nanogpt-cpu"
description = "nanogpt-cpu with 6 layers"

[model]
n_layer = 6
```

`cockpit presets show NAME --set ...` prints the result (the `extends` chain merged, `--set`
applied) as TOML, every key written with its help above it; saved to a file, it is a preset of
its own. A run directory keeps what it trained with as `config.json` and `config.toml`.

Besides checking each key, a config is refused when `model.n_embd` is not a multiple of
`model.n_head`, when `model.pos_emb = "rotary"` has an odd head size, when `schedule.min_lr`
exceeds `optim.lr`, or when `sample.prompts` is empty.

## Top-level keys

<table>
<thead><tr><th>key</th><th>type</th><th>what it is</th></tr></thead>
<tbody>
<tr id="name"><td><code>name</code></td><td>string</td><td>the preset's name (a run directory is
named after it)</td></tr>
<tr id="description"><td><code>description</code></td><td>string</td><td>one line, shown by
<code>cockpit presets</code> and the app's preset menu</td></tr>
<tr id="extends"><td><code>extends</code></td><td>string</td><td>the preset (name or path) this
one starts from</td></tr>
</tbody>
</table>
"""

# One line per section, above its table.
SECTION_INTROS: dict[str, str] = {
    "data": "The corpus, its tokenizer and the validation split.",
    "model": "The GPT's shape and its parts (the modern ones are off in the nanoGPT-faithful "
    "presets).",
    "optim": "The optimizer and its settings.",
    "schedule": "The learning-rate schedule: warmup, then its shape.",
    "train": "The training loop: steps, batches, device, precision, and what to do on a fault.",
    "eval": "Evaluations of the train and val loss.",
    "sample": "Text sampled from the model while it trains.",
    "checkpoint": "When checkpoints are written and which are kept.",
    "log": "Extra logs besides metrics.jsonl.",
}

TYPE_NAMES = {int: "integer", float: "number", bool: "boolean", str: "string"}


def config_page() -> str:
    from engine.config import RunConfig

    parts = [HEADER, CONFIG_INTRO]
    for section, cls in config_sections(RunConfig).items():
        if section not in SECTION_INTROS:
            raise SystemExit(f"docs/gen_reference.py: add a line for [{section}] to SECTION_INTROS")
        parts += [f"## `[{section}]`\n", wrap(SECTION_INTROS[section]) + "\n"]
        hints = typing.get_type_hints(cls)
        rows = []
        for f in dataclasses.fields(cls):
            default = f.default_factory() if f.default is dataclasses.MISSING else f.default
            meta = dict(f.metadata)
            rows.append((
                f"{section}.{f.name}",
                [code(f.name), _type_name(hints[f.name]), code(toml_value(default)),
                 _allowed(meta), cell(meta.get("help", ""))],
            ))  # fmt: skip
        headers = ("key", "type", "default", "allowed", "what it sets")
        parts += [html_table(headers, rows), ""]
    return "\n".join(parts).rstrip("\n") + "\n"


def config_sections(config: type) -> dict[str, type]:
    """The config's sections (its tables) in order: the fields that are dataclasses."""
    hints = typing.get_type_hints(config)
    return {f.name: hints[f.name] for f in dataclasses.fields(config)
            if dataclasses.is_dataclass(hints[f.name])}  # fmt: skip


def toml_value(value: Any) -> str:
    """A default as a preset would write it (the values a config holds: bool, int, float,
    str, list of str)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(value, ensure_ascii=False)


def _type_name(tp: Any) -> str:
    if typing.get_origin(tp) is list:
        return "list of strings"
    return TYPE_NAMES.get(tp, str(tp))


def _allowed(meta: dict[str, Any]) -> str:
    """The key's checks in words: the choices, or its range."""
    if "choices" in meta:
        return ", ".join(code(f'"{c}"') for c in meta["choices"])
    low = f"&ge; {_bound(meta['min'])}" if "min" in meta else ""
    if "min_excl" in meta:
        low = f"&gt; {_bound(meta['min_excl'])}"
    high = f"&le; {_bound(meta['max'])}" if "max" in meta else ""
    if "below" in meta:
        high = f"&lt; {_bound(meta['below'])}"
    return ", ".join(p for p in (low, high) if p)


def _bound(value: float) -> str:
    """A range's end: a whole number whole (a seed's 4294967295, not 4.29497e+09)."""
    return str(value) if isinstance(value, int) else f"{value:g}"


# ---------------------------------------------------------------------------------------------
# metrics.md


METRICS_INTRO = """\
# The metrics file

`RUN_DIR/metrics.jsonl` holds the whole run, one JSON object per line: every record the engine
emits, in order. Each has `kind` (the sections below) and `time` (Unix seconds, the run's
clock); training records also have `step` (optimizer steps completed). The same records are
what the [control socket](wire.md) replays and streams, and what `cockpit export --format csv`
and `--format tensorboard` read.

Every line is strict JSON: a number that is not finite (a NaN loss, a gradient norm not
measured) is written as `null`. A resumed run appends to the same file; its `run_started` record
has `resumed_from` and `start_step`, and records after it supersede any with the same step; a
resume at step S also supersedes every earlier record after S (the curves of an abandoned
branch are not replayed). The final `state` record is always the run's last.

The kinds and their fields are generated from the engine's event classes; a field's type is as
JSON has it (a `number` is `null` when it is not finite; a type marked `| null` may be `null`
where the value is not known or does not apply).
"""

# (kind, text above its table)
METRICS_KINDS: dict[str, str] = {
    "run_started": "The resolved run, first in every session (a resume writes another). The config "
    "itself is in `RUN_DIR/config.json` and `RUN_DIR/config.toml`; on the control socket this "
    "record also carries it as `config`.",
    "step": "One optimizer step.",
    "eval": "An evaluation of the train and val loss.",
    "sample": "One sampled text (one record per prompt).",
    "checkpoint": "A checkpoint written.",
    "lr_changed": "An LR change (from the app, a viewer or a rollback): the LR the optimizer "
    "applies from the next step.",
    "settings_changed": "A change of live settings (a `set` from the app, a viewer or a "
    "client, or one a replayed config.toml makes at its step), in force from the next step. "
    "A refused `set` is an `alert` with code `set` instead.",
    "state": "The run's state changed. The final state (`stopped`, `finished` or `failed`) is "
    "always the run's last record.",
    "alert": "Something a person should know, at a level and with a code a program can match.",
    "threads": "On CPU with `train.threads = 0`: the thread count a measurement kept and the step "
    "times it measured (after the first steps, then when the step time drifts by more than a "
    "quarter and every 5 minutes; docs/guide/plan.md, CPU threads).",
    "telemetry": "One poll of the machine (about every second).",
    "memory": "The memory breakdown on the training device, in bytes.",
    "data_progress": "The corpus preparation's final figures: one record, before `run_started` "
    "(the progress records while it prepares are shown, not written).",
    "ranks": "Under torchrun, every 2 s from rank 0: every rank's figures over the interval.",
    "viewer": "A viewer attached to or left the control socket (none after the run's final "
    "`state`: a viewer still attached when the run ends has no detach record).",
    "command": "A viewer's command as the run queued it (its acknowledgement, an event, follows). "
    "One that comes once the final `state` is being recorded is refused (`pause: the run has "
    "stopped; it takes no more commands`), not recorded.",
}

# (kind, field) -> what it means. "time" is every record's and described once, above.
METRICS_FIELDS: dict[tuple[str, str], str] = {
    ("run_started", "run_dir"): "the run directory",
    ("run_started", "preset"): "the preset's name",
    ("run_started", "description"): "the preset's description",
    ("run_started", "config"): "the resolved config (on the control socket only; not in the file)",
    ("run_started", "device"): "the training device, e.g. `cpu`, `cuda:0`",
    ("run_started", "dtype"): "the autocast dtype",
    ("run_started", "n_params"): "parameters of the model",
    ("run_started", "n_params_non_embedding"): "parameters without the position embedding",
    ("run_started", "vocab_size"): "the tokenizer's vocabulary size",
    ("run_started", "tokenizer"): "`char` or the tiktoken encoding",
    ("run_started", "train_tokens"): "tokens in the train split",
    ("run_started", "val_tokens"): "tokens in the val split",
    ("run_started", "start_step"): "the step this session starts at (0, or a resume's)",
    ("run_started", "max_steps"): "the run's `train.max_steps`",
    ("run_started", "tokens_per_step"): "batch size x gradient accumulation x block size",
    ("run_started", "planned_lr"): "the planned LR schedule as `[step, lr]` pairs, downsampled",
    ("run_started", "resumed_from"): "the checkpoint a resume started from, else `null`",
    ("run_started", "memory_plan"): "the pre-flight memory estimate: bytes by category and "
    "`capacity`",
    ("run_started", "flops_per_token"): "training FLOPs per token (the MFU's numerator)",
    ("run_started", "peak_flops"): "the FLOP/s the MFU is measured against",
    ("run_started", "peak_source"): "where that peak comes from, e.g. `table: H100 bf16` or "
    "`measured: ...`",
    ("run_started", "notes"): "on a resume: what it changed or kept, one line each",
    ("run_started", "data_source"): "the corpus: `source`, `path`, `description`, `sha256`, "
    "`tokenizer`, `vocab_size`, `vocab_fingerprint`",
    ("run_started", "train_time_s"): "training time of the earlier sessions of a resumed run",
    ("run_started", "tokens_schedule"): "a batch-size schedule or sequence-length warmup: "
    "`[step, tokens]` pairs, the tokens a step trains on from that step on, at step 0 and at "
    "each change of shape; `[]` when every step has `tokens_per_step`",
    ("step", "step"): "optimizer steps completed",
    ("step", "loss"): "the training loss",
    ("step", "lr"): "the LR as applied",
    ("step", "grad_norm"): "the gradient norm, before clipping",
    ("step", "tokens_per_s"): "throughput",
    ("step", "step_time_s"): "the step's wall time",
    ("step", "tokens"): "tokens trained on so far",
    ("step", "mfu"): "model FLOPs utilisation, 0 to 1",
    ("step", "data_time_s"): "of `step_time_s`, the time spent waiting for batches",
    ("step", "update_ratio"): "‖lr x update‖ / ‖weights‖, every 50 steps, else `null`",
    ("eval", "step"): "the step evaluated at",
    ("eval", "train_loss"): "the mean loss on the train batches",
    ("eval", "val_loss"): "the mean loss on the val batches (or the whole split)",
    ("eval", "train_time_s"): "training wall time so far, evaluation excluded",
    ("eval", "full_split"): "whether val covered the whole split (`eval.full_val`)",
    ("eval", "train_bpb"): "the train loss in bits per byte of text: / ln 2 * the split's tokens "
    "/ its UTF-8 bytes (`null` where not known: records before it)",
    ("eval", "val_bpb"): "the val loss in bits per byte of text, comparable across tokenizers",
    ("sample", "step"): "the step sampled at",
    ("sample", "prompt"): "the prompt the model was given",
    ("sample", "text"): "the text it generated",
    ("checkpoint", "step"): "the step saved",
    ("checkpoint", "path"): "the checkpoint file (or `.dcp` directory)",
    ("checkpoint", "reason"): "`interval`, `manual`, `stop` or `final`",
    ("state", "state"): "`starting`, `running`, `paused`, `saving`, `stopped`, `finished` or "
    "`failed`",
    ("state", "step"): "the step at the change",
    ("state", "reason"): "for the final state: who or what stopped it, e.g. `stopped by user`, "
    "`SIGTERM`, or why it failed",
    ("state", "train_time_s"): "the training time at that moment: exact where the run paused, "
    "saved or ended",
    ("lr_changed", "step"): "the step of the change",
    ("lr_changed", "old_lr"): "the LR before",
    ("lr_changed", "new_lr"): "the LR from the next step",
    ("lr_changed", "scale"): "the multiplier now applied on the planned schedule",
    ("lr_changed", "after_warmup_lr"): "a change made during warmup: the LR its ramp reaches "
    "(the LR typed), else `null`",
    ("lr_changed", "warmup_ends"): "a change made during warmup: the step the ramp reaches it, "
    "else `null`",
    ("settings_changed", "step"): "the steps trained when the change was made: it shapes "
    "step `step + 1` first",
    ("settings_changed", "changes"): "each changed key (as `--set` spells it) to `[old, new]`",
    ("settings_changed", "by"): "who asked: `app`, `viewer N WHO`, `resume`, `rollback`",
    ("settings_changed", "replayed"): "`true` when a replayed config.toml made it at its step",
    ("settings_changed", "max_steps"): "the run's length from now on",
    ("settings_changed", "tokens_per_step"): "tokens per optimizer step from now on",
    ("settings_changed", "planned_lr"): "the re-planned schedule as `[step, lr]` pairs; `[]` "
    "when the change left it as it was",
    ("alert", "level"): "`info`, `warning` or `error`",
    ("alert", "message"): "one line for a person",
    ("alert", "step"): "the step it happened at",
    ("alert", "code"): "for programs: `nan`, `spike`, `lr`, `disk`, `data`, `config`, "
    "`checkpoint` (one that cannot be read or does not fit), `peak` (the MFU peak corrected), "
    "`log` (a TensorBoard log left incomplete), `socket`, `rollback`, ...",
    ("threads", "step"): "the step the measurement ended at",
    ("threads", "threads"): "the count kept: torch's intra-op threads from the next step on",
    ("threads", "previous"): "the count in use before the measurement",
    ("threads", "step_times_s"): "each count measured (a string key) and its median step time, "
    "seconds (a count that collapsed: the one step that showed it)",
    ("threads", "reason"): "why it measured: `the first steps`, `the step time went from 240 ms "
    "to 410 ms`, `5 minutes since the last measurement`",
    ("telemetry", "source"): "`nvml`, `psutil` or `unavailable`",
    ("telemetry", "gpus"): "one reading per GPU (below)",
    ("telemetry", "cpu_percent"): "the machine's CPU use",
    ("telemetry", "cpu_per_core"): "the same, per core",
    ("telemetry", "ram_used"): "bytes of RAM in use",
    ("telemetry", "ram_total"): "bytes of RAM",
    ("telemetry", "process_rss"): "the run's resident memory, bytes",
    ("telemetry", "reason"): "with `unavailable`: why",
    ("telemetry", "process_cpu_percent"): "the run's own process's CPU use (100 = one core)",
    ("memory", "step"): "the step measured at",
    ("memory", "device"): "the training device",
    ("memory", "capacity"): "the device's memory (RAM on CPU)",
    ("memory", "weights"): "the model's parameters",
    ("memory", "gradients"): "their gradients",
    ("memory", "optimizer"): "the optimizer's state",
    ("memory", "activations"): "activations kept for backward",
    ("memory", "activations_measured"): "whether `activations` was measured (else estimated)",
    ("memory", "cache"): "reserved by the allocator but unused",
    ("memory", "other"): "the CUDA context and non-torch memory (RSS minus tensors on CPU)",
    ("data_progress", "source"): "the corpus, as a user would name it",
    ("data_progress", "tokenizer"): "the tokenizer",
    ("data_progress", "bytes_read"): "bytes of text read",
    ("data_progress", "bytes_total"): "bytes in all (0 when unknown)",
    ("data_progress", "documents"): "documents (files, JSON lines, Parquet rows) read",
    ("data_progress", "skipped"): "documents left out (empty, no text field), counted",
    ("data_progress", "tokens"): "tokens written",
    ("data_progress", "elapsed_s"): "the preparation's wall time",
    ("data_progress", "done"): "`true` in the file (the one record written is the final one)",
    ("data_progress", "reused"): "prepared earlier: nothing was read but the metadata",
    ("data_progress", "note"): "an interrupted preparation started over, a wait for another "
    "process",
    ("ranks", "step"): "rank 0's step",
    ("ranks", "ranks"): "one reading per rank (below)",
    ("viewer", "viewer"): "the viewer's number on the socket: 1, 2, ...",
    ("viewer", "who"): "what the viewer said it is, e.g. `alice@gpu1 (pts/3)`; empty when it "
    "did not say",
    ("viewer", "read_only"): "whether its commands are refused",
    ("viewer", "attached"): "`true` when it attached, `false` when it left",
    ("viewer", "step"): "the run's newest step at the time",
    ("command", "name"): "the wire command: `pause`, `scale_lr`, ...",
    ("command", "args"): "its arguments",
    ("command", "viewer"): "the viewer that sent it",
    ("command", "who"): "what that viewer said it is",
    ("command", "step"): "the run's newest step at the time",
}

# Nested readings: (class name, heading, text) and their fields.
NESTED_TEXT: dict[str, str] = {
    "DeviceReading": "One GPU in `telemetry.gpus` and `ranks.ranks[].gpus` (`null` where the driver "
    "does not tell).",
    "RankReading": "One rank in `ranks.ranks`, over the last report interval.",
}
NESTED_FIELDS: dict[tuple[str, str], str] = {
    ("DeviceReading", "index"): "the GPU's index",
    ("DeviceReading", "name"): "its name",
    ("DeviceReading", "util_percent"): "compute utilisation",
    ("DeviceReading", "mem_util_percent"): "memory bandwidth utilisation",
    ("DeviceReading", "mem_used"): "bytes of its memory in use",
    ("DeviceReading", "mem_total"): "bytes of memory",
    ("DeviceReading", "process_mem"): "bytes the run's process uses on it",
    ("DeviceReading", "temperature_c"): "temperature, °C",
    ("DeviceReading", "power_w"): "power draw, W",
    ("DeviceReading", "power_limit_w"): "power limit, W",
    ("DeviceReading", "sm_clock_mhz"): "SM clock, MHz",
    ("DeviceReading", "throttle"): "why the clocks are held back, if they are",
    ("DeviceReading", "process_util_percent"): "the run's process's SM utilisation since the "
    "previous reading (0 while it holds memory there but ran no kernel)",
    ("RankReading", "rank"): "the rank",
    ("RankReading", "host"): "its host name",
    ("RankReading", "local_rank"): "its rank on that host",
    ("RankReading", "steps"): "steps it trained in the interval (0 while paused)",
    ("RankReading", "step_time_s"): "its mean wall time per step in the interval (`null` "
    "without steps)",
    ("RankReading", "data_time_s"): "of that, the time spent waiting for batches",
    ("RankReading", "gpus"): "its own GPU's newest reading (empty on CPU)",
    ("RankReading", "cpu_percent"): "its process's CPU use over the interval (100 = one core)",
    ("RankReading", "process_rss"): "its resident memory, bytes",
    ("RankReading", "memory_peak"): "bytes: its memory breakdown's total, or its peak",
}


def metrics_page() -> str:
    from engine import events

    types = events.EVENT_TYPES
    missing = set(types) ^ set(METRICS_KINDS)
    if missing:
        raise SystemExit(
            f"docs/gen_reference.py: METRICS_KINDS and the engine's kinds differ: {sorted(missing)}"
        )
    parts = [HEADER, METRICS_INTRO]
    for kind, text in METRICS_KINDS.items():
        parts += [f"## `{kind}`\n", wrap(text) + "\n"]
        parts += [_fields_table(types[kind], lambda name, k=kind: METRICS_FIELDS.get((k, name))), ""]
    for name, text in NESTED_TEXT.items():
        cls = getattr(events, name)
        parts += [f"## {name}\n", wrap(text) + "\n"]
        parts += [_fields_table(cls, lambda f, n=name: NESTED_FIELDS.get((n, f))), ""]
    return "\n".join(parts).rstrip("\n") + "\n"


def _fields_table(cls: type, meaning: Callable[[str], str | None]) -> str:
    hints = typing.get_type_hints(cls)
    rows = []
    for f in dataclasses.fields(cls):
        if f.name == "time":
            continue
        text = meaning(f.name)
        if text is None:
            raise SystemExit(
                f"docs/gen_reference.py: say what {cls.__name__}.{f.name} means "
                "(METRICS_FIELDS or NESTED_FIELDS)"
            )
        rows.append(("", [code(f.name), _json_type(hints[f.name]), cell(text)]))
    return html_table(("field", "type", "meaning"), rows)


def _json_type(tp: Any) -> str:
    """A field's type as a JSON reader sees it."""
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    nullable = type(None) in typing.get_args(tp)
    if nullable and len(args) == 1:
        return _json_type(args[0]) + " | null"
    origin = typing.get_origin(tp)
    if origin is tuple:
        items = typing.get_args(tp)
        if len(items) == 2 and items[1] is Ellipsis:
            return f"array of {_json_type(items[0])}"
        return "[" + ", ".join(_json_type(item) for item in items) + "]"  # a fixed-length array
    if origin is dict or tp is dict:
        return "object"
    if dataclasses.is_dataclass(tp):
        return f'object (<a href="#{tp.__name__.lower()}">{tp.__name__}</a>)'
    return {int: "integer", float: "number", bool: "boolean", str: "string"}.get(tp, str(tp))


# ---------------------------------------------------------------------------------------------


PAGES: dict[str, Callable[[], str]] = {
    "cli.md": cli_page,
    "config.md": config_page,
    "metrics.md": metrics_page,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write the generated reference pages.")
    parser.add_argument("--check", action="store_true", help="only say which pages are stale")
    args = parser.parse_args(argv)
    stale = []
    for name, page in PAGES.items():
        path = REFERENCE / name
        text = page()
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        stale.append(name)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    if args.check and stale:
        print(f"out of date: {', '.join(stale)}; run python docs/gen_reference.py", file=sys.stderr)
        return 1
    for name in stale:
        print(f"wrote docs/reference/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
