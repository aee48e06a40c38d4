"""Tokenizers (char-level and tiktoken BPE) and the safe cutting of text into pieces that
tokenize exactly as the whole text does, so a corpus can be tokenized piece by piece."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from engine.data.errors import DataError, short_error

# tiktoken is fed pieces of about this many characters, in parallel, so that a large corpus
# never sits in memory as one huge list of Python ints.
ENCODE_CHUNK_CHARS = 1 << 20
MAX_CODEPOINT = 0x10FFFF
# How far past a piece's length a safe cut is looked for before the piece is cut anyway, and
# how many tokens either side of such a cut may be re-encoded to join its two pieces.
CUT_SEARCH_CHARS = 1 << 12
JOIN_TOKENS = 32
RUN_ALIGN = 1 << 10  # a multiple of every run token's length (at most 64 in r50k); divides PIECE_CHARS


class Tokenizer:
    """What the trainer needs from a tokenizer; CharTokenizer and TiktokenTokenizer implement it."""

    name: str
    vocab_size: int
    end_of_text: int | None = None  # the token put after each document (BPE), if any

    def encode(self, text: str) -> list[int]:
        raise NotImplementedError

    def decode(self, ids: Sequence[int]) -> str:
        raise NotImplementedError

    def to_meta(self) -> dict[str, Any]:
        raise NotImplementedError

    def byte_lengths(self) -> np.ndarray:
        """Bytes of text each token id stands for (int64, one per id): what a split's bits
        per byte divide by. A marker that is no text (BPE's end-of-text) stands for none."""
        raise NotImplementedError

    def encode_corpus(self, text: str) -> np.ndarray:
        """Encode a whole corpus to an integer array; subclasses do it faster than a list."""
        return np.asarray(self.encode(text), dtype=np.int64)

    def encode_pieces(self, pieces: Sequence[str]) -> list[np.ndarray]:
        """Encode pieces cut by split_at_safe_points, one id sequence each (in parallel if it
        can)."""
        return [self.encode_corpus(piece) for piece in pieces]


class CharTokenizer(Tokenizer):
    """One token per character; the vocabulary is the sorted set of the corpus's characters."""

    def __init__(self, chars: str):
        self.name = "char"
        self.chars = chars
        self.vocab_size = len(chars)
        self._stoi = {c: i for i, c in enumerate(chars)}
        self._table: np.ndarray | None = None

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        return cls("".join(sorted(set(text))))

    def encode(self, text: str) -> list[int]:
        # Prompts may hold characters the corpus never had; there is no token for them.
        return [self._stoi[c] for c in text if c in self._stoi]

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(self.chars[int(i)] for i in ids)

    def to_meta(self) -> dict[str, Any]:
        return {"name": "char", "chars": self.chars, "vocab_size": self.vocab_size}

    def byte_lengths(self) -> np.ndarray:
        # a lone surrogate (kept, as str holds it) is written as UTF-8 writes one: 3 bytes
        return np.array(
            [len(c.encode("utf-8", "surrogatepass")) for c in self.chars], dtype=np.int64
        )

    def encode_corpus(self, text: str) -> np.ndarray:
        # A code point -> id lookup table turns megabytes of text into ids without a Python loop.
        ids = self._lookup_table()[codepoints(text)]
        return ids[ids >= 0]

    def _lookup_table(self) -> np.ndarray:
        if self._table is None:
            vocab = np.array([ord(c) for c in self.chars], dtype=np.int64)
            table = np.full(MAX_CODEPOINT + 1, -1, dtype=np.int32)
            table[vocab] = np.arange(self.vocab_size, dtype=np.int32)
            self._table = table
        return self._table


def codepoints(text: str) -> np.ndarray:
    """The text's code points as a uint32 array (lone surrogates kept, as str holds them)."""
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")


class TiktokenTokenizer(Tokenizer):
    """A tiktoken BPE encoding such as r50k_base (GPT-2's), without special tokens."""

    def __init__(self, name: str):
        self.name = name
        self._enc = _load_encoding(name)
        self.vocab_size = self._enc.n_vocab
        self.end_of_text = self._enc.eot_token

    def encode(self, text: str) -> list[int]:
        return self._enc.encode_ordinary(text)

    def decode(self, ids: Sequence[int]) -> str:
        return self._enc.decode([int(i) for i in ids])  # tiktoken rejects numpy integers

    def to_meta(self) -> dict[str, Any]:
        return {"name": self.name, "vocab_size": self.vocab_size}

    def byte_lengths(self) -> np.ndarray:
        enc = self._enc
        special = {enc.encode_single_token(t) for t in enc.special_tokens_set}
        lengths = np.zeros(self.vocab_size, dtype=np.int64)
        for i in range(self.vocab_size):
            if i in special:
                continue  # end-of-text and the like mark documents: no text
            try:
                lengths[i] = len(enc.decode_single_token_bytes(i))
            except KeyError:  # an id the encoding leaves unused
                continue
        return lengths

    def encode_corpus(self, text: str, chunk_chars: int = ENCODE_CHUNK_CHARS) -> np.ndarray:
        chunks = list(split_at_safe_points(text, chunk_chars))
        threads = encode_threads()
        parts: list[np.ndarray] = []
        for start in range(0, len(chunks), 4 * threads):  # bounds the lists of ints alive at once
            group = chunks[start : start + 4 * threads]
            batch = [np.asarray(ids, dtype=np.uint32) for ids in self.encode_pieces(group)]
            if parts and isinstance(chunks[start - 1], CutPiece):
                parts[-1], batch[0], _ = self.join_at_cut(parts[-1], batch[0])
            parts.extend(self.join_pieces(group, batch)[0])
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint32)

    def join_pieces(
        self, pieces: Sequence[str], encoded: list[np.ndarray]
    ) -> tuple[list[np.ndarray], int]:
        """The pieces' token arrays with those either side of each cut inside a word joined
        (join_at_cut), and how many of those cuts could not be checked."""
        unchecked = 0
        for i in range(len(pieces) - 1):
            if isinstance(pieces[i], CutPiece):
                encoded[i], encoded[i + 1], checked = self.join_at_cut(encoded[i], encoded[i + 1])
                unchecked += not checked
        return encoded, unchecked

    def join_at_cut(
        self, left: np.ndarray, right: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, bool]:
        """The tokens of a text cut inside a word (left's end, right's start) as encoding it whole gives
        them, and whether that was checked. The tokens around the cut are re-encoded, a few more each
        time, until the re-encoding starts and ends with the tokens it replaces: by BPE's pair property
        (GitHub's `bpe` crate), the result is then the whole text's encoding."""
        eot = self.end_of_text
        ends = np.flatnonzero(right[:JOIN_TOKENS] == eot) if eot is not None else ()
        right_end = int(ends[0]) if len(ends) else None  # the document ends there: a boundary
        for k in range(1, JOIN_TOKENS + 1):
            a = min(k, len(left))
            b = min(k, right_end if right_end is not None else len(right))
            region = [int(t) for t in left[len(left) - a :]] + [int(t) for t in right[:b]]
            try:
                text = self._enc.decode_bytes(region).decode("utf-8")
            except UnicodeDecodeError:  # a character split between tokens: take in more
                continue
            new = self._enc.encode_to_numpy(text, disallowed_special=()).astype(np.uint32)
            left_edge = len(new) > 0 and new[0] == left[len(left) - a]
            right_edge = (right_end is not None and b == right_end) or (
                b > 0 and len(new) > 0 and new[-1] == right[b - 1]
            )
            if left_edge and right_edge:
                return left[: len(left) - a], np.concatenate([new, right[b:]]), True
        return left, right, False

    def encode_pieces(self, pieces: Sequence[str]) -> list[np.ndarray]:
        # Like tiktoken's encode_ordinary_batch, but one task per core rather than per piece:
        # with many short documents (JSON lines) a future per piece would cost more than its
        # encoding. tiktoken's encoder releases the GIL, so the cores work at once.
        threads = min(encode_threads(), len(pieces))
        if threads <= 1:
            return self._encode_group(pieces)
        step = -(-len(pieces) // threads)
        groups = [pieces[start : start + step] for start in range(0, len(pieces), step)]
        with ThreadPoolExecutor(max_workers=len(groups)) as pool:
            encoded = pool.map(self._encode_group, groups)
            return [ids for group in encoded for ids in group]

    def _encode_group(self, pieces: Sequence[str]) -> list[np.ndarray]:
        # encode_to_numpy with nothing special allowed or refused is encode_ordinary, without
        # a Python int per token: about 30% faster on a corpus (tested equal)
        return [self._enc.encode_to_numpy(piece, disallowed_special=()) for piece in pieces]


def encode_threads() -> int:
    """Threads for BPE encoding: the cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# A cut is safe just after a newline between a non-space character and a letter or digit, or
# just before a space between a non-space character and a letter. No pre-tokenizer pattern of
# the tiktoken encodings carries a match from a non-space character on through a newline or a
# space, nor from a newline into a letter or digit; a space before a letter always starts the
# letter's match. Whitespace before the newline could merge with it ("  \n", "\n\n"): not cut.
_SAFE_CUT = re.compile(r"(?<=\S\n)(?=[^\W_])|(?<=\S)(?= [^\W\d_])")


# Also safe: just after a letter or a digit followed by punctuation, a symbol, whitespace or
# the other of the two (an apostrophe excepted: "'s" joins the word before it in o200k). No
# pattern's match holds a letter followed by one of those, nor a digit followed by a non-digit,
# so a match always ends there. This is what cuts a long line without spaces (code, JSON, CSV).
_WORD_END = (
    r"(?<=[\p{L}\p{N}])(?=[\p{P}\p{S}\s])(?!')|(?<=\p{L})(?=\p{N})|(?<=\p{N})(?=\p{L})"
)
_safe_cut_pattern: Any = None


class CutPiece(str):
    """A piece that ends where no safe point came near (inside one long word: a DNA sequence,
    a run of digits or of '='): its tokens and the next piece's are joined by join_at_cut."""


def split_at_safe_points(text: str, chunk_chars: int) -> Iterator[str]:
    """Cut text into pieces of about chunk_chars (at most CUT_SEARCH_CHARS more) that tokenize,
    one by one, exactly as the whole text does; joined they are the text. Where no safe point
    comes within CUT_SEARCH_CHARS, the piece is cut at chunk_chars anyway, as a CutPiece."""
    pattern = _safe_cuts()
    start = 0
    while len(text) - start > chunk_chars:
        # Searched in a window, not to the end: a text without safe points is not rescanned
        # for every piece (that made a long line cost its length squared).
        window_end = start + chunk_chars + CUT_SEARCH_CHARS
        found = pattern.search(text, start + chunk_chars, window_end)
        if found is not None:
            yield text[start : found.start()]
            start = found.start()
        elif len(text) > window_end:
            cut = _cut_in_word(text, start, start + chunk_chars)
            yield CutPiece(text[start:cut])
            start = cut
        else:
            break  # the text ends within the window: the rest is one piece
    yield text[start:]


def _cut_in_word(text: str, start: int, cut: int) -> int:
    """Where to cut the word at about `cut`. Inside a run of one character ('=====', 'aaaa')
    BPE's tokens are of one power-of-two length (4 for 'a', 64 for '=' in r50k), counted from
    the run's start: a cut at a multiple of RUN_ALIGN characters from there (or from the
    piece's start, itself so cut, when the run began before it) keeps them, so the join checks."""
    run_char = text[cut - 1]
    if text[cut] != run_char:
        return cut
    before = text[start:cut]
    run_start = cut - (len(before) - len(before.rstrip(run_char)))
    aligned = run_start + (cut - run_start) // RUN_ALIGN * RUN_ALIGN
    return aligned if aligned > start else cut


def _safe_cuts() -> Any:
    # The `regex` module (tiktoken's own dependency) for the Unicode classes tiktoken's
    # patterns use; compiled on first use, as tiktoken is imported.
    global _safe_cut_pattern
    if _safe_cut_pattern is None:
        import regex

        _safe_cut_pattern = regex.compile(f"{_SAFE_CUT.pattern}|{_WORD_END}")
    return _safe_cut_pattern


_split_at_safe_newlines = split_at_safe_points  # its older name


def check_tokenizer_name(name: str) -> None:
    """A one-line DataError unless name is 'char' or a tiktoken encoding."""
    if name == "char":
        return
    import tiktoken  # imported late: only BPE runs pay for it

    known = tiktoken.list_encoding_names()
    if name not in known:
        raise DataError(
            f"unknown tokenizer {name!r}: set data.tokenizer to 'char' or a tiktoken encoding "
            f"({', '.join(known)})"
        )


def _load_encoding(name: str) -> Any:
    check_tokenizer_name(name)
    import tiktoken

    from engine.data.cache_dirs import keep_tiktoken_cache_private

    keep_tiktoken_cache_private()  # before tiktoken reads its cache: not a folder in /tmp

    try:
        return tiktoken.get_encoding(name)
    except (OSError, ValueError, ImportError) as e:  # offline: requests' errors are OSErrors
        hint = (
            " (or use r50k_base, the same encoding, whose file may already be cached)"
            if name == "gpt2"
            else ""
        )
        raise DataError(
            f"tiktoken could not load the {name} encoding ({short_error(e)}): its file is "
            f"downloaded on first use, so offline copy a tiktoken cache folder here and set "
            f"TIKTOKEN_CACHE_DIR to it{hint}"
        ) from None


def check_tokenizer_loads(name: str) -> None:
    """A one-line DataError unless a run could load tokenizer `name` now: 'char', or a tiktoken
    encoding whose file is cached (or can be downloaded) - what a run's setup needs, said
    before anything starts."""
    if name != "char":
        _load_encoding(name)


def tokenizer_from_meta(meta: dict[str, Any]) -> Tokenizer:
    """Rebuild a tokenizer from its to_meta() dict (from meta.json or a checkpoint)."""
    name = meta.get("name")
    if name == "char":
        return CharTokenizer(meta["chars"])
    if not isinstance(name, str):
        raise DataError(f"tokenizer metadata without a name ({meta!r}); re-prepare the data")
    tokenizer = TiktokenTokenizer(name)
    expected = meta.get("vocab_size")
    if expected is not None and expected != tokenizer.vocab_size:
        raise DataError(
            f"the {name} tokenizer now has {tokenizer.vocab_size} tokens but the data was "
            f"prepared with {expected}; delete the prepared cache folder to re-prepare it"
        )
    return tokenizer
