"""The corpus a run trained on, as its checkpoints and run_started record keep it (recorded at
the start, checked when the run resumes): where it came from, its
sha256 and its tokenizer, with a fingerprint of the vocabulary."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from engine.data.sources import Source


def kind_and_path(identity: str, files: Sequence[Any]) -> tuple[str, str | None]:
    """A source identity as a record's kind (pydoc, tinyshakespeare or path) and path."""
    if identity == "pydoc":
        return "pydoc", None
    if identity == "tinyshakespeare":
        return "tinyshakespeare", str(files[0]) if files else None
    return "path", identity  # a path source's identity is its resolved absolute path


def vocab_fingerprint(tokenizer_meta: dict[str, Any]) -> str:
    """A short hash of a tokenizer's to_meta(): equal fingerprints, same token ids."""
    text = json.dumps(tokenizer_meta, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def source_record(source: Source, meta: dict[str, Any]) -> dict[str, Any]:
    """Where a run's corpus came from, for its checkpoints and run_started record:
    source (pydoc, tinyshakespeare or path), absolute path, sha256 of the text, tokenizer."""
    kind, path = kind_and_path(source.identity, source.files)
    return {
        "source": kind,
        "path": path,
        "description": source.description,
        "sha256": meta["source_sha256"],
        "tokenizer": meta["tokenizer"]["name"],
        "vocab_size": meta["vocab_size"],
        "vocab_fingerprint": vocab_fingerprint(meta["tokenizer"]),
    }
