"""A checkpoint's plain parts, built alone: what `plain_data` turns a config or record into, and
that a weights-only load reads it back as it was."""

from __future__ import annotations

import enum
from pathlib import Path

import numpy as np
import pytest
import torch

from engine.checkpoint.state import numpy_rng_state, plain_data


class Dtype(enum.Enum):
    BF16 = "bf16"


def test_plain_data_reads_back_weights_only_as_it_was_written(tmp_path: Path) -> None:
    record = {
        "source": Path("/data/corpus.txt"),
        "vocab": np.int64(50257),
        "loss": np.float32(0.5),
        "dtype": Dtype.BF16,
        "shards": [Path("a"), (1, None, True)],
        "name": "tiny",
    }
    plain = plain_data(record)
    assert plain == {
        "source": "/data/corpus.txt",
        "vocab": 50257,
        "loss": 0.5,
        "dtype": "bf16",
        "shards": ["a", (1, None, True)],
        "name": "tiny",
    }
    assert type(plain["vocab"]) is int and type(plain["loss"]) is float
    torch.save(plain, tmp_path / "plain.pt")
    assert torch.load(tmp_path / "plain.pt", weights_only=True) == plain


def test_plain_data_refuses_what_has_no_place_in_a_checkpoint() -> None:
    with pytest.raises(TypeError, match="set has no place in a checkpoint"):
        plain_data({"config": {"tags": {"a"}}})


def test_numpys_rng_state_keeps_every_word_of_its_key(tmp_path: Path) -> None:
    np.random.seed(7)
    name, key, pos, has_gauss, cached = np.random.get_state(legacy=True)
    state = numpy_rng_state(name, key, pos, has_gauss, cached)
    torch.save(state, tmp_path / "rng.pt")
    back = torch.load(tmp_path / "rng.pt", weights_only=True)  # no numpy globals needed
    assert back["key"].numpy().astype(np.uint32).tolist() == key.tolist()
    assert (back["bit_generator"], back["pos"]) == ("MT19937", pos)
