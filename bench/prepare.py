"""Corpus preparation: cockpit's throughput and peak memory against tiktoken's own batch encoder.

Generates a corpus of the given size on disk (words of Tiny Shakespeare's vocabulary with
Zipf-like frequencies, in lines and paragraphs; deterministic for a seed), then, each in a
child process of its own so that each peak RSS is that work's alone:
- cockpit: engine.data.preparation.prepare() with GPT-2's BPE into a fresh COCKPIT_CACHE_DIR;
- tiktoken: `encode_ordinary_batch` over the same text with the same thread count, read in
  pieces of about 1 MiB, 4 pieces per thread per batch (as engine/data/preparation.py feeds it), tokens
  counted and discarded.
Each child loads the encoding before its clock starts and its baseline RSS is read then, so
both measure the work alone. Peak RSS is the child's own high-water mark (VmHWM). MB are
10^6 bytes of corpus file; RSS figures are MB too.

    python -m bench.prepare [--size 2GB] [--tokenizer r50k_base] [--threads N] [--dir DIR]
                            [--keep] [--format text|jsonl] [--seed 0] [--rounds 1]

Goals (issue 13): cockpit's MB/s >= 0.9 of tiktoken's, peak RSS < 1.5 GB.
The thread count reaches cockpit's preparation through os.sched_getaffinity() and os.cpu_count()
(patched in its child, as engine/data/tokenizers.py reads them) and, when below the cores available,
through the real CPU affinity of both children.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SHAKESPEARE = REPO.parent / "shared" / "data" / "tinyshakespeare" / "input.txt"
TIKTOKEN_CACHE = REPO.parent / "shared" / "data" / "tiktoken-cache"
MB = 1_000_000
GOAL_RATIO = 0.9
GOAL_PEAK_MB = 1500
PIECE_BYTES = 4 * MB  # generation writes the corpus in pieces of about this size
READ_CHUNK_BYTES = 1 << 20  # tiktoken's side reads the text in pieces of about this size
ZIPF_EXPONENT = 1.1
ZIPF_TABLE = 1 << 22
SIZE_UNITS = {"": 1, "B": 1, "K": 10**3, "KB": 10**3, "M": MB, "MB": MB, "G": 10**9, "GB": 10**9}


class BenchError(Exception):
    """A bad argument or a failed child: one line for the user."""


# ---------------------------------------------------------------------------------------------
# Arguments


def parse_size(raw: str) -> int:
    """'2GB', '200MB', '1.5G', '2000000' -> bytes (decimal units)."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", raw)
    unit = match.group(2).upper() if match else None
    if match is None or unit not in SIZE_UNITS:
        raise BenchError(f"--size {raw!r} is not a size; write e.g. 2GB, 200MB or 2000000")
    size = int(float(match.group(1)) * SIZE_UNITS[unit])
    if size < 1000:
        raise BenchError(f"--size {raw!r} is under 1 KB; ask for at least 1KB")
    return size


def format_size(size: int) -> str:
    return f"{size / 10**9:g}GB" if size >= 10**9 else f"{size / MB:g}MB"


# ---------------------------------------------------------------------------------------------
# Generating the corpus


def vocabulary(text: str) -> tuple[np.ndarray, np.ndarray]:
    """Distinct words (with their trailing punctuation) by falling frequency, and Zipf weights."""
    counts = Counter(re.findall(r"[A-Za-z']+[,.;:!?]?", text))
    words = np.array([w for w, _ in counts.most_common()], dtype=object)
    weights = 1.0 / np.arange(1, len(words) + 1) ** ZIPF_EXPONENT
    return words, weights / weights.sum()


def source_text() -> str:
    if SHAKESPEARE.is_file():
        return SHAKESPEARE.read_text(encoding="utf-8")
    from pydoc_data.topics import topics  # the offline fallback: Python's help topics

    return "\n".join(topics.values())


def text_pieces(size: int, seed: int) -> Iterator[bytes]:
    """About `size` bytes of text, piece by piece, cut at the end at a line boundary.

    Built with numpy byte gathers rather than string joins: ~10x faster, which matters at 2 GB.
    """
    words, weights = vocabulary(source_text())
    encoded = [w.encode("ascii") for w in words]
    lengths = np.array([len(w) for w in encoded], dtype=np.int32)
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    letters = np.frombuffer(b"".join(encoded) + b"  ", dtype=np.uint8)  # padded: see src below
    # A lookup table from uniform integers to words: faster than a search per word, and with
    # 2^22 slots every word of Tiny Shakespeare still gets several.
    table = np.minimum(
        np.searchsorted(np.cumsum(weights), (np.arange(ZIPF_TABLE) + 0.5) / ZIPF_TABLE),
        len(words) - 1,
    ).astype(np.int32)
    mean_word_bytes = float((lengths * weights).sum()) + 1.1
    rng = np.random.default_rng(seed)
    written = 0
    while written < size:
        n = max(16, int(min(PIECE_BYTES, size - written) / mean_word_bytes))
        idx = table[rng.integers(0, ZIPF_TABLE, n)]
        # After each word: mostly a space, a line break every ~10 words, a paragraph every ~60.
        draw = rng.random(n)
        kind = (draw >= 0.885).astype(np.int8) + (draw >= 0.985)  # 0 ' ', 1 \n, 2 \n\n
        kind[-1] = 1
        seg = lengths[idx] + np.where(kind == 2, 2, 1)
        ends = np.cumsum(seg)
        total = int(ends[-1])
        # Byte j of a segment reads letters[start + j] (separator bytes are overwritten next):
        # a running sum of ones that jumps to the next word's start (np.repeat is slower).
        step = np.ones(total, dtype=np.int32)
        first = starts[idx]
        step[0] = first[0]
        step[(ends - seg)[1:]] = first[1:] - (first[:-1] + seg[:-1] - 1)
        src = np.cumsum(step, dtype=np.int32)
        out = letters[src]
        out[ends - 1] = np.where(kind == 0, ord(" "), ord("\n"))
        out[(ends - 2)[kind == 2]] = ord("\n")
        piece = out.tobytes()
        left = size - written
        if len(piece) >= left:
            cut = piece.rfind(b"\n", 0, left)
            piece = piece[: cut + 1] if cut > 0 else piece  # a line cut short: better a bit over
            written = size
        else:
            written += len(piece)
        yield piece


def jsonl_pieces(pieces: Iterator[bytes]) -> Iterator[bytes]:
    """The same text as JSON lines: one document per paragraph, in the field "text"."""
    for piece in pieces:
        docs = [d for d in piece.decode("ascii").split("\n\n") if d.strip()]
        yield "".join(json.dumps({"text": d}) + "\n" for d in docs).encode("ascii")


def generate(path: Path, size: int, fmt: str, seed: int) -> None:
    pieces = text_pieces(size, seed)
    if fmt == "jsonl":
        pieces = jsonl_pieces(pieces)
    tmp = path.with_name(path.name + ".part")
    try:
        with open(tmp, "wb") as f:
            for piece in pieces:
                f.write(piece)
        tmp.replace(path)  # a cut-short generation is never taken for a corpus
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise BenchError(
            f"cannot write the corpus to {path.parent} ({e.strerror or e}); free some disk "
            f"space or pass --dir to a folder with room"
        ) from None


# ---------------------------------------------------------------------------------------------
# The two measurements, each in a child process

CHILD_SETUP = r"""
import json, os, resource, sys, time
import psutil
args = json.loads(sys.argv[1])
threads = args["threads"]
allowed = sorted(os.sched_getaffinity(0))
if threads < len(allowed):
    os.sched_setaffinity(0, allowed[:threads])
import tiktoken
enc = tiktoken.get_encoding(args["tokenizer"])

def peak_rss():
    # VmHWM is this process's own high-water mark; ru_maxrss would carry over the parent's
    # peak through fork and exec when that was higher (a small run would read the bench's own).
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
"""

COCKPIT_CHILD = CHILD_SETUP + r"""
# engine/data/tokenizers.py sizes its thread pool from the affinity (older code: os.cpu_count), which
# would cap it at the cores here: both say `threads`, as tiktoken's side is told.
os.cpu_count = lambda: threads
os.sched_getaffinity = lambda pid: set(range(threads))
from engine.config.run_config import DataConfig
from engine.data.preparation import DataError, prepare
cfg = DataConfig(source=args["path"], tokenizer=args["tokenizer"])
baseline = psutil.Process().memory_info().rss
t0 = time.perf_counter()
try:
    data = prepare(cfg, cache_dir=args["cache_dir"], download=False)
except DataError as e:
    print(json.dumps({"error": str(e)}))
    sys.exit(0)
seconds = time.perf_counter() - t0
peak = peak_rss()
tokens = int(data.meta["train_tokens"]) + int(data.meta["val_tokens"])
print(json.dumps({"seconds": seconds, "tokens": tokens, "peak": peak, "baseline": baseline}))
"""

TIKTOKEN_CHILD = CHILD_SETUP + r"""
def text_batches(path, per_batch):
    # pieces of about 1 MiB cut after a newline, per_batch pieces at a time
    batch, rest = [], b""
    with open(path, "rb") as f:
        while True:
            block = f.read(args["chunk_bytes"])
            if not block:
                break
            block = rest + block
            cut = block.rfind(b"\n") + 1
            if cut == 0:
                rest = block
                continue
            batch.append(block[:cut].decode("utf-8"))
            rest = block[cut:]
            if len(batch) == per_batch:
                yield batch
                batch = []
    if rest:
        batch.append(rest.decode("utf-8"))
    if batch:
        yield batch

def jsonl_batches(path, per_batch):
    # documents (the "text" field), about per_batch MiB of them at a time
    batch, held = [], 0
    with open(path, "rb") as f:
        for line in f:
            if not line.strip():
                continue
            batch.append(json.loads(line)["text"])
            held += len(line)
            if held >= per_batch * args["chunk_bytes"]:
                yield batch
                batch, held = [], 0
    if batch:
        yield batch

batches = jsonl_batches if args["format"] == "jsonl" else text_batches
baseline = psutil.Process().memory_info().rss
t0 = time.perf_counter()
tokens = 0
for batch in batches(args["path"], 4 * threads):
    tokens += sum(map(len, enc.encode_ordinary_batch(batch, num_threads=threads)))
seconds = time.perf_counter() - t0
peak = peak_rss()
print(json.dumps({"seconds": seconds, "tokens": tokens, "peak": peak, "baseline": baseline}))
"""


def run_child(name: str, code: str, args: dict, env: dict[str, str]) -> dict:
    """Run one measurement in a fresh interpreter; its last stdout line is a JSON result."""
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise BenchError(f"the {name} measurement failed (exit {done.returncode}: {last})")
    result = json.loads(lines[-1])
    if "error" in result:
        raise BenchError(f"cockpit's preparation refused the corpus: {result['error']}")
    return result


def child_env(cache_dir: Path) -> dict[str, str]:
    env = {**os.environ, "COCKPIT_CACHE_DIR": str(cache_dir)}
    if "TIKTOKEN_CACHE_DIR" not in env and TIKTOKEN_CACHE.is_dir():
        env["TIKTOKEN_CACHE_DIR"] = str(TIKTOKEN_CACHE)  # the machine may be offline
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return env


# ---------------------------------------------------------------------------------------------
# Report


def result_line(label: str, size: int, r: dict) -> str:
    s = r["seconds"]
    return (
        f"{label:<16} {s:8.2f} s  {size / MB / s:8.2f} MB/s  {r['tokens'] / s:>12,.0f} tokens/s  "
        f"{r['tokens']:>14,} tokens  peak RSS {r['peak'] / MB:8,.0f} MB  "
        f"above baseline {(r['peak'] - r['baseline']) / MB:8,.0f} MB "
        f"(baseline {r['baseline'] / MB:,.0f} MB)"
    )


def median_result(runs: list[dict]) -> dict:
    """Median time over rounds; the highest peak RSS (and that run's baseline)."""
    worst = max(runs, key=lambda r: r["peak"] - r["baseline"])
    return {
        "seconds": statistics.median(r["seconds"] for r in runs),
        "tokens": runs[0]["tokens"],
        "peak": worst["peak"],
        "baseline": worst["baseline"],
    }


def verdict_lines(size: int, ours: dict, theirs: dict) -> list[str]:
    ratio = theirs["seconds"] / ours["seconds"]  # same bytes: the ratio of MB/s
    peak_mb = ours["peak"] / MB
    above_mb = (ours["peak"] - ours["baseline"]) / MB
    return [
        f"ratio cockpit/tiktoken {ratio:.3f} (goal >= {GOAL_RATIO}): "
        f"{'met' if ratio >= GOAL_RATIO else 'not met'}",
        f"cockpit peak RSS {peak_mb:,.0f} MB < {GOAL_PEAK_MB:,} MB (goal): "
        f"{'yes' if peak_mb < GOAL_PEAK_MB else 'no'}; above baseline {above_mb:,.0f} MB: "
        f"{'yes' if above_mb < GOAL_PEAK_MB else 'no'}; "
        f"above baseline = {above_mb * MB / size:.2f}x the corpus",
    ]


# ---------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.prepare", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--size", default="2GB", help="corpus size, e.g. 2GB, 200MB (decimal)")
    parser.add_argument("--tokenizer", default="r50k_base", help="a tiktoken encoding")
    parser.add_argument(
        "--threads", type=int, default=min(8, os.cpu_count() or 1), help="tokenizer threads"
    )
    parser.add_argument("--dir", help="where the corpus goes (default: a new temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the corpus (reused next time)")
    parser.add_argument("--format", choices=("text", "jsonl"), default="text")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--rounds", type=int, default=1, help="alternating runs of each; medians are compared"
    )
    return parser.parse_args(argv)


def check_dir(raw: str | None) -> Path:
    """The working folder: given (never inside the repository) or a new temporary one."""
    if raw is None:
        return Path(tempfile.mkdtemp(prefix="cockpit-bench-prepare-"))
    where = Path(raw).expanduser().resolve()
    if where == REPO or REPO in where.parents:
        raise BenchError(f"--dir {raw} is inside the repository; put the corpus outside it")
    try:
        where.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BenchError(
            f"cannot make --dir {raw} ({e.strerror or e}); pick a writable folder"
        ) from None
    return where


def run(args: argparse.Namespace) -> None:
    size = parse_size(args.size)
    if args.threads < 1:
        raise BenchError(f"--threads {args.threads} is below 1; give 1 or more")
    if args.rounds < 1:
        raise BenchError(f"--rounds {args.rounds} is below 1; give 1 or more")
    work = check_dir(args.dir)
    suffix = ".jsonl" if args.format == "jsonl" else ".txt"
    corpus = work / f"corpus-{format_size(size)}-seed{args.seed}{suffix}"
    cache_dir = Path(tempfile.mkdtemp(prefix="cockpit-cache-", dir=work))
    try:
        if corpus.is_file():
            print(f"corpus: reusing {corpus}")
        else:
            t0 = time.perf_counter()
            generate(corpus, size, args.format, args.seed)
            s = time.perf_counter() - t0
            print(f"corpus: generated {corpus} in {s:.1f} s ({size / MB / s:.1f} MB/s)")
        file_bytes = corpus.stat().st_size
        print(
            f"{format_size(size)} {args.format} ({file_bytes:,} bytes), {args.tokenizer}, "
            f"{args.threads} threads, {os.cpu_count()} cores"
        )
        child_args = {
            "path": str(corpus),
            "tokenizer": args.tokenizer,
            "threads": args.threads,
            "format": args.format,
            "cache_dir": str(cache_dir),
            "chunk_bytes": READ_CHUNK_BYTES,
        }
        env = child_env(cache_dir)
        ours_runs, theirs_runs = [], []
        for _ in range(args.rounds):  # alternating, so that load from elsewhere hits both alike
            shutil.rmtree(cache_dir, ignore_errors=True)  # a prepared corpus would be reused
            ours_runs.append(run_child("cockpit", COCKPIT_CHILD, child_args, env))
            print(result_line("cockpit prepare", file_bytes, ours_runs[-1]), flush=True)
            theirs_runs.append(run_child("tiktoken", TIKTOKEN_CHILD, child_args, env))
            print(result_line("tiktoken batch", file_bytes, theirs_runs[-1]), flush=True)
        ours, theirs = median_result(ours_runs), median_result(theirs_runs)
        if args.rounds > 1:
            print(result_line("cockpit median", file_bytes, ours))
            print(result_line("tiktoken median", file_bytes, theirs))
        for line in verdict_lines(file_bytes, ours, theirs):
            print(line)
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)
        if not args.keep:
            corpus.unlink(missing_ok=True)
            if args.dir is None:
                shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        run(args)
    except BenchError as e:
        print(f"cockpit: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("cockpit: bench interrupted; rerun it", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
