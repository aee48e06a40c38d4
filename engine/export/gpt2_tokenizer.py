"""GPT-2's tokenizer files (vocab.json, merges.txt) rebuilt from a tiktoken encoding's ranks, so
that transformers' GPT2TokenizerFast encodes exactly as the run did. A token's merge is found by
running BPE on its bytes with only the lower-ranked tokens: the pair left is the one it came from.
"""

from __future__ import annotations

import json
from typing import Any

END_OF_TEXT = "<|endoftext|>"


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's printable stand-in for each byte: printable Latin-1 bytes stand for themselves,
    the others (controls, space, ...) take the code points from 256 up, in byte order."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    mapping = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


def uses_gpt2_bpe(encoding: Any) -> bool:
    """True for an encoding whose pre-tokenizer is GPT-2's (so its ranks are GPT-2-style BPE)."""
    import tiktoken

    return encoding._pat_str == tiktoken.get_encoding("r50k_base")._pat_str


def _bpe_parts(token: bytes, ranks: dict[bytes, int], below: int) -> list[bytes]:
    """Merge token's bytes as tiktoken does (lowest-ranked adjacent pair first), using only
    tokens ranked below `below`."""
    parts = [bytes([b]) for b in token]
    while len(parts) > 1:
        best_rank, best_at = below, -1
        for i in range(len(parts) - 1):
            rank = ranks.get(parts[i] + parts[i + 1], below)
            if rank < best_rank:
                best_rank, best_at = rank, i
        if best_at < 0:
            break
        parts[best_at : best_at + 2] = [parts[best_at] + parts[best_at + 1]]
    return parts


def recover_merges(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """The merges in rank order: one per multi-byte token, the pair it is built from."""
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
        if len(token) < 2:
            continue
        parts = _bpe_parts(token, ranks, rank)
        if len(parts) != 2:
            raise ValueError(f"token {token!r} (rank {rank}) is not one merge of two lower tokens")
        merges.append((parts[0], parts[1]))
    return merges


def tokenizer_files(encoding: Any, model_max_length: int) -> dict[str, str]:
    """{file name: text} for vocab.json, merges.txt, tokenizer_config.json and
    special_tokens_map.json."""
    show = bytes_to_unicode()

    def as_text(token: bytes) -> str:
        return "".join(show[b] for b in token)

    ranks: dict[bytes, int] = encoding._mergeable_ranks
    vocab = {as_text(token): rank for token, rank in ranks.items()}
    for special, token_id in encoding._special_tokens.items():
        vocab[special] = token_id
    vocab = dict(sorted(vocab.items(), key=lambda item: item[1]))
    merges = "".join(f"{as_text(a)} {as_text(b)}\n" for a, b in recover_merges(ranks))
    eot_id = encoding._special_tokens[END_OF_TEXT]
    special = {"bos_token": END_OF_TEXT, "eos_token": END_OF_TEXT, "unk_token": END_OF_TEXT}
    added = {
        "content": END_OF_TEXT,
        "lstrip": False,
        "rstrip": False,
        "normalized": True,
        "single_word": False,
        "special": True,
    }
    config = {
        "tokenizer_class": "GPT2Tokenizer",
        "add_prefix_space": False,
        "add_bos_token": False,
        "errors": "replace",
        "model_max_length": model_max_length,
        "added_tokens_decoder": {str(eot_id): added},
        **special,
    }
    return {
        "vocab.json": json.dumps(vocab, ensure_ascii=False),
        "merges.txt": "#version: 0.2\n" + merges,
        "tokenizer_config.json": json.dumps(config, indent=2) + "\n",
        "special_tokens_map.json": json.dumps(special, indent=2) + "\n",
    }
