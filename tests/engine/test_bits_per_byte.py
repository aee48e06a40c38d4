"""Bits per byte: each split's UTF-8 byte count (the preparation's byte index, or counted from
the tokens of a cache prepared before it), the Eval record's train_bpb / val_bpb, and older
records without them."""

from __future__ import annotations

import contextlib
import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny import tiny_overrides

from engine.config.presets import load_preset
from engine.config.run_config import DataConfig
from engine.data import text_bytes
from engine.data.preparation import PreparedData, prepare
from engine.data.tokenizers import CharTokenizer
from engine.events import Eval, Event
from engine.model.evaluation import Evaluator, bits_per_byte
from engine.model.gpt import GPT
from engine.train.cadence import evaluate
from engine.train.counters import Counters
from tests.conftest import TIKTOKEN_CACHE

# multi-byte characters: 2 (é, ö), 3 (€, 日), 4 (😀) bytes in UTF-8
TEXT = "".join(f"line {i}: héllo wörld, 3€ 日本 😀\n" for i in range(400))
TINY = tiny_overrides("model.block_size=8", "train.batch_size=3", "train.device=cpu")


def corpus(tmp_path: Path, text: str = TEXT) -> Path:
    path = tmp_path / "corpus" / "text.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_a_char_split_counts_the_utf8_bytes_of_its_characters(tmp_path: Path) -> None:
    data = prepare(DataConfig(source=str(corpus(tmp_path)), tokenizer="char", val_fraction=0.1),
                   cache_dir=tmp_path / "cache")  # fmt: skip
    n_train = len(data.train)
    assert n_train + len(data.val) == len(TEXT)  # one token a character
    by_hand = (len(TEXT[:n_train].encode("utf-8")), len(TEXT[n_train:].encode("utf-8")))
    assert by_hand[0] > n_train  # the text has multi-byte characters: tokens are not bytes
    assert data.split_bytes() == by_hand
    assert data.meta["text_bytes"] == len(TEXT.encode("utf-8"))
    # bits per byte: the loss in bits, times tokens per byte
    assert bits_per_byte(2.0, n_train, by_hand[0]) == pytest.approx(2.0 / math.log(2) * n_train / by_hand[0])


def test_another_split_of_the_same_cache_counts_its_own_bytes(tmp_path: Path) -> None:
    path, cache = corpus(tmp_path), tmp_path / "cache"
    prepare(DataConfig(source=str(path), tokenizer="char", val_fraction=0.1), cache_dir=cache)
    data = prepare(DataConfig(source=str(path), tokenizer="char", val_tokens=1000), cache_dir=cache)
    n_train = len(TEXT) - 1000
    assert data.split_bytes() == (len(TEXT[:n_train].encode()), len(TEXT[n_train:].encode()))


def test_a_cache_prepared_before_the_byte_index_is_counted_from_its_tokens(tmp_path: Path) -> None:
    path, cache = corpus(tmp_path), tmp_path / "cache"
    cfg = DataConfig(source=str(path), tokenizer="char", val_fraction=0.1)
    first = prepare(cfg, cache_dir=cache)
    expected = first.split_bytes()
    out = first.directory
    assert out is not None
    # as an older engine left it: no index, no text_bytes in meta.json
    (out / text_bytes.BYTE_INDEX_FILE).unlink()
    meta = json.loads((out / "meta.json").read_text())
    del meta["text_bytes"]
    (out / "meta.json").write_text(json.dumps(meta))
    again = prepare(cfg, cache_dir=cache)
    assert again.directory == out  # loaded as it was: not prepared again
    assert again.split_bytes() == expected
    assert (out / text_bytes.BYTE_INDEX_FILE).is_file()  # written for next time


def test_an_index_of_another_token_file_is_not_used(tmp_path: Path) -> None:
    (tmp_path / "tokens.bin").write_bytes(b"\0\0" * 10)
    lengths = np.array([1, 2, 3], np.int64)
    counter = text_bytes.ByteCounter(lengths, stride=4)
    counter.add(np.zeros(10, np.uint16))
    text_bytes.write_index(tmp_path, counter.index())
    assert text_bytes.read_index(tmp_path, 10) is not None
    assert text_bytes.read_index(tmp_path, 11) is None  # another count of tokens
    written = (tmp_path / "tokens.bin").stat().st_mtime_ns
    os.utime(tmp_path / "tokens.bin", ns=(written, written + 1_000_000))  # rewritten since
    assert text_bytes.read_index(tmp_path, 10) is None


def test_the_byte_index_gives_any_split_point_exactly(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 5, size=103).astype(np.uint16)
    lengths = np.array([1, 2, 3, 4, 0], np.int64)  # id 4: an end-of-text, no text
    (tmp_path / "tokens.bin").write_bytes(tokens.tobytes())
    counter = text_bytes.ByteCounter(lengths, stride=7)
    for start in range(0, len(tokens), 10):  # given in arrays that do not line up with the stride
        counter.add(tokens[start : start + 10])
    text_bytes.write_index(tmp_path, counter.index())
    for n_train in (0, 5, 7, 14, 50, 99, 103):
        train, val = tokens[:n_train], tokens[n_train:]
        by_hand = (int(lengths[train].sum()), int(lengths[val].sum()))
        assert text_bytes.split_bytes(train, val, lengths, tmp_path) == by_hand
        assert text_bytes.split_bytes(train, val, lengths, None) == by_hand


def test_a_bpe_split_counts_the_bytes_of_its_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not TIKTOKEN_CACHE.is_dir():
        pytest.skip(f"tiktoken cache not found at {TIKTOKEN_CACHE}")
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(TIKTOKEN_CACHE))
    import tiktoken

    data = prepare(DataConfig(source=str(corpus(tmp_path)), tokenizer="r50k_base", val_fraction=0.2),
                   cache_dir=tmp_path / "cache")  # fmt: skip
    enc = tiktoken.get_encoding("r50k_base")
    ids = enc.encode_ordinary(TEXT)
    assert np.concatenate([data.train, data.val]).tolist() == ids
    n_train = len(data.train)
    train_text = enc.decode_bytes(ids[:n_train])  # a split may cut a character's bytes
    assert data.split_bytes() == (len(train_text), len(TEXT.encode("utf-8")) - len(train_text))
    assert len(train_text) > 2 * n_train  # a BPE token is several bytes


def test_an_end_of_text_between_documents_is_no_text() -> None:
    if not TIKTOKEN_CACHE.is_dir():
        pytest.skip(f"tiktoken cache not found at {TIKTOKEN_CACHE}")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TIKTOKEN_CACHE_DIR", str(TIKTOKEN_CACHE))
        from engine.data.tokenizers import TiktokenTokenizer

        tok = TiktokenTokenizer("r50k_base")
        lengths = tok.byte_lengths()
    assert lengths[tok.end_of_text] == 0
    assert lengths[tok.encode(" hello")[0]] == len(b" hello")


def _evaluator(data: PreparedData) -> Evaluator:
    cfg = load_preset("default", TINY)
    torch.manual_seed(0)
    model = GPT(cfg.model, data.tokenizer.vocab_size)
    return Evaluator(model, model, contextlib.nullcontext(), torch.device("cpu"), cfg)


class _Report:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def emit(self, event: Event) -> None:
        self.events.append(event)

    def alert(self, level: str, message: str, code: str) -> None:
        pass


def test_the_eval_record_carries_bits_per_byte(tmp_path: Path) -> None:
    data = prepare(DataConfig(source=str(corpus(tmp_path)), tokenizer="char", val_fraction=0.1),
                   cache_dir=tmp_path / "cache")  # fmt: skip
    train_bytes, val_bytes = data.split_bytes() or (0, 0)
    report = _Report()
    event = evaluate(_evaluator(data), data, Counters(step=5), report)  # type: ignore[arg-type]
    assert report.events == [event]
    expected_val = event.val_loss / math.log(2) * len(data.val) / val_bytes
    assert event.val_bpb == pytest.approx(expected_val, rel=1e-12)
    assert event.train_bpb == pytest.approx(event.train_loss / math.log(2) * len(data.train) / train_bytes)
    record = json.loads(json.dumps(event.to_record()))
    assert record["val_bpb"] == pytest.approx(expected_val)
    assert Event.from_record(record) == event


def test_hand_made_arrays_are_counted_and_an_unknown_count_gives_none() -> None:
    tok = CharTokenizer("aé")
    ids = np.array([0, 1, 1, 0], np.uint16)
    data = PreparedData(train=ids[:3], val=ids[3:], tokenizer=tok, meta={}, source="test")
    assert data.split_bytes() == (5, 1)
    evaluator = _evaluator(data)
    assert evaluator.bits_per_byte(data, 1.0, math.nan) == (pytest.approx(3 / 5 / math.log(2)), None)
    broken = PreparedData(train=ids, val=ids, tokenizer=CharTokenizer("a"), meta={}, source="test")
    assert broken.split_bytes() is None  # an id beyond the vocabulary: unknown, never a failure
    assert evaluator.bits_per_byte(broken, 1.0, 1.0) == (None, None)


def test_an_eval_record_written_before_bits_per_byte_still_reads() -> None:
    old = {"kind": "eval", "time": 1.0, "step": 10, "train_loss": 2.0, "val_loss": 2.1,
           "train_time_s": 3.0, "full_split": False}  # fmt: skip
    event = Event.from_record(old)
    assert isinstance(event, Eval) and event.val_bpb is None and event.train_bpb is None


def test_a_run_resumed_from_before_bits_per_byte_records_them_from_then_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine.rundir import list_runs
    from engine.train.trainer import Trainer

    monkeypatch.setenv("COCKPIT_CACHE_DIR", str(tmp_path / "cache"))  # its own, made old below
    run_dir = tmp_path / "runs" / "old"
    sets = [*TINY, "eval.interval=0", "train.max_steps=2"]  # evaluated and saved at its end
    assert Trainer(load_preset("tiny", sets), run_dir=run_dir, telemetry=False).run() == "finished"
    # as an engine before bits per byte left it: no bpb in the records, no byte index
    metrics = run_dir / "metrics.jsonl"
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    for record in records:
        record.pop("train_bpb", None)
        record.pop("val_bpb", None)
    metrics.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records))
    (run_dir / "summary.json").unlink()
    for index in (tmp_path / "cache").rglob(text_bytes.BYTE_INDEX_FILE):
        index.unlink()
    events: list[Event] = []
    resumed = Trainer(load_preset("tiny"), resume=run_dir, resume_overrides=["train.max_steps=3"],
                      sinks=[events.append], telemetry=False)  # fmt: skip
    assert resumed.run() == "finished"
    evals = [e for e in events if isinstance(e, Eval)]
    assert [e.step for e in evals] == [3] and all(e.val_bpb and e.train_bpb for e in evals)
    assert list((tmp_path / "cache").rglob(text_bytes.BYTE_INDEX_FILE))  # counted, kept
    (listed,) = list_runs(tmp_path / "runs")
    assert listed.as_json()["best_val_bpb_step"] == 3  # step 2's eval recorded none
    assert listed.as_json()["best_val_step"] in (2, 3)
