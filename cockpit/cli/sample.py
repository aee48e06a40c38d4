"""`cockpit sample`: stream text from a trained model in the terminal.

stdout holds only the text (the prompt, then its continuation), so it can be piped; the header
(checkpoint, step, val loss, device), notes and the seed that reproduces a run go to stderr.
With --compare, stdout holds one table of the same prompt(s) from each source instead.
"""

from __future__ import annotations

import argparse
import math
import secrets
import shlex
import sys
from collections.abc import Iterator
from typing import Any, TextIO

NAME = "sample"
HELP = "stream text from a trained model (a run's best checkpoint by default)"
EPILOG = (
    "Example: cockpit sample runs/tiny-20260101-120000 --prompt 'def ' --tokens 200 --seed 1. "
    "Defaults come from the run's [sample] settings; --temperature 0 is greedy. "
    "cockpit sample runs/a --compare runs/b runs/a/ckpt-000500.pt --seed 1: the same prompt "
    "from each, in one table."
)
QUIT_WORDS = ("", ":q")
MAX_SEED = 2**64 - 1  # the largest seed torch's generator takes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = EPILOG
    parser.add_argument(
        "target", metavar="RUN_DIR|CKPT", help="a run directory or a checkpoint file"
    )
    parser.add_argument(
        "--prompt",
        default=None,
        metavar="TEXT",
        help="text to continue (default: the run's first sample prompt)",
    )
    parser.add_argument(
        "--tokens", type=int, default=None, metavar="N",
        help="tokens to generate (default: the run's sample.max_new_tokens)",
    )  # fmt: skip
    parser.add_argument(
        "--temperature", type=float, default=None, metavar="T",
        help="0 = greedy (the most likely token), else at least 1e-06; default: the run's "
        "sample.temperature",
    )  # fmt: skip
    parser.add_argument(
        "--top-k", type=int, default=None, metavar="K",
        help="sample among the K likeliest tokens, 0 = all (default: the run's sample.top_k)",
    )  # fmt: skip
    parser.add_argument(
        "--seed", type=int, default=None, metavar="S",
        help="make sampling repeatable, 0 to 2**64 - 1 (default: a fresh seed, printed at the "
        "end)",
    )  # fmt: skip
    parser.add_argument(
        "--device", default="auto", metavar="D",
        help="auto (cuda, then mps, then cpu), cpu, cuda, cuda:N or mps (default: auto)",
    )  # fmt: skip
    parser.add_argument(
        "--threads", type=int, default=None, metavar="N",
        help="CPU threads for torch (default: the run's train.threads; 0 = auto, one fewer "
        "than the cores)",
    )  # fmt: skip
    parser.add_argument(
        "--interactive", action="store_true",
        help="read prompts from stdin, one per line, until EOF, an empty line or :q",
    )  # fmt: skip
    parser.add_argument(
        "--compare", nargs="+", default=[], metavar="RUN_DIR|CKPT",
        help="sample these runs or checkpoints too, with the same settings and seed, and print "
        "the same prompt (--prompt, else each of the first's sample prompts) from each in one "
        "table: a column each on a wide terminal, else a block each",
    )  # fmt: skip


def check_numbers(args: argparse.Namespace) -> None:
    """Refuse out-of-range numbers before anything slow is loaded."""
    from engine.config import MIN_TEMPERATURE, ConfigError

    if args.tokens is not None and args.tokens < 1:
        raise ConfigError(f"--tokens {args.tokens}: generate at least 1 token; e.g. --tokens 200")
    if args.temperature is not None and not (
        args.temperature >= 0 and math.isfinite(args.temperature)
    ):
        raise ConfigError(
            f"--temperature {args.temperature}: must be 0 (greedy) or more; e.g. --temperature 0.8"
        )
    if args.temperature is not None and 0 < args.temperature < MIN_TEMPERATURE:
        raise ConfigError(
            f"--temperature {args.temperature:g}: too small to sample with (it picks as greedy "
            "does, and from about 1e-36 the logits divided by it are not finite in float32); "
            f"give 0 for greedy, or at least {MIN_TEMPERATURE:g}"
        )
    if args.seed is not None and not 0 <= args.seed <= MAX_SEED:
        raise ConfigError(f"--seed {args.seed}: must be 0 to {MAX_SEED} (2**64 - 1); e.g. --seed 1")
    if args.top_k is not None and args.top_k < 0:
        raise ConfigError(f"--top-k {args.top_k}: must be 0 (no top-k) or more; e.g. --top-k 200")
    if args.threads is not None and not 0 <= args.threads <= 1024:
        raise ConfigError(f"--threads {args.threads}: must be 0 (auto) to 1024; e.g. --threads 1")
    if getattr(args, "compare", None) and args.interactive:
        raise ConfigError(
            "--compare and --interactive: a comparison prints one table; give --prompt TEXT "
            "instead of --interactive"
        )


def pick_device(requested: str) -> Any:
    """The torch device for --device; a one-line ConfigError for an unknown or missing one."""
    from engine.config import ConfigError
    from engine.train import select_device

    try:
        return select_device(requested)
    except ConfigError as e:
        problem = str(e).removeprefix("train.device: ").split(";")[0]
        raise ConfigError(
            f"--device {requested}: {problem}; use auto, cpu, cuda, cuda:N or mps"
        ) from None


def torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def header(trained: Any, device: Any, options: Any) -> str:
    """One line: which checkpoint, its step, its val loss when known, the device, the settings."""
    state = trained.state
    parts = [f"step {trained.step:,}"]
    best_val = state.get("best_val")
    if state.get("is_best") and isinstance(best_val, float) and math.isfinite(best_val):
        parts.append(f"val loss {best_val:.4f}")  # best.pt: the val loss that made it the best
    how = "greedy" if options.temperature == 0 else f"temperature {options.temperature:g}"
    if options.temperature and options.top_k:
        how += f", top-k {options.top_k}"
    on = str(device)
    if on == "cpu":
        threads = torch_threads()
        on += f" ({threads} thread{'s' if threads != 1 else ''})"
    return (
        f"cockpit sample: {trained.path} ({', '.join(parts)}) on {on}; "
        f"{options.max_new_tokens:,} tokens, {how}"
    )


def reproduce_command(args: argparse.Namespace, options: Any, prompt: str | None, seed: int) -> str:
    """The command line that gives the same text again: every setting spelled out."""
    words = [shlex.quote(str(args.target))]
    if args.interactive:
        words.append("--interactive")
    if getattr(args, "compare", None):
        words += ["--compare", *(shlex.quote(str(t)) for t in args.compare)]
    if prompt is not None:
        words += ["--prompt", shell_quote(prompt)]
    words += [
        "--tokens",
        str(options.max_new_tokens),
        "--temperature",
        repr(float(options.temperature)),
    ]
    words += ["--top-k", str(options.top_k), "--device", shlex.quote(args.device)]
    return " ".join(["cockpit", "sample", *words, "--seed", str(seed)])


def shell_quote(text: str) -> str:
    """`text` as one shell word; control characters (the usual "\\n" prompt) as $'\\n'."""
    if text.isprintable():
        return shlex.quote(text)
    named = {"\n": "\\n", "\t": "\\t", "\r": "\\r", "\\": "\\\\", "'": "\\'"}

    def escape(c: str) -> str:
        if c in named:
            return named[c]
        if c.isprintable():
            return c
        return f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}"

    return "$'" + "".join(escape(c) for c in text) + "'"


def write_stream(pieces: Iterator[str], out: TextIO) -> None:
    """Print each piece as it comes: flushed, so the text appears while it is generated."""
    for piece in pieces:
        out.write(piece)
        out.flush()


def run(args: argparse.Namespace) -> int:
    check_numbers(args)  # before torch is imported: a typo answers at once
    from engine.checkpoint import CheckpointError
    from engine.config import ConfigError

    try:
        if getattr(args, "compare", None):
            return _sample_compare(args)
        return _sample(args)
    except BrokenPipeError:
        _silence_stdout()  # the reader went away (`| head`): nothing more to say
        return 0
    except KeyboardInterrupt:
        _end_line(sys.stdout)
        print("cockpit: interrupted", file=sys.stderr)
        return 130
    except ConfigError:
        raise
    except (CheckpointError, ValueError) as e:  # PromptError, DataError: ValueErrors
        print(f"cockpit: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # the checkpoint's errors are CheckpointErrors: this is the terminal
        print(f"cockpit: cannot write the text ({e}); check where stdout goes", file=sys.stderr)
        return 1
    except RuntimeError as e:  # torch: out of memory, a device that went away
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"cockpit: sampling failed ({first}){other_device(args.device)}", file=sys.stderr)
        return 1


def other_device(requested: str) -> str:
    """'; try --device cpu' after a failure on another device; nothing after one on the CPU."""
    from engine.config import ConfigError

    try:
        on_cpu = pick_device(requested).type == "cpu"
    except ConfigError:
        on_cpu = False
    return "" if on_cpu else "; try --device cpu"


def _sample(args: argparse.Namespace) -> int:
    import torch

    from engine.checkpoint import load_trained
    from engine.model import SamplingOptions, encode_prompt, stream_text
    from engine.train import apply_threads, autocast_context, select_dtype

    device = pick_device(args.device)
    trained = load_trained(args.target, device=str(device))
    cfg = trained.cfg
    threads = cfg.train.threads if args.threads is None else args.threads
    apply_threads(threads, device.type)  # a thread per core crawls on a busy machine
    options = SamplingOptions(
        max_new_tokens=cfg.sample.max_new_tokens if args.tokens is None else args.tokens,
        temperature=cfg.sample.temperature if args.temperature is None else args.temperature,
        top_k=cfg.sample.top_k if args.top_k is None else args.top_k,
    )
    prompt = args.prompt
    if prompt is None and not args.interactive:
        prompt = cfg.sample.prompts[0] if cfg.sample.prompts else ""
    if prompt is not None:  # checked before the header: a bad prompt is one line only
        encode_prompt(trained.tokenizer, prompt, cfg.model.block_size)
    print(header(trained, device, options), file=sys.stderr)
    greedy = options.temperature == 0
    seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
    generator = None if greedy else torch.Generator(device=device).manual_seed(seed)
    # the run's dtype on a GPU (bf16/fp16 autocast); fp32 on the CPU, as in training
    autocast = autocast_context(device, select_dtype(cfg.train.dtype, device))

    def generate(text: str) -> None:
        encoded = encode_prompt(trained.tokenizer, text, cfg.model.block_size)
        if encoded.cropped:
            print(
                f"cockpit sample: the prompt is {encoded.cropped + len(encoded.ids)} tokens, "
                f"longer than this model's block_size {cfg.model.block_size}: it sees the last "
                f"{len(encoded.ids)}",
                file=sys.stderr,
            )
        sys.stdout.write(text)
        sys.stdout.flush()
        pieces = stream_text(
            trained.model, trained.tokenizer, encoded.ids, options, device, generator, autocast
        )
        write_stream(pieces, sys.stdout)

    if args.interactive:
        code = _interactive(generate, prompt)
    else:
        generate(prompt)
        sys.stdout.write("\n")
        sys.stdout.flush()
        code = 0
    if not greedy and args.seed is None:
        command = reproduce_command(args, options, prompt, seed)
        print(f"seed {seed}: {command}", file=sys.stderr)
    return code


def _sample_compare(args: argparse.Namespace) -> int:
    """Load each source, sample each prompt with the same settings and seed, print the table."""
    import torch

    from cockpit.cli.sample_compare import source_name, table, terminal_width
    from engine.checkpoint import load_trained
    from engine.model import SamplingOptions, encode_prompt, stream_text
    from engine.train import apply_threads, autocast_context, select_dtype

    device = pick_device(args.device)
    targets = [args.target, *args.compare]
    models = [load_trained(t, device=str(device)) for t in targets]  # every one before any text
    cfg = models[0].cfg  # the first source's settings for all: the same sampling for each
    apply_threads(cfg.train.threads if args.threads is None else args.threads, device.type)
    options = SamplingOptions(
        max_new_tokens=cfg.sample.max_new_tokens if args.tokens is None else args.tokens,
        temperature=cfg.sample.temperature if args.temperature is None else args.temperature,
        top_k=cfg.sample.top_k if args.top_k is None else args.top_k,
    )
    if args.prompt is not None:
        prompts = [args.prompt]
    else:
        prompts = list(cfg.sample.prompts) or [""]
    for trained in models:  # a prompt a source cannot encode is one line, before any sampling
        for prompt in prompts:
            encode_prompt(trained.tokenizer, prompt, trained.cfg.model.block_size)
    for trained in models:
        print(header(trained, device, options), file=sys.stderr)
    greedy = options.temperature == 0
    seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
    texts: list[list[str]] = []
    for prompt in prompts:
        row = []
        for trained in models:
            encoded = encode_prompt(trained.tokenizer, prompt, trained.cfg.model.block_size)
            generator = None if greedy else torch.Generator(device=device).manual_seed(seed)
            autocast = autocast_context(device, select_dtype(trained.cfg.train.dtype, device))
            pieces = stream_text(trained.model, trained.tokenizer, encoded.ids, options, device,
                                 generator, autocast)  # fmt: skip
            row.append(prompt + "".join(pieces))
        texts.append(row)
    names = [source_name(t, m) for t, m in zip(targets, models, strict=True)]
    shown = [shell_quote(p) for p in prompts]
    sys.stdout.write(table(shown, names, texts, terminal_width(sys.stdout)))
    sys.stdout.flush()
    if not greedy and args.seed is None:
        print(
            f"seed {seed}: {reproduce_command(args, options, args.prompt, seed)}", file=sys.stderr
        )
    return 0


def _interactive(generate: Any, first_prompt: str | None) -> int:
    """Prompts from stdin until EOF, an empty line or :q (a --prompt goes first). ctrl+c stops
    the generation under way and asks again; ctrl+c at the prompt leaves quietly."""
    from engine.model import PromptError

    tty = sys.stdin.isatty()
    pending = [first_prompt] if first_prompt else []
    while True:
        if pending:
            line = pending.pop()
        else:
            try:
                if tty:
                    sys.stderr.write("> ")
                    sys.stderr.flush()
                line = sys.stdin.readline()
            except KeyboardInterrupt:
                if tty:
                    sys.stderr.write("\n")
                return 0
            if not line:  # EOF
                return 0
            line = line.rstrip("\r\n")
            if line.strip() in QUIT_WORDS:
                return 0
        try:
            generate(line)
        except PromptError as e:
            print(f"cockpit: {e}", file=sys.stderr)  # this prompt only: ask for another
            continue  # nothing was printed on stdout
        except KeyboardInterrupt:
            print("\ncockpit sample: stopped", file=sys.stderr)
        sys.stdout.write("\n")
        sys.stdout.flush()


def _end_line(out: TextIO) -> None:
    try:
        out.write("\n")
        out.flush()
    except (BrokenPipeError, ValueError):
        pass


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail again."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
