"""The corpus a resumed run trains on: the one its checkpoint recorded (its source
record), found again, checked by sha256 and vocabulary, or refused with one line. It
uses the preparation's own helpers: the same cache, the same hashing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.config.run_config import DataConfig
from engine.data.build import char_vocabulary
from engine.data.cache_dirs import default_cache_dir, prepared_dir
from engine.data.errors import DataError
from engine.data.locator import resolve_source
from engine.data.prepared import read_meta
from engine.data.progress import StopPoll
from engine.data.record import kind_and_path, vocab_fingerprint
from engine.data.sources import Source, source_sha256, source_signature
from engine.data.tokenizers import CharTokenizer, Tokenizer

ALLOW_DATA_CHANGE_FLAG = "--allow-data-change"


class DataRefused(DataError):
    """A resume refused because its corpus or vocabulary is not the one the run trained on."""


def recorded_source(checkpoint: dict[str, Any]) -> tuple[dict[str, Any] | None, bool]:
    """A checkpoint's corpus record, and whether it was rebuilt from an older checkpoint's
    prepared-data metadata (checkpoints from before the record carry only that)."""
    record = checkpoint.get("data_source")
    if record:
        return record, False
    meta = checkpoint.get("data_meta") or {}
    identity, digest = meta.get("source_identity"), meta.get("source_sha256")
    if not isinstance(identity, str) or not isinstance(digest, str):
        return None, True
    signature = meta.get("source_signature") or []
    kind, path = kind_and_path(identity, [Path(entry[0]) for entry in signature])
    tokenizer = meta.get("tokenizer") or checkpoint.get("tokenizer") or {}
    return {
        "source": kind,
        "path": path,
        "description": meta.get("source", identity),
        "sha256": digest,
        "tokenizer": tokenizer.get("name"),
        "vocab_size": meta.get("vocab_size"),
        "vocab_fingerprint": vocab_fingerprint(tokenizer) if tokenizer else None,
    }, True


def _current_sha256(source: Source, cfg: DataConfig, cache_dir: Path) -> str:
    # Unchanged size and mtime of every file: the hash prepare() recorded is still the hash.
    out = prepared_dir(source.identity, source.slug, cfg, cache_dir)
    meta = read_meta(out)
    signature = source_signature(source)
    if meta is not None and signature is not None and meta.get("source_signature") == signature:
        return str(meta["source_sha256"])
    return source_sha256(source)


def resume_data_path(
    checkpoint: dict[str, Any],
    cfg: DataConfig,
    data_path: str | None = None,
    allow_changed: bool = False,
    cache_dir: Path | None = None,
    download: bool = True,
) -> tuple[str | None, list[str]]:
    """The `data_path` for prepare() that resumes the checkpoint on its own corpus, and notes
    for the user. With no --data the recorded path is used (it wins over the environment);
    --data NEWPATH is accepted when its sha256 is the recorded one. A corpus that is gone or
    changed, or another tokenizer, raises DataRefused naming both hashes and the way out."""
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    record, rebuilt = recorded_source(checkpoint)
    if record is None:
        return data_path, [
            "this checkpoint does not record its corpus (saved by an older cockpit): the corpus "
            "could not be checked"
        ]
    recorded_tokenizer = record.get("tokenizer")
    if recorded_tokenizer and recorded_tokenizer != cfg.tokenizer:
        raise DataRefused(
            f"data.tokenizer: this run was trained with {recorded_tokenizer}, not "
            f"{cfg.tokenizer}; the weights cannot carry over to another vocabulary: start a new run"
        )
    expected, where = record["sha256"], record.get("path")
    notes = []
    if rebuilt:
        notes.append(
            f"this checkpoint does not record its corpus (saved by an older cockpit): using the "
            f"one its prepared data names, {record['description']} (sha256 {expected})"
        )
    chosen = data_path
    if chosen is None and where is not None:
        if Path(where).exists():
            chosen = where
        elif record["source"] == "path":
            raise DataRefused(
                f"this run's corpus {where} is gone (moved or deleted); pass --data NEWPATH to "
                f"where it is now (its sha256 must be {expected})"
            )
        # a Tiny Shakespeare copy that is gone: any other copy will do, it is hashed below
    try:
        source = resolve_source(cfg, chosen, cache_dir, download)
    except DataError:
        if chosen is not None or where is None:
            raise
        raise DataRefused(
            f"this run's corpus {where} is gone and no other copy could be found or downloaded; "
            f"pass --data NEWPATH to where it is now (its sha256 must be {expected})"
        ) from None
    digest = _current_sha256(source, cfg, cache_dir)
    if digest != expected:
        if not allow_changed:
            raise DataRefused(
                f"the corpus {source.description} is not the one this run trained on (sha256 "
                f"{expected} recorded, {digest} now): restore it or pass --data PATH to an "
                f"unchanged copy, or pass {ALLOW_DATA_CHANGE_FLAG} to train on it on purpose"
            )
        if cfg.tokenizer == "char":  # its vocabulary is the text's characters: they must match
            check_vocabulary(checkpoint, _char_tokenizer(source, cfg), source.description)
        notes.append(
            f"training on a changed corpus ({ALLOW_DATA_CHANGE_FLAG}): {source.description}, "
            f"sha256 {expected} -> {digest}"
        )
    else:
        _, now = kind_and_path(source.identity, source.files)
        if where is not None and now is not None and now != where:
            notes.append(f"corpus moved: {where} -> {now} (the same text, sha256 {expected})")
    return chosen, notes


def _char_tokenizer(source: Source, cfg: DataConfig) -> CharTokenizer:
    """The char-level vocabulary prepare() would build for the source (read in pieces)."""
    return char_vocabulary(source, cfg, None, StopPoll(None))[0]


def check_vocabulary(checkpoint: dict[str, Any], tokenizer: Tokenizer, corpus: str) -> None:
    """Refuse to resume a checkpoint on a vocabulary other than its own: with another character
    set the same token ids would mean other characters (or the embedding shape would not fit)."""
    saved = checkpoint.get("tokenizer")
    now = tokenizer.to_meta()
    if not saved or saved == now:
        return
    if saved.get("name") == "char" and now.get("name") == "char":
        old, new = saved.get("chars", ""), now.get("chars", "")
        changed = sum(a != b for a, b in zip(old, new, strict=False)) + abs(len(old) - len(new))
        detail = (
            f"{changed} of {len(old)} token ids would change meaning, {len(old)} -> "
            f"{len(new)} characters"
        )
    else:
        detail = (
            f"{saved.get('name')} with {saved.get('vocab_size')} tokens -> {now.get('name')} "
            f"with {now.get('vocab_size')}"
        )
    raise DataRefused(
        f"the vocabulary of {corpus} is not this run's ({detail}); the weights cannot carry "
        f"over to another vocabulary: start a new run on this corpus"
    )
