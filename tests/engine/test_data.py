"""Tests for engine.data.preparation: tokenizers, sources, prepared token files and the user-facing errors."""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import urllib.error
from pathlib import Path

import numpy as np
import pytest

from engine.config.run_config import DataConfig
from engine.data import build as prepare_build
from engine.data import cache_dirs, tinyshakespeare, tokenizers
from engine.data import locator as corpus_locator
from engine.data import preparation as data
from engine.data.cache_dirs import default_cache_dir
from engine.data.preparation import DataError, check_length, data_available, prepare
from engine.data.tokenizers import CharTokenizer, tokenizer_from_meta
from tests.conftest import SHAKESPEARE, TIKTOKEN_CACHE


@pytest.fixture
def shakespeare() -> Path:
    if not SHAKESPEARE.is_file():
        pytest.skip(f"Tiny Shakespeare not found at {SHAKESPEARE}")
    return SHAKESPEARE.resolve()  # as a source names it: a shared/ that is a link, followed


@pytest.fixture
def bpe(monkeypatch: pytest.MonkeyPatch) -> None:
    if not TIKTOKEN_CACHE.is_dir():
        pytest.skip(f"tiktoken cache not found at {TIKTOKEN_CACHE}")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(TIKTOKEN_CACHE))


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test may reach the network or pick up a user's Tiny Shakespeare setting."""

    def refuse(url: str, timeout: float) -> bytes:
        raise urllib.error.URLError("network disabled in tests")

    monkeypatch.setattr(tinyshakespeare, "_download", refuse)
    monkeypatch.delenv(tinyshakespeare.TINYSHAKESPEARE_ENV, raising=False)


@pytest.fixture
def count_tokenize(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = prepare_build._tokenize

    def counting(tokenizer: tokenizers.Tokenizer, text: str) -> np.ndarray:
        calls.append(len(text))
        return real(tokenizer, text)

    monkeypatch.setattr(prepare_build, "_tokenize", counting)
    return calls


def write(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def file_cfg(path: Path, tokenizer: str = "char", val_fraction: float = 0.1) -> DataConfig:
    return DataConfig(source=str(path), tokenizer=tokenizer, val_fraction=val_fraction)


def all_tokens(prepared: data.PreparedData) -> list[int]:
    return np.concatenate([prepared.train, prepared.val]).tolist()


# ---------------------------------------------------------------------------------------------
# Tokenizers and splits on Tiny Shakespeare


def test_char_shakespeare_vocab_split_and_round_trip(shakespeare: Path, tmp_path: Path) -> None:
    text = shakespeare.read_text(encoding="utf-8")
    prepared = prepare(
        DataConfig(source="tinyshakespeare"), data_path=str(shakespeare), cache_dir=tmp_path
    )

    assert prepared.tokenizer.name == "char"
    assert prepared.tokenizer.vocab_size == 65
    assert isinstance(prepared.train, np.memmap) and isinstance(prepared.val, np.memmap)
    assert prepared.train.dtype == np.uint16
    n_train = int(0.9 * len(text))
    assert len(prepared.train) == n_train
    assert len(prepared.val) == len(text) - n_train
    assert prepared.tokenizer.decode(prepared.train[:500]) == text[:500]
    assert prepared.tokenizer.decode(prepared.val[:500]) == text[n_train : n_train + 500]
    assert prepared.tokenizer.decode(all_tokens(prepared)) == text
    assert prepared.meta["source_sha256"] == tinyshakespeare.TINYSHAKESPEARE_SHA256
    assert prepared.meta["train_tokens"] == n_train
    assert "Tiny Shakespeare" in prepared.source and str(shakespeare) in prepared.source


def test_char_tokenizer_drops_unknown_characters_and_rebuilds_from_meta() -> None:
    tok = CharTokenizer.from_text("hello world")
    assert tok.vocab_size == len(set("hello world"))
    assert tok.encode("hello€ 🙂world") == tok.encode("hello world")
    assert tok.decode(tok.encode("world hello")) == "world hello"

    rebuilt = tokenizer_from_meta(json.loads(json.dumps(tok.to_meta())))
    assert rebuilt.vocab_size == tok.vocab_size
    assert rebuilt.encode("low dew") == tok.encode("low dew")
    # The fast corpus path agrees with the per-character one, unknown characters included.
    assert tok.encode_corpus("hello€ world").tolist() == tok.encode("hello€ world")


def test_r50k_base_on_shakespeare(shakespeare: Path, bpe: None, tmp_path: Path) -> None:
    text = shakespeare.read_text(encoding="utf-8")
    cfg = DataConfig(source="tinyshakespeare", tokenizer="r50k_base")
    prepared = prepare(cfg, data_path=str(shakespeare), cache_dir=tmp_path)

    assert prepared.tokenizer.name == "r50k_base"
    assert prepared.tokenizer.vocab_size == 50257
    assert prepared.train.dtype == np.uint16 and prepared.meta["dtype"] == "uint16"
    tokens = all_tokens(prepared)
    assert len(tokens) == 338025  # GPT-2 BPE count of Tiny Shakespeare (as in nanoGPT)
    assert len(prepared.train) == int(0.9 * len(tokens))
    assert prepared.tokenizer.decode(tokens) == text
    assert prepared.tokenizer.encode("First Citizen:") == tokens[:3]

    rebuilt = tokenizer_from_meta(prepared.meta["tokenizer"])
    assert rebuilt.encode("Before we proceed") == prepared.tokenizer.encode("Before we proceed")


def test_chunked_bpe_encoding_matches_whole_text(some_text: Path, bpe: None) -> None:
    tok = tokenizers.TiktokenTokenizer("r50k_base")
    tricky = "a\n\nb  \nc\r\nd.\n/x\ny\n 1\n2\n\n\n  end\n"
    text = some_text.read_text(encoding="utf-8")[:200_000] + tricky * 50
    pieces = list(tokenizers._split_at_safe_newlines(text, 1000))
    assert len(pieces) > 100 and "".join(pieces) == text
    assert tok.encode_corpus(text, chunk_chars=1000).tolist() == tok.encode(text)


# ---------------------------------------------------------------------------------------------
# Preparing once, reusing, invalidating


def test_prepare_reuses_files_without_retokenizing(
    some_text: Path, tmp_path: Path, count_tokenize: list[int]
) -> None:
    shakespeare = some_text  # a local copy is taken as it is: any text will do
    cfg = DataConfig(source="tinyshakespeare")
    first = prepare(cfg, data_path=str(shakespeare), cache_dir=tmp_path)
    assert len(count_tokenize) == 1
    (out,) = [p for p in tmp_path.iterdir() if (p / "meta.json").is_file()]
    assert out.name.startswith("tinyshakespeare-char-")
    mtimes = {
        name: (out / name).stat().st_mtime_ns for name in ("tokens.bin", "meta.json")
    }

    second = prepare(cfg, data_path=str(shakespeare), cache_dir=tmp_path)
    assert len(count_tokenize) == 1
    assert {name: (out / name).stat().st_mtime_ns for name in mtimes} == mtimes
    assert np.array_equal(first.train, second.train) and second.meta == first.meta


def test_prepare_rebuilds_when_the_source_changes(
    tmp_path: Path, count_tokenize: list[int]
) -> None:
    corpus = write(tmp_path / "corpus.txt", "abc " * 1000)
    cache = tmp_path / "cache"
    first = prepare(file_cfg(corpus), cache_dir=cache)
    assert first.tokenizer.vocab_size == 4

    write(corpus, "xyz! " * 1000)
    second = prepare(file_cfg(corpus), cache_dir=cache)
    assert len(count_tokenize) == 2
    assert second.tokenizer.vocab_size == 5
    assert second.meta["source_sha256"] == hashlib.sha256(corpus.read_bytes()).hexdigest()
    assert second.tokenizer.decode(second.train[:5]) == "xyz! "
    # One prepared directory per source/tokenizer/split, updated in place.
    assert len([p for p in cache.iterdir() if p.is_dir()]) == 1

    # Same size, new content (mtime differs): the hash must catch it.
    write(corpus, "zyx! " * 1000)
    os.utime(corpus, ns=(1, 1))
    third = prepare(file_cfg(corpus), cache_dir=cache)
    assert len(count_tokenize) == 3
    assert third.tokenizer.decode(third.train[:5]) == "zyx! "

    # Touched but identical: re-hashed, not re-tokenized.
    os.utime(corpus, ns=(2, 2))
    prepare(file_cfg(corpus), cache_dir=cache)
    assert len(count_tokenize) == 3


def test_half_prepared_directory_is_rebuilt(tmp_path: Path, count_tokenize: list[int]) -> None:
    corpus = write(tmp_path / "corpus.txt", "the quick brown fox " * 100)
    cache = tmp_path / "cache"
    first = prepare(file_cfg(corpus), cache_dir=cache)
    (out,) = cache.iterdir()

    (out / "meta.json").unlink()
    prepare(file_cfg(corpus), cache_dir=cache)
    assert len(count_tokenize) == 2

    (out / "tokens.bin").write_bytes(b"\x00\x00")  # truncated
    again = prepare(file_cfg(corpus), cache_dir=cache)
    assert len(count_tokenize) == 3
    assert np.array_equal(again.train, first.train)
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


def test_one_prepared_directory_serves_every_split(tmp_path: Path) -> None:
    corpus = write(tmp_path / "My Corpus.txt", "0123456789" * 100)
    cache = tmp_path / "cache"
    a = prepare(file_cfg(corpus, val_fraction=0.1), cache_dir=cache)
    b = prepare(file_cfg(corpus, val_fraction=0.25), cache_dir=cache)
    assert (len(a.train), len(a.val)) == (900, 100)
    assert (len(b.train), len(b.val)) == (750, 250)
    names = sorted(p.name for p in cache.iterdir())
    assert len(names) == 1 and names[0].startswith("my-corpus-char-")
    c = prepare(DataConfig(source=str(corpus), val_tokens=300), cache_dir=cache)
    assert (len(c.train), len(c.val)) == (700, 300) and len(list(cache.iterdir())) == 1


# ---------------------------------------------------------------------------------------------
# Sources


def test_pydoc_source_is_offline_and_large(tmp_path: Path) -> None:
    prepared = prepare(DataConfig(source="pydoc"), cache_dir=tmp_path)
    assert len(prepared.train) + len(prepared.val) > 400_000
    assert "Python" in prepared.source  # docs topics, or stdlib sources where pydoc_data is absent
    text = prepared.tokenizer.decode(prepared.train[:20_000])
    assert "\n\n" in text and any(word in text for word in ("def", "class", "import"))
    again = prepare(DataConfig(source="pydoc"), cache_dir=tmp_path)
    assert again.meta["source_sha256"] == prepared.meta["source_sha256"]


def test_pydoc_falls_back_to_stdlib_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pydoc_data.topics", None)  # makes the import fail
    text, description = corpus_locator._pydoc_text()
    assert "standard library" in description
    assert 400_000 < len(text.encode("utf-8")) < 2 * corpus_locator.STDLIB_CAP_BYTES
    assert "def " in text and "import " in text
    assert corpus_locator._pydoc_text()[0] == text  # deterministic


def test_directory_source_joins_text_files_in_order(tmp_path: Path) -> None:
    root = tmp_path / "corpus"
    write(root / "b.txt", "second")
    write(root / "a.md", "first")
    write(root / "sub" / "c.py", "third")
    write(root / "image.png", b"\x89PNG\x00\x00")
    write(root / ".git" / "notes.txt", "hidden folder")
    write(root / ".hidden.txt", "hidden file")
    cache = root / "cache"  # a cache inside the corpus must not feed back into it
    cfg = DataConfig(source=str(root), val_fraction=0.0)

    prepared = prepare(cfg, cache_dir=cache)
    assert prepared.tokenizer.decode(prepared.train) == "first\n\nsecond\n\nthird"
    assert "3 files" in prepared.source
    assert len(prepared.val) == 0

    again = prepare(cfg, cache_dir=cache)
    assert again.meta["source_sha256"] == prepared.meta["source_sha256"]
    assert again.meta["source_signature"] == prepared.meta["source_signature"]


def test_data_path_replaces_the_source(tmp_path: Path) -> None:
    corpus = write(tmp_path / "mine.txt", "just my words " * 50)
    prepared = prepare(DataConfig(source="pydoc"), data_path=str(corpus), cache_dir=tmp_path / "c")
    assert prepared.tokenizer.decode(prepared.train[:14]) == "just my words "
    assert str(corpus) in prepared.source


def test_tinyshakespeare_from_env_then_download_cache(
    shakespeare: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(tinyshakespeare.TINYSHAKESPEARE_ENV, str(shakespeare))
    from_env = prepare(DataConfig(source="tinyshakespeare"), cache_dir=tmp_path)
    assert str(shakespeare) in from_env.source

    monkeypatch.delenv(tinyshakespeare.TINYSHAKESPEARE_ENV)
    downloads: list[str] = []

    def fake_download(url: str, timeout: float) -> bytes:
        downloads.append(url)
        return shakespeare.read_bytes()

    monkeypatch.setattr(tinyshakespeare, "_download", fake_download)
    downloaded = prepare(DataConfig(source="tinyshakespeare"), cache_dir=tmp_path)
    cached = tmp_path / "downloads" / "tinyshakespeare.txt"
    assert downloads == [tinyshakespeare.TINYSHAKESPEARE_URL]
    assert cached.read_bytes() == shakespeare.read_bytes()
    assert str(cached) in downloaded.source
    assert np.array_equal(downloaded.val, from_env.val)

    prepare(DataConfig(source="tinyshakespeare"), cache_dir=tmp_path)
    assert len(downloads) == 1  # the cached copy is used from then on


def test_edited_local_shakespeare_is_accepted(tmp_path: Path) -> None:
    edited = write(tmp_path / "input.txt", "To be, or not to be, that is the question.\n" * 20)
    prepared = prepare(
        DataConfig(source="tinyshakespeare"), data_path=str(tmp_path), cache_dir=tmp_path / "c"
    )
    assert prepared.meta["source_sha256"] == hashlib.sha256(edited.read_bytes()).hexdigest()
    assert prepared.meta["source_sha256"] != tinyshakespeare.TINYSHAKESPEARE_SHA256


# ---------------------------------------------------------------------------------------------
# Errors a user can cause


def test_tinyshakespeare_offline_without_a_copy(tmp_path: Path) -> None:
    with pytest.raises(DataError) as err:
        prepare(DataConfig(source="tinyshakespeare"), cache_dir=tmp_path)
    message = str(err.value)
    assert "not available offline" in message and "network disabled in tests" in message
    assert "--data" in message and tinyshakespeare.TINYSHAKESPEARE_ENV in message
    assert "\n" not in message

    with pytest.raises(DataError, match="downloading is off"):
        prepare(DataConfig(source="tinyshakespeare"), cache_dir=tmp_path, download=False)


def test_corrupt_download_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tinyshakespeare, "_download", lambda url, timeout: b"<html>captive portal</html>")
    with pytest.raises(DataError, match="corrupt.*--data"):
        prepare(DataConfig(source="tinyshakespeare"), cache_dir=tmp_path)
    assert not (tmp_path / "downloads" / "tinyshakespeare.txt").exists()


def test_missing_paths_are_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "nowhere" / "corpus.txt"
    with pytest.raises(DataError, match=f"data.source {re.escape(str(missing))}.*no such file"):
        prepare(file_cfg(missing), cache_dir=tmp_path)
    with pytest.raises(DataError, match=f"--data {re.escape(str(missing))}.*no such file"):
        prepare(DataConfig(source="tinyshakespeare"), data_path=str(missing), cache_dir=tmp_path)
    monkeypatch.setenv(tinyshakespeare.TINYSHAKESPEARE_ENV, str(missing))
    with pytest.raises(DataError, match=f"{tinyshakespeare.TINYSHAKESPEARE_ENV} {re.escape(str(missing))}"):
        prepare(DataConfig(source="tinyshakespeare"), cache_dir=tmp_path)


@pytest.mark.parametrize(
    ("content", "problem"), [(b"", "0 bytes"), (b" \n\t\n", "only whitespace")]
)
def test_empty_corpus(tmp_path: Path, content: bytes, problem: str) -> None:
    corpus = write(tmp_path / "empty.txt", content)
    with pytest.raises(DataError) as err:
        prepare(file_cfg(corpus), cache_dir=tmp_path / "c")
    assert problem in str(err.value) and str(corpus) in str(err.value)
    assert "data.source" in str(err.value)


def test_folder_without_text_files(tmp_path: Path) -> None:
    write(tmp_path / "corpus" / "photo.jpg", b"\xff\xd8")
    with pytest.raises(DataError, match=r"no text files \(\*\.txt.*corpus"):
        prepare(DataConfig(source=str(tmp_path / "corpus")), cache_dir=tmp_path / "c")


def test_binary_file_names_file_and_offset(tmp_path: Path) -> None:
    write(tmp_path / "corpus" / "a.txt", "fine")
    bad = write(tmp_path / "corpus" / "b.txt", b"GIF89a\x00\x01")
    with pytest.raises(DataError) as err:
        prepare(DataConfig(source=str(tmp_path / "corpus")), cache_dir=tmp_path / "c")
    message = str(err.value)
    assert str(bad) in message and "offset 6" in message and "UTF-8" in message


def test_non_utf8_file_names_file_and_offset(tmp_path: Path) -> None:
    bad = write(tmp_path / "latin1.txt", "café au lait".encode("latin-1"))
    with pytest.raises(DataError) as err:
        prepare(file_cfg(bad), cache_dir=tmp_path / "c")
    message = str(err.value)
    assert (
        str(bad) in message and "0xe9 at offset 3" in message and "convert it to UTF-8" in message
    )


def test_check_length(tmp_path: Path) -> None:
    corpus = write(tmp_path / "short.txt", "x" * 100)
    prepared = prepare(file_cfg(corpus), cache_dir=tmp_path / "c")  # 90 train, 10 val tokens
    check_length(prepared, 8)  # 10 > 8 + 1
    with pytest.raises(DataError) as err:
        check_length(prepared, 9)
    message = str(err.value)
    assert "val split" in message and "only 10 tokens" in message
    assert "model.block_size <= 8" in message and "more text" in message

    no_val = prepare(file_cfg(corpus, val_fraction=0.0), cache_dir=tmp_path / "c")
    assert len(no_val.train) == 100
    with pytest.raises(DataError, match="val split .* is empty.*data.val_fraction"):
        check_length(no_val, 8)


def test_unknown_tiktoken_encoding(tmp_path: Path) -> None:
    corpus = write(tmp_path / "c.txt", "text")
    with pytest.raises(DataError) as err:
        prepare(file_cfg(corpus, tokenizer="r50k"), cache_dir=tmp_path / "c")
    assert "unknown tokenizer 'r50k'" in str(err.value) and "r50k_base" in str(err.value)


def test_tiktoken_files_missing_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tiktoken

    def offline(name: str) -> None:
        raise OSError("Failed to resolve 'openaipublic.blob.core.windows.net'")

    monkeypatch.setattr(tiktoken, "get_encoding", offline)
    corpus = write(tmp_path / "c.txt", "text")
    with pytest.raises(DataError) as err:
        prepare(file_cfg(corpus, tokenizer="cl100k_base"), cache_dir=tmp_path / "c")
    message = str(err.value)
    assert (
        "cl100k_base" in message
        and "TIKTOKEN_CACHE_DIR" in message
        and "Failed to resolve" in message
    )


# ---------------------------------------------------------------------------------------------
# Availability for the preset menu, and the cache location


def test_data_available(some_text: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shakespeare = some_text  # a local copy is taken as it is: any text will do
    assert data_available(DataConfig(source="pydoc"), cache_dir=tmp_path) == (
        True,
        "built in, offline",
    )

    ok, why = data_available(DataConfig(source="tinyshakespeare"), cache_dir=tmp_path)
    assert not ok and "--data" in why and tinyshakespeare.TINYSHAKESPEARE_ENV in why
    assert data_available(DataConfig(source="tinyshakespeare"), str(shakespeare), tmp_path) == (
        True,
        "local file",
    )
    monkeypatch.setenv(tinyshakespeare.TINYSHAKESPEARE_ENV, str(shakespeare))
    assert data_available(DataConfig(source="tinyshakespeare"), cache_dir=tmp_path)[0]

    prepare(DataConfig(source="tinyshakespeare"), cache_dir=tmp_path)
    assert data_available(DataConfig(source="tinyshakespeare"), cache_dir=tmp_path) == (
        True,
        "prepared",
    )

    missing = tmp_path / "missing.txt"
    ok, why = data_available(file_cfg(missing), cache_dir=tmp_path)
    assert not ok and str(missing) in why
    ok, why = data_available(file_cfg(write(tmp_path / "empty.txt", "")), cache_dir=tmp_path)
    assert not ok and "empty" in why
    ok, why = data_available(DataConfig(tokenizer="nope"), cache_dir=tmp_path)
    assert not ok and "unknown tokenizer" in why
    ok, why = data_available(file_cfg(write(tmp_path / "t.txt", "hi")), cache_dir=tmp_path)
    assert ok and str(tmp_path / "t.txt") in why


def test_default_cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COCKPIT_CACHE_DIR", str(tmp_path / "env-cache"))
    assert default_cache_dir() == tmp_path / "env-cache"

    monkeypatch.delenv("COCKPIT_CACHE_DIR")
    checkout = tmp_path / "checkout"
    write(checkout / "pyproject.toml", "")
    (checkout / "data").mkdir()
    monkeypatch.setattr(cache_dirs, "_REPO_ROOT", checkout)
    assert default_cache_dir() == checkout / "data" / "cache"

    monkeypatch.setattr(cache_dirs, "_REPO_ROOT", tmp_path / "site-packages")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "cockpit"


def test_a_stand_in_corpus_is_told_apart(tmp_path: Path) -> None:
    """gpt2-small and local-300m fall back to pydoc (their TOML: an offline placeholder for
    --data): the menu must not call that "data ready" as for default and tiny."""
    from engine.config.presets import load_preset
    from engine.data.preparation import STAND_IN_NOTE, is_stand_in_corpus

    own = write(tmp_path / "own.txt", "my corpus\n" * 10)
    for name in ("gpt2-small", "local-300m"):
        cfg = load_preset(name).data
        assert is_stand_in_corpus(cfg)
        assert data_available(cfg, cache_dir=tmp_path) == (True, STAND_IN_NOTE)
        assert "pass --data" in STAND_IN_NOTE
        assert not is_stand_in_corpus(cfg, str(own))  # --data given: the user's own corpus
    for name in ("default", "tiny", "nanogpt-cpu"):
        assert not is_stand_in_corpus(load_preset(name).data), name
