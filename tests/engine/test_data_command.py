"""`cockpit data prepare|ls|rm` as a user runs them (in this process, a real cache folder; ctrl+c,
a terminal and FIFOs in real processes), and the corpus recipes in data/corpora: every key there, every cockpit command they show parses."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import tomllib
from command_here import cockpit_here

from cockpit.cli import build_parser
from cockpit.cli.data import ThrottledPrinter
from engine.events import DataProgress

REPO = Path(__file__).resolve().parents[2]
RECIPES = sorted((REPO / "data" / "corpora").glob("*.toml"))
RECIPE_KEYS = {
    "name", "description", "homepage", "url", "licence", "format", "text_field", "size",
    "size_tokens", "how_to_get", "prepare", "train",
}  # fmt: skip


def cockpit(*args: str, cache: Path) -> subprocess.CompletedProcess:
    return cockpit_here(*args, env={**os.environ, "COCKPIT_CACHE_DIR": str(cache)}, cwd=REPO)


def cockpit_process(*args: str, cache: Path, timeout: float) -> subprocess.CompletedProcess:
    """`cockpit ARGS` in a process of its own: a FIFO opened for reading blocks forever, and a
    test times out a process, not a call in its own."""
    env = {**os.environ, "COCKPIT_CACHE_DIR": str(cache)}
    return subprocess.run(
        [sys.executable, "-m", "cockpit", *args],
        capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def one_error_line(result: subprocess.CompletedProcess) -> str:
    """The whole of stderr, which must be one `cockpit: ...` line (no traceback)."""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cockpit: "), result.stderr
    return lines[0]


def listed(cache: Path) -> list[dict]:
    result = cockpit("data", "ls", "--json", cache=cache)
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert Path(record["cache_dir"]) == cache
    return record["corpora"]


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    path = tmp_path / "poems.txt"
    path.write_text("Shall I compare thee to a summer's day?\n" * 200, encoding="utf-8")
    return path


def test_prepare_then_ls_then_rm(cache: Path, corpus: Path):
    chars = len(corpus.read_text(encoding="utf-8"))
    prepared = cockpit("data", "prepare", "--data", str(corpus), "--preset", "tiny", cache=cache)
    assert prepared.returncode == 0, prepared.stderr
    assert f"{chars:,}" in prepared.stdout  # char-level: one token per character
    (entry,) = [p for p in cache.iterdir() if p.is_dir() and p.name != "downloads"]
    assert str(entry) in prepared.stdout

    table = cockpit("data", "ls", cache=cache)
    assert table.returncode == 0, table.stderr
    row = next(line for line in table.stdout.splitlines() if line.startswith(entry.name))
    assert f"{chars:,}" in row and "char" in row and str(corpus) in row

    (item,) = listed(cache)
    assert item["name"] == entry.name and item["complete"] is True
    assert item["total_tokens"] == chars == item["train_tokens"] + item["val_tokens"]
    assert item["tokenizer"] == "char" and item["disk_bytes"] > 0 and item["prepared_at"]

    # Training on the same corpus and preset reuses it: prepared once.
    again = cockpit("data", "prepare", "--data", str(corpus), "--preset", "tiny", cache=cache)
    assert again.returncode == 0 and [p.name for p in cache.iterdir() if p.is_dir()] == [entry.name]

    removed = cockpit("data", "rm", entry.name[:5], cache=cache)  # a unique prefix, no terminal
    assert removed.returncode == 0, removed.stderr
    assert f"removed {entry.name}" in removed.stdout
    assert not entry.exists() and corpus.exists()  # the source is never touched
    empty = cockpit("data", "ls", cache=cache)
    assert empty.returncode == 0 and str(cache) in empty.stdout
    assert "cockpit data prepare" in empty.stdout and len(empty.stdout.strip().splitlines()) == 1


def test_incomplete_directory_is_listed_as_such_and_can_be_removed(cache: Path):
    half = cache / "big-r50k_base-0123456789ab"
    half.mkdir(parents=True)
    (half / "train.bin").write_bytes(b"\0" * 1000)  # tokens written, meta.json never was
    (cache / "downloads").mkdir()  # not a prepared corpus: never listed
    (item,) = listed(cache)
    assert item["name"] == half.name and item["complete"] is False
    assert item["disk_bytes"] == 1000 and item["total_tokens"] is None

    table = cockpit("data", "ls", cache=cache)
    assert "incomplete (interrupted preparation)" in table.stdout
    assert "downloads" not in table.stdout

    removed = cockpit("data", "rm", half.name, "--yes", cache=cache)
    assert removed.returncode == 0, removed.stderr
    assert not half.exists() and (cache / "downloads").is_dir()


def test_meta_json_of_another_format_is_read_tolerantly(cache: Path):
    entry = cache / "fineweb-r50k_base-abcdefabcdef"
    entry.mkdir(parents=True)
    meta = {"source": "folder /corpora/fineweb", "tokenizer": "r50k_base", "total_tokens": 12345,
            "documents": 17, "prepared_at": "2026-11-30T10:20:30+00:00", "unknown": [1, 2]}  # fmt: skip
    (entry / "meta.json").write_text(json.dumps(meta))
    (item,) = listed(cache)
    assert item["complete"] is True and item["total_tokens"] == 12345 and item["documents"] == 17
    assert item["train_tokens"] is None and item["tokenizer"] == "r50k_base"
    row = cockpit("data", "ls", cache=cache).stdout.splitlines()[1]
    assert "12,345" in row and "2026-11-30 10:20" in row and "17" in row


def test_ls_prints_no_terminal_escapes_from_a_meta_json(cache: Path):
    # a shared cache's meta.json is anyone's to write: its text reaches the table, not the terminal
    entry = cache / "pydoc-char-0123456789ab"
    entry.mkdir(parents=True)
    escape = "\x1b]0;owned\x07\x1b[2J"
    meta = {"source": f"folder {escape}", "tokenizer": {"name": f"char{escape}"},
            "prepared_at": f"2026-11-30{escape}", "total_tokens": 3}  # fmt: skip
    (entry / "meta.json").write_text(json.dumps(meta))
    out = cockpit("data", "ls", cache=cache).stdout
    assert "\x1b" not in out and "\x07" not in out
    assert "folder ?]0;owned??[2J" in out


def test_a_corpus_being_prepared_is_listed_as_such_and_not_removed(cache: Path):
    import fcntl

    busy = cache / "big-char-0123456789ab"
    busy.mkdir(parents=True)
    with open(busy / ".lock", "w") as lock:  # what a preparing process holds
        fcntl.flock(lock, fcntl.LOCK_EX)
        assert "being prepared now" in cockpit("data", "ls", cache=cache).stdout
        refused = cockpit("data", "rm", busy.name, "--yes", cache=cache)
        assert refused.returncode == 2 and "being prepared" in one_error_line(refused)
        assert busy.is_dir()
    assert cockpit("data", "rm", busy.name, "--yes", cache=cache).returncode == 0
    assert not busy.exists()


def test_rm_refuses_unknown_ambiguous_and_outside_names(cache: Path, tmp_path: Path):
    for name in ("poems-char-aaaaaaaaaaaa", "poems-r50k_base-bbbbbbbbbbbb"):
        (cache / name).mkdir(parents=True)
        (cache / name / "meta.json").write_text("{}")
    outside = tmp_path / "precious-char-cccccccccccc"
    outside.mkdir()
    (cache / "downloads").mkdir()

    unknown = cockpit("data", "rm", "nope", "--yes", cache=cache)
    assert unknown.returncode == 2 and unknown.stdout == ""
    assert "poems-char-aaaaaaaaaaaa" in one_error_line(unknown)
    ambiguous = cockpit("data", "rm", "poems", "--yes", cache=cache)
    assert ambiguous.returncode == 2
    line = one_error_line(ambiguous)
    assert "poems-char-aaaaaaaaaaaa" in line and "poems-r50k_base-bbbbbbbbbbbb" in line
    for target in (str(outside), "../precious-char-cccccccccccc", "downloads", str(cache)):
        refused = cockpit("data", "rm", target, "--yes", cache=cache)
        assert refused.returncode == 2, target
        one_error_line(refused)
    assert outside.is_dir() and (cache / "downloads").is_dir()
    assert len(listed(cache)) == 2


def test_prepare_refusals_are_one_line(cache: Path, tmp_path: Path):
    missing = cockpit("data", "prepare", "--data", str(tmp_path / "nope.txt"), cache=cache)
    assert missing.returncode == 2 and "nope.txt" in one_error_line(missing)
    bad_preset = cockpit("data", "prepare", "--preset", "nope", cache=cache)
    assert bad_preset.returncode == 2 and "unknown preset" in one_error_line(bad_preset)
    bad_set = cockpit("data", "prepare", "--set", "data.nope=1", cache=cache)
    assert bad_set.returncode == 2
    one_error_line(bad_set)
    (tmp_path / "t.txt").write_text("some text\n" * 50)
    bad_tokenizer = cockpit(
        "data", "prepare", "--data", str(tmp_path / "t.txt"), "--tokenizer", "nope", cache=cache
    )
    assert bad_tokenizer.returncode == 2 and "tokenizer" in one_error_line(bad_tokenizer)
    assert listed(cache) == []


def test_ctrl_c_stops_preparation_with_nothing_complete_left(cache: Path, tmp_path: Path):
    big = tmp_path / "big.txt"
    line = "The quick brown fox jumps over the lazy dog, again and again, ünïcödé. 0123456789\n"
    big.write_text(line * 800_000, encoding="utf-8")  # about 68 MB: a second or more to prepare
    env = {**os.environ, "COCKPIT_CACHE_DIR": str(cache)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "cockpit", "data", "prepare", "--data", str(big)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO,
    )  # fmt: skip
    started = threading.Event()
    out: list[str] = []

    def read() -> None:
        for text in proc.stdout:
            out.append(text)
            if text.startswith("data      | preparing"):
                started.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert started.wait(timeout=30), "no 'preparing' line"  # printed once ctrl+c is handled
    proc.send_signal(signal.SIGINT)
    stderr = proc.stderr.read()
    assert proc.wait(timeout=60) == 130, (stderr, out)
    reader.join(timeout=5)
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cockpit: "), stderr
    assert not any(item["complete"] for item in listed(cache))


def test_progress_lines_are_throttled_but_the_last_always_prints(capsys):
    now = [0.0]
    printer = ThrottledPrinter(every_s=2.0, clock=lambda: now[0])

    def event(t: float, done: bool = False) -> DataProgress:
        return DataProgress(
            source="file x.txt", tokenizer="char", bytes_read=int(t * 1000), bytes_total=10_000,
            documents=1, skipped=0, tokens=int(t * 900), elapsed_s=t, done=done,
        )  # fmt: skip

    for t in (0.0, 0.25, 0.5, 1.0, 1.9, 2.0, 2.5, 3.9, 4.1):
        now[0] = t
        printer(event(t))
    now[0] = 4.2
    printer(event(4.2, done=True))
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4  # at 0, 2.0, 4.1 and the final one
    assert lines[-1].startswith("data      | prepared file x.txt (char)")
    assert all(line.startswith("data      | preparing") for line in lines[:-1])


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.stem)
def test_recipes_say_where_from_licence_format_and_how_to_train(recipe: Path):
    data = tomllib.loads(recipe.read_text(encoding="utf-8"))
    assert set(data) == RECIPE_KEYS, recipe
    assert data["name"] == recipe.stem
    assert data["format"] in ("text", "jsonl", "parquet")
    for key in RECIPE_KEYS - {"size_tokens", "url", "text_field"}:
        assert isinstance(data[key], str) and data[key].strip(), key
    if data["format"] != "text":
        assert data["text_field"], "JSON lines and Parquet name the field that holds the text"
    assert isinstance(data["size_tokens"], int) and data["size_tokens"] > 0
    parser = build_parser()
    for key in ("prepare", "train", "how_to_get"):
        argv = shlex.split(data[key])
        if argv[0] != "cockpit":
            continue
        args = parser.parse_args(argv[1:])  # argparse exits (SystemExit) on a bad option
        assert args.subcommand in ("train", "data")
        if args.subcommand == "train" and "--data" in argv:
            assert args.data and args.preset


def test_the_recipe_folder_is_the_known_corpora_and_keeps_prepared_files_out_of_git():
    assert {p.stem for p in RECIPES} >= {"tinyshakespeare", "pydoc", "fineweb-edu", "openwebtext"}
    for path in ("data/cache/x-char-0123456789ab/train.bin", "data/fineweb-edu/sample/x.parquet"):
        ignored = subprocess.run(["git", "check-ignore", "-q", path], cwd=REPO)
        assert ignored.returncode == 0, f"{path}: prepared and downloaded files stay out of git"
    kept = subprocess.run(
        ["git", "check-ignore", "data/README.md", "data/corpora/pydoc.toml"],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert kept.returncode == 1 and kept.stdout == "", "the recipes are committed"


def test_rm_on_a_terminal_asks_first(cache: Path):
    import pty

    entry = cache / "poems-char-aaaaaaaaaaaa"
    entry.mkdir(parents=True)
    (entry / "meta.json").write_text("{}")
    env = {**os.environ, "COCKPIT_CACHE_DIR": str(cache)}
    for answer, code in ((b"n\n", 1), (b"y\n", 0)):
        main, tty = pty.openpty()
        proc = subprocess.Popen(
            [sys.executable, "-m", "cockpit", "data", "rm", "poems"],
            stdin=tty, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=REPO,
        )  # fmt: skip
        os.close(tty)
        os.write(main, answer)
        out, err = proc.communicate(timeout=60)
        os.close(main)
        assert proc.returncode == code, err
        assert entry.exists() == (code == 1)
        assert (b"nothing removed" in out) == (code == 1)


def test_a_fifo_in_a_corpus_folder_is_skipped_and_counted(cache: Path, tmp_path: Path):
    # Opening a FIFO for reading blocks until a writer comes (forever, holding the lock): a
    # corpus folder's entries that are not regular files are left out, and the user told so.
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.txt").write_text("Shall I compare thee to a summer's day?\n" * 100)
    os.mkfifo(folder / "pipe.txt")
    prepared = cockpit_process(
        "data", "prepare", "--data", str(folder), "--preset", "tiny", cache=cache, timeout=30
    )
    assert prepared.returncode == 0, prepared.stderr
    assert "(1 file; skipped 1 file that is not a regular file (pipe.txt))" in prepared.stdout
    assert f"{len('Shall I compare thee to a summer' + chr(39) + 's day?' + chr(10)) * 100:,}" in (
        prepared.stdout
    )


def test_a_fifo_named_as_the_corpus_is_refused_in_one_line(cache: Path, tmp_path: Path):
    fifo = tmp_path / "pipe.txt"
    os.mkfifo(fifo)
    refused = cockpit_process(
        "data", "prepare", "--data", str(fifo), "--preset", "tiny", cache=cache, timeout=30
    )
    assert refused.returncode == 2
    assert "not a regular file" in one_error_line(refused)
