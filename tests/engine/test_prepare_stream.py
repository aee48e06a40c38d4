"""Streaming corpus preparation (issue 13): the same tokens as tokenizing each document whole,
JSON lines and Parquet, skipped records counted, progress and stop, an interrupted preparation
started over, two processes sharing one, and memory that does not grow with the corpus."""

from __future__ import annotations

import fcntl
import gzip
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from command_here import cockpit_here

from cockpit.figures.data_progress_text import progress_line
from engine.config.run_config import DataConfig
from engine.data import build as prepare_build
from engine.data import preparation as engine_data
from engine.data import progress as prepare_progress
from engine.data import reader as corpus_reader
from engine.data import tokenizers
from engine.data.errors import PreparationStopped
from engine.data.locator import resolve_source
from engine.data.preparation import DataError, prepare
from engine.data.prepared import TokenWriter, has_leftovers
from engine.data.sources import source_sha256
from engine.data.tokenizers import CharTokenizer, TiktokenTokenizer, split_at_safe_points
from engine.events import DataProgress

REPO = Path(__file__).resolve().parents[2]
STRESS_PARTS = (
    "word ", "  ", "   spaced", "\n", "\n\n", "\r\n", " \n", "x\r\ny", "café ", "naïve",
    "日本語", "🙂🙂", "e\u0301", "1234567", " 42", "'s ", "don't ", "...", "!?", "\t", "a" * 300,
    "Hello", " World", ".\nNext", "<|endoftext|>", "  \n  ", "_id", "über-", "¿Qué?", "\u00a0",
)


def stress_text(seed: int, parts: int = 3000, newlines: bool = True) -> str:
    """Text built to hit boundaries: long lines, runs of spaces, CRLF, multi-byte characters."""
    rng = random.Random(seed)
    pool = [p for p in STRESS_PARTS if newlines or ("\n" not in p and "\r" not in p)]
    return "".join(rng.choice(pool) for _ in range(parts))


def all_tokens(prepared: engine_data.PreparedData) -> list[int]:
    return np.concatenate([prepared.train, prepared.val]).tolist()


@pytest.fixture
def r50k(tiktoken_cache: Path) -> TiktokenTokenizer:
    return TiktokenTokenizer("r50k_base")


@pytest.fixture
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tiny reads, pieces and batches, so chunk edges fall everywhere (inside characters too)."""
    monkeypatch.setattr(corpus_reader, "READ_BYTES", 37)
    monkeypatch.setattr(prepare_build, "PIECE_CHARS", 50)
    monkeypatch.setattr(prepare_build, "CHAR_PIECE_CHARS", 41)
    monkeypatch.setattr(prepare_build, "BATCH_CHARS", 300)
    monkeypatch.setattr(prepare_build, "encode_threads", lambda: 2)


def cfg_for(path: Path, tokenizer: str = "char", **overrides: object) -> DataConfig:
    return DataConfig(source=str(path), tokenizer=tokenizer, **overrides)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Safe cuts: pieces tokenize exactly as the whole text


@pytest.mark.parametrize("seed", range(6))
def test_safe_cuts_never_change_bpe_tokens(r50k: TiktokenTokenizer, seed: int) -> None:
    text = stress_text(seed, newlines=seed % 2 == 0)  # odd seeds: no newline at all
    for chunk in (1, 7, 64):
        pieces = list(split_at_safe_points(text, chunk))
        assert "".join(pieces) == text and len(pieces) > 20
        streamed = [t for piece in pieces for t in r50k.encode(piece)]
        assert streamed == r50k.encode(text), (seed, chunk)


def test_a_one_line_text_is_still_cut_into_bounded_pieces() -> None:
    text = " ".join(["lorem", "ipsum", "dolor"] * 20_000)  # 360 KB, no newline
    pieces = list(split_at_safe_points(text, 1000))
    assert "".join(pieces) == text
    assert max(map(len, pieces)) <= 1000 + 10 and len(pieces) > 300


def no_space_texts() -> dict[str, str]:
    """Long lines without a space: some with word ends to cut at (code, CSV, prose run
    together), some one word throughout (DNA, digits, symbols, CJK, emoji, accents, CRLF)."""
    rng = random.Random(3)
    # stress_text's "a" * 300 is left out: a long run of one letter is the case that cannot
    # be joined (test_a_run_of_one_letter_cut_inside_is_counted_and_noted)
    prose = re.sub(r"\s+|a{300}", "", stress_text(5, parts=6000))
    return {
        "prose": prose,
        "csv": ",".join(str(rng.randrange(10**6)) for _ in range(8000)),
        "dna": "".join(rng.choices("acgt", k=40_000)),
        "digits": "".join(rng.choices("0123456789", k=30_000)),
        "punctuation": "".join(rng.choices("=-+*#", k=30_000)),
        "cjk": "".join(rng.choices("日本語中文字漢", k=15_000)),
        "emoji": "🙂" * 10_000,
        "accents": "e\u0301" * 10_000,
        "crlf": "\r\n" * 10_000,
        "mixed case": "".join(rng.choices("aAbB", k=30_000)),
    }


@pytest.mark.parametrize("kind", list(no_space_texts()))
def test_a_line_without_safe_points_is_cut_and_its_tokens_joined_as_the_whole(
    r50k: TiktokenTokenizer, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: no cut at all (one piece, the whole line held, rescanned for every block read).
    monkeypatch.setattr(tokenizers, "CUT_SEARCH_CHARS", 64)
    text = no_space_texts()[kind]
    whole = r50k.encode(text)
    for chunk in (300, 2000):
        pieces = list(split_at_safe_points(text, chunk))
        assert "".join(pieces) == text
        assert max(map(len, pieces)) <= chunk + 64 and len(pieces) >= len(text) // (chunk + 64)
        assert r50k.encode_corpus(text, chunk_chars=chunk).tolist() == whole, (kind, chunk)


@pytest.mark.parametrize(
    "text",
    ["x" + "a" * 50_001 + "y" + "=" * 30_003 + "0" * 20_000, "Q" + "=-" * 30_000, "_" * 100_000],
    ids=["runs of one character", "a repeated pair", "one run"],
)
def test_a_run_of_one_character_is_cut_where_its_tokens_stay(
    r50k: TiktokenTokenizer, text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # BPE tokens a run from its start ('aaaa' x n, '=' x 64 ...): a cut inside it at a multiple
    # of RUN_ALIGN from there (pieces of a multiple of it, as PIECE_CHARS is) joins checked.
    monkeypatch.setattr(tokenizers, "CUT_SEARCH_CHARS", 64)
    pieces = list(split_at_safe_points(text, 4096))
    assert len(pieces) > 10 and "".join(pieces) == text
    encoded = [np.asarray(r50k.encode(piece), dtype=np.uint32) for piece in pieces]
    joined, unchecked = r50k.join_pieces(pieces, encoded)
    assert unchecked == 0 and np.concatenate(joined).tolist() == r50k.encode(text)
    assert prepare_build.PIECE_CHARS % tokenizers.RUN_ALIGN == 0


def test_a_join_that_cannot_be_checked_is_said_so() -> None:
    # join_at_cut's answer when no re-encoding around the cut agrees with its neighbours: the
    # tokens are kept as they are and the cut counted as unchecked (prepare's note names it).
    class Fake(TiktokenTokenizer):
        def __init__(self) -> None:
            self.end_of_text = None

    fake = Fake()
    fake._enc = type("E", (), {"decode_bytes": lambda self, ids: b"\xff"})()  # never UTF-8
    left, right = np.array([1, 2], dtype=np.uint32), np.array([3], dtype=np.uint32)
    assert [a.tolist() if hasattr(a, "tolist") else a for a in fake.join_at_cut(left, right)] == [
        [1, 2], [3], False,
    ]


def test_a_run_of_one_letter_cut_inside_is_counted_and_noted(
    tmp_path: Path, r50k: TiktokenTokenizer, small_pieces: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # BPE splits "aaaa..." from the run's start: a cut not at a multiple of that period (here
    # pieces of 50, not a multiple of RUN_ALIGN) moves every token after it, which no
    # re-encoding near the cut can mend. Said, never silent.
    monkeypatch.setattr(tokenizers, "CUT_SEARCH_CHARS", 16)
    corpus = tmp_path / "run.txt"
    corpus.write_text("x" + "a" * 2001, encoding="ascii")
    events: list[DataProgress] = []
    prepared = prepare(cfg_for(corpus, "r50k_base"), cache_dir=tmp_path / "c", progress=events.append)
    assert 0 < prepared.meta["unchecked_cuts"] <= prepared.meta["cuts_inside_words"]
    note = events[-1].note
    assert events[-1].done and "could not be checked" in note and "may differ" in note
    assert note in progress_line(events[-1])  # `cockpit data prepare` prints it too
    assert prepared.tokenizer.decode(all_tokens(prepared)) == "x" + "a" * 2001


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="VmHWM is Linux's")
def test_a_long_line_without_spaces_prepares_with_progress_and_the_whole_texts_tokens(
    tmp_path: Path, r50k: TiktokenTokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """2 MB of one word (a DNA sequence): pieces flow (progress while reading, bounded memory)
    and the token file is the whole line's encoding. Before: one 2 MB piece, no progress line
    until all was read (at 16 MB: 870 MB peak RSS, 46 s; now 124 MB, 22 s)."""
    text = "".join(random.Random(4).choices("acgt", k=2 << 20))
    corpus = tmp_path / "dna.txt"
    corpus.write_text(text, encoding="ascii")
    monkeypatch.setattr(prepare_progress, "PROGRESS_INTERVAL_S", 0.0)  # every report shows
    events: list[DataProgress] = []
    prepared = prepare(cfg_for(corpus, "r50k_base"), cache_dir=tmp_path / "c", progress=events.append)
    assert any(0 < e.bytes_read < len(text) and not e.done for e in events), events[:3]
    assert all_tokens(prepared) == r50k.encode(text)
    assert prepared.meta["cuts_inside_words"] >= 6 and prepared.meta["unchecked_cuts"] == 0
    assert events[-1].done and events[-1].note == ""


# ---------------------------------------------------------------------------------------------
# prepare(): streamed tokens equal whole-document tokens


def test_streamed_bpe_file_equals_the_whole_text(
    tmp_path: Path, r50k: TiktokenTokenizer, small_pieces: None
) -> None:
    text = stress_text(11, parts=4000)
    corpus = tmp_path / "stress.txt"
    corpus.write_bytes(text.encode("utf-8"))
    prepared = prepare(cfg_for(corpus, "r50k_base"), cache_dir=tmp_path / "cache")
    assert all_tokens(prepared) == r50k.encode(text)  # one text file: no end-of-text token
    assert prepared.meta["total_tokens"] == len(r50k.encode(text))
    assert prepared.meta["format"] == "text" and prepared.meta["documents"] == 1


def test_streamed_char_file_equals_the_whole_text(tmp_path: Path, small_pieces: None) -> None:
    text = "\ufeff" + stress_text(12, parts=4000)
    corpus = tmp_path / "stress.txt"
    corpus.write_bytes(text.encode("utf-8"))
    prepared = prepare(cfg_for(corpus), cache_dir=tmp_path / "cache")
    whole = CharTokenizer.from_text(text[1:])  # the byte-order mark is not text
    assert prepared.tokenizer.to_meta() == whole.to_meta()
    assert all_tokens(prepared) == whole.encode(text[1:])


def test_a_folder_of_text_files_keeps_its_blank_line_between_files_char(tmp_path: Path) -> None:
    root = tmp_path / "corpus"
    root.mkdir()
    (root / "a.txt").write_text("first")
    (root / "b.md").write_text("second")
    prepared = prepare(cfg_for(root), cache_dir=tmp_path / "cache")
    assert prepared.tokenizer.decode(all_tokens(prepared)) == "first\n\nsecond"
    custom = prepare(cfg_for(root, separator=" | "), cache_dir=tmp_path / "cache")
    assert custom.tokenizer.decode(all_tokens(custom)) == "first | second"


# ---------------------------------------------------------------------------------------------
# JSON lines and Parquet


DOCS = ["The first document.", "Second: café, 日本語 🙂\nwith a newline.", "third " * 200]
BAD_LINES = [
    "{not json",
    json.dumps({"content": "no text field"}),
    json.dumps({"text": 42}),
    json.dumps({"text": ""}),
    json.dumps(["a", "list"]),
]


def jsonl_bytes(docs: list[str], bad: list[str] = BAD_LINES) -> bytes:
    lines = [json.dumps({"text": doc, "url": "u"}) for doc in docs]
    mixed = [lines[0], *bad, "", *lines[1:]]  # a blank line is no record
    return ("\n".join(mixed) + "\n").encode("utf-8") + b'{"text": "\xff bad utf-8"}\n'


def bpe_expected(r50k: TiktokenTokenizer, docs: list[str]) -> list[int]:
    eot = r50k.end_of_text
    return [t for doc in docs for t in [*r50k.encode(doc), eot]]


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz", ".jsonl.zst"])
def test_jsonl_documents_end_with_end_of_text_and_bad_records_are_counted(
    tmp_path: Path, r50k: TiktokenTokenizer, small_pieces: None, suffix: str
) -> None:
    raw = jsonl_bytes(DOCS)
    if suffix == ".jsonl.gz":
        raw = gzip.compress(raw)
    elif suffix == ".jsonl.zst":
        zstandard = pytest.importorskip("zstandard")
        raw = zstandard.ZstdCompressor().compress(raw)
    corpus = tmp_path / f"docs{suffix}"
    corpus.write_bytes(raw)
    events: list[DataProgress] = []
    prepared = prepare(
        cfg_for(corpus, "r50k_base"), cache_dir=tmp_path / "cache", progress=events.append
    )
    assert all_tokens(prepared) == bpe_expected(r50k, DOCS)
    assert (prepared.meta["documents"], prepared.meta["skipped"]) == (3, 6)
    assert prepared.meta["format"] == "jsonl"
    assert prepared.meta["source_bytes"] == len(raw)
    last = events[-1]
    assert last.done and not last.reused and (last.documents, last.skipped) == (3, 6)
    assert last.bytes_read == last.bytes_total == len(raw)
    assert last.tokens == prepared.meta["total_tokens"]
    assert prepared.meta["source_sha256"] == source_sha256(
        resolve_source(cfg_for(corpus, "r50k_base"), cache_dir=tmp_path)
    )


def test_char_level_jsonl_documents_are_joined_by_the_separator(tmp_path: Path) -> None:
    corpus = tmp_path / "docs.jsonl"
    corpus.write_bytes(jsonl_bytes(DOCS))
    prepared = prepare(cfg_for(corpus, separator="\n\n"), cache_dir=tmp_path / "cache")
    assert prepared.tokenizer.decode(all_tokens(prepared)) == "\n\n".join(DOCS)


def test_parquet_rows_are_documents(
    tmp_path: Path, r50k: TiktokenTokenizer, small_pieces: None
) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    root = tmp_path / "shards"
    root.mkdir()
    rows = [*DOCS, None, "", *DOCS]
    pq.write_table(pa.table({"body": rows, "id": list(range(len(rows)))}), root / "0.parquet",
                   row_group_size=2)
    (root / "1.jsonl").write_text(json.dumps({"body": "from json"}) + "\n")
    cfg = cfg_for(root, "r50k_base", text_field="body")
    prepared = prepare(cfg, cache_dir=tmp_path / "cache")
    assert all_tokens(prepared) == bpe_expected(r50k, [*DOCS, *DOCS, "from json"])
    assert (prepared.meta["documents"], prepared.meta["skipped"]) == (7, 2)
    assert prepared.meta["format"] == "mixed"


def test_everything_skipped_is_one_line_naming_the_field(tmp_path: Path) -> None:
    corpus = tmp_path / "data.jsonl"
    corpus.write_text(json.dumps({"content": "x", "url": "u"}) + "\n")
    with pytest.raises(DataError) as caught:
        prepare(cfg_for(corpus), cache_dir=tmp_path / "cache")
    message = str(caught.value)
    assert "no 'text' field in data.jsonl (its first record has: content, url)" in message
    assert "data.text_field" in message and "\n" not in message


def test_cli_reports_a_bad_corpus_in_one_line(tmp_path: Path) -> None:
    corpus = tmp_path / "data.jsonl"
    corpus.write_text(json.dumps({"content": "x"}) + "\n")
    env = {**os.environ, "COCKPIT_CACHE_DIR": str(tmp_path / "cache")}
    for path, expected in ((corpus, "no 'text' field"),):
        result = cockpit_here(
            "train", "--headless", "--preset", "tiny", "--data", str(path), "--run-dir", str(tmp_path / "run"),
            "--set", "train.max_steps=1", cwd=REPO, env=env,
        )  # fmt: skip
        # Whether the run phase or the command line reports it (exit 1 or 2), one line says it.
        output = result.stdout + result.stderr
        assert result.returncode != 0 and "Traceback" not in output, output
        assert len([line for line in output.splitlines() if expected in line]) == 1, output


def test_non_utf8_text_is_named_with_its_offset_across_read_blocks(
    tmp_path: Path, small_pieces: None
) -> None:
    corpus = tmp_path / "bad.txt"
    corpus.write_bytes("é".encode() * 50 + b"\xff" + b"tail")
    with pytest.raises(DataError, match=r"bad.txt is not UTF-8 text \(byte 0xff at offset 100\)"):
        prepare(cfg_for(corpus), cache_dir=tmp_path / "cache")


def test_a_missing_optional_reader_names_its_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "x.parquet").write_bytes(b"PAR1")
    (tmp_path / "y.jsonl.zst").write_bytes(b"\x28\xb5\x2f\xfd")
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    monkeypatch.setitem(sys.modules, "zstandard", None)
    for name, extra in (("x.parquet", "cockpit[parquet]"), ("y.jsonl.zst", "cockpit[zstd]")):
        with pytest.raises(DataError, match=re.escape(f"pip install '{extra}'")):
            prepare(cfg_for(tmp_path / name), cache_dir=tmp_path / "cache")


# ---------------------------------------------------------------------------------------------
# The split, progress, stop, reuse


def test_val_tokens_is_an_absolute_split_of_the_same_files(tmp_path: Path) -> None:
    corpus = tmp_path / "c.txt"
    corpus.write_text("abcdefghij" * 100)
    cache = tmp_path / "cache"
    a = prepare(cfg_for(corpus, val_tokens=64), cache_dir=cache)
    assert (len(a.train), len(a.val)) == (936, 64)
    b = prepare(cfg_for(corpus, val_fraction=0.5), cache_dir=cache)
    assert (len(b.train), len(b.val)) == (500, 500)
    assert len([p for p in cache.iterdir() if p.is_dir()]) == 1
    with pytest.raises(DataError, match=r"data.val_tokens = 1000 but .* only 1000 tokens"):
        prepare(cfg_for(corpus, val_tokens=1000), cache_dir=cache)
    big = prepare(cfg_for(corpus, val_tokens=990), cache_dir=cache)
    with pytest.raises(DataError, match=r"after data.val_tokens = 990 .* data.val_tokens <= "):
        engine_data.check_length(big, 16)


def test_progress_is_rate_limited_and_ends_with_done(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(prepare_progress, "PROGRESS_INTERVAL_S", 0.0)
    monkeypatch.setattr(prepare_build, "CHAR_PIECE_CHARS", 1000)
    monkeypatch.setattr(corpus_reader, "READ_BYTES", 1000)
    monkeypatch.setattr(prepare_build, "BATCH_CHARS", 1000)
    monkeypatch.setattr(prepare_build, "encode_threads", lambda: 1)
    corpus = tmp_path / "c.txt"
    corpus.write_text("hello world\n" * 2000)
    events: list[DataProgress] = []
    prepared = prepare(cfg_for(corpus), cache_dir=tmp_path / "cache", progress=events.append)
    assert len(events) > 10 and [e.done for e in events].count(True) == 1 and events[-1].done
    assert all(e.bytes_total == 24_000 for e in events)
    assert all(0 <= e.bytes_read <= 24_000 for e in events)
    assert events[-1].tokens == 24_000 == len(prepared.train) + len(prepared.val)
    assert max(e.tokens for e in events[:-1]) > 0  # tokens are reported while writing

    again: list[DataProgress] = []
    prepare(cfg_for(corpus), cache_dir=tmp_path / "cache", progress=again.append)
    assert len(again) == 1 and again[0].done and again[0].reused
    assert (again[0].tokens, again[0].bytes_read, again[0].documents) == (24_000, 24_000, 1)


def test_stop_leaves_nothing_that_looks_complete(
    tmp_path: Path, small_pieces: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(prepare_progress, "STOP_POLL_S", 0.0)
    corpus = tmp_path / "c.txt"
    corpus.write_text("stop me " * 5000)
    cache = tmp_path / "cache"
    asked: list[float] = []

    def should_stop() -> bool:
        asked.append(time.monotonic())
        return len(asked) > 3

    with pytest.raises(PreparationStopped):
        prepare(cfg_for(corpus), cache_dir=cache, should_stop=should_stop)
    assert list(cache.iterdir()) == []  # the directory it made, with its lock, is gone too
    assert len(all_tokens(prepare(cfg_for(corpus), cache_dir=cache))) == 40_000


def test_a_second_process_waits_for_the_first_and_uses_its_result(tmp_path: Path) -> None:
    corpus = tmp_path / "c.txt"
    corpus.write_text("shared corpus " * 100)
    cache = tmp_path / "cache"
    first = prepare(cfg_for(corpus), cache_dir=cache)
    (out,) = cache.iterdir()
    meta = (out / "meta.json").read_bytes()
    (out / "meta.json").unlink()  # as if the first were still at work
    fd = os.open(out / ".lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    events: list[DataProgress] = []
    result: list[engine_data.PreparedData] = []
    waiter = threading.Thread(
        target=lambda: result.append(prepare(cfg_for(corpus), cache_dir=cache,
                                             progress=events.append))
    )
    waiter.start()
    time.sleep(0.5)
    assert not result and events and "waiting" in events[0].note
    (out / "meta.json").write_bytes(meta)
    os.close(fd)  # the first process is done
    waiter.join(timeout=30)
    assert result and all_tokens(result[0]) == all_tokens(first)
    assert events[-1].done and events[-1].reused


def test_a_full_disk_is_one_line_and_leaves_no_partial_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = tmp_path / "c.txt"
    corpus.write_text("full disk " * 100)

    def no_space(self: object, ids: np.ndarray) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(TokenWriter, "append", no_space)
    with pytest.raises(DataError, match="cannot write prepared data .*No space left"):
        prepare(cfg_for(corpus), cache_dir=tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []  # nor the directory it made


# ---------------------------------------------------------------------------------------------
# Interrupted by SIGKILL, and bounded memory: child processes


CHILD = """
import os, sys, time
sys.path.insert(0, {repo!r})
from engine.config.run_config import DataConfig
from engine.data.preparation import prepare
notes = []
start = time.monotonic()
p = prepare(DataConfig(source=sys.argv[1], tokenizer=sys.argv[2]), cache_dir=sys.argv[3],
            progress=lambda e: notes.append(e.note) if e.done else None)
seconds = time.monotonic() - start
# VmHWM, not ru_maxrss: the latter can carry the parent's peak through fork and exec
status = open("/proc/self/status").read().split("VmHWM:")[1].split()[0]
print(seconds, status, notes[-1] or "-")
"""


def run_child(corpus: Path, tokenizer: str, cache: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD.format(repo=str(REPO)), str(corpus), tokenizer, str(cache)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def write_words(path: Path, megabytes: int, seed: int = 0) -> None:
    """Pseudo-random words; a few distinct blocks of about 4 MB repeated (writing is then fast)."""
    rng = np.random.default_rng(seed)
    words = np.array(["the", "of", "and", "naïve", "日本", "café", "quick", "fox", "to", "be"])
    ends = np.array([" "] * 8 + [", ", ".\n"])
    blocks = [
        "".join(np.char.add(rng.choice(words, 700_000), rng.choice(ends, 700_000))).encode()
        for _ in range(3)
    ]
    with path.open("wb") as f:
        written = 0
        while written < megabytes * 1_000_000:
            block = blocks[written % 3]
            f.write(block)
            written += len(block)


def test_sigkill_at_random_points_then_a_clean_run_gives_the_same_tokens(
    tmp_path: Path,
) -> None:
    corpus = tmp_path / "c.txt"
    write_words(corpus, 40)
    reference = prepare(cfg_for(corpus), cache_dir=tmp_path / "reference")
    cache = tmp_path / "cache"
    rng = random.Random(7)
    cut_short, leftovers = [], False
    for _ in range(4):
        if cache.exists():  # start each round afresh: a finished one would only be reused
            for path in cache.rglob("meta.json"):
                path.unlink()
        child = run_child(corpus, "char", cache)
        time.sleep(rng.uniform(0.2, 1.5))
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        dirs = list(cache.iterdir()) if cache.exists() else []
        cut_short.append(not dirs or not (dirs[0] / "meta.json").exists())
        leftovers = bool(dirs) and has_leftovers(dirs[0])
        # a token file without its meta.json is never taken for complete
        assert not dirs or not leftovers or not (dirs[0] / "meta.json").exists()
    assert any(cut_short)  # at least one kill hit a preparation at work
    child = run_child(corpus, "char", cache)
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    if leftovers:
        assert out.strip().endswith("an interrupted preparation was found and started over")
    again = prepare(cfg_for(corpus), cache_dir=cache)
    assert np.array_equal(all_tokens(again), all_tokens(reference))
    assert again.meta["source_sha256"] == reference.meta["source_sha256"]
    (out_dir,) = cache.iterdir()
    assert not [p for p in out_dir.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="VmHWM is Linux's")
def test_peak_memory_does_not_grow_with_the_corpus(tmp_path: Path) -> None:
    """A 300 MB corpus (char-level, two passes) stays far below its own size in RSS."""
    corpus = tmp_path / "big.txt"
    write_words(corpus, 300)
    size_mb = corpus.stat().st_size / 1e6
    child = run_child(corpus, "char", tmp_path / "cache")
    out, err = child.communicate(timeout=300)
    assert child.returncode == 0, err
    seconds, peak_kb = out.split()[:2]
    peak_mb = int(peak_kb) / 1024
    print(f"prepared {size_mb:.0f} MB in {float(seconds):.1f} s, peak RSS {peak_mb:.0f} MB")
    # about 40 MB of interpreter and numpy, about 180 MB in flight whatever the size (was 14x)
    assert size_mb > 250 and peak_mb < 500


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("x.jsonl.gz", b"garbage", "Not a gzipped file"),
        ("t.jsonl.gz", gzip.compress(b'{"text": "hello"}\n' * 1000, mtime=0)[:-20], "ended before"),
        ("p.parquet", b"PAR1garbagePAR1", "as Parquet"),
        ("z.jsonl.zst", b"\x28\xb5\x2f\xfdgarbage", "complete .zst file"),
    ],
)
def test_a_corrupt_compressed_or_parquet_file_is_one_line(
    tmp_path: Path, name: str, content: bytes, expected: str
) -> None:
    if name.endswith(".parquet"):
        pytest.importorskip("pyarrow")
    if name.endswith(".zst"):
        pytest.importorskip("zstandard")
    corpus = tmp_path / name
    corpus.write_bytes(content)
    with pytest.raises(DataError, match=re.escape(expected)) as caught:
        prepare(cfg_for(corpus), cache_dir=tmp_path / "cache")
    assert str(corpus) in str(caught.value) and "\n" not in str(caught.value)
