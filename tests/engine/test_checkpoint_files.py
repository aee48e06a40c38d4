"""Checkpoint state and files: the fingerprint that makes `c` idempotent, the one atomic write
that checkpoints and prepared data share, a bad checkpoint's alert code, the contract's list."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import numpy as np
import pytest
import torch

from engine.checkpoint.store import save_checkpoint, state_fingerprint
from engine.config.presets import load_preset
from engine.config.run_config import DataConfig
from engine.data.preparation import prepare
from engine.files import atomic_write
from engine.model.gpt import GPT
from engine.train.trainer import Trainer

REPO = Path(__file__).resolve().parents[2]


def test_the_fingerprint_ignores_dict_order_and_sees_every_value() -> None:
    state = {"step": 3, "rng": {"torch": torch.arange(4), "numpy": np.arange(3)}, "x": [1, 2]}
    same = {"x": [1, 2], "rng": {"numpy": np.arange(3), "torch": torch.arange(4)}, "step": 3}
    assert state_fingerprint(state) == state_fingerprint(same)
    for changed in (
        {**state, "step": 4},
        {**state, "rng": {"torch": torch.tensor([0, 1, 2, 4]), "numpy": np.arange(3)}},
        {**state, "rng": {"torch": torch.arange(4), "numpy": np.array([0, 1, 3])}},
        {**state, "x": [[1, 2]]},  # nesting counts, not only the leaves
    ):
        assert state_fingerprint(changed) != state_fingerprint(state)


def test_an_atomic_write_that_fails_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "meta.json"
    atomic_write(target, lambda f: f.write(b"old"))

    def broken(f) -> None:
        f.write(b"half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space"):
        atomic_write(target, broken)
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["meta.json"]


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_checkpoints_and_prepared_data_are_ordinary_files(tmp_path: Path) -> None:
    """One write path: both honour the umask (the data files used to be private, 0600)."""
    old = os.umask(0o022)
    try:
        corpus = tmp_path / "corpus.txt"
        corpus.write_text("to be or not to be, that is the question\n" * 50)
        prepare(DataConfig(source=str(corpus), tokenizer="char"), cache_dir=tmp_path / "cache")
        run = tmp_path / "run"
        run.mkdir()
        saved = save_checkpoint(run, 1, {"model": {}, "config": {}}, keep_last=1)
    finally:
        os.umask(old)
    prepared = [
        p for p in (tmp_path / "cache").rglob("*") if p.name in ("tokens.bin", "meta.json")
    ]
    assert len(prepared) == 2
    assert {p.name: _mode(p) for p in prepared} == dict.fromkeys(
        ("tokens.bin", "meta.json"), 0o644
    )
    assert _mode(saved) == 0o644


def test_a_checkpoint_that_cannot_be_read_is_reported_as_a_checkpoint_problem(
    tmp_path: Path,
) -> None:
    broken = tmp_path / "ckpt-00000010.pt"
    broken.write_bytes(b"not a checkpoint")
    events: list = []
    trainer = Trainer(load_preset("tiny"), resume=broken, sinks=[events.append], telemetry=False)
    assert trainer.run() == "failed"
    alert = next(e for e in events if e.kind == "alert")
    assert (alert.level, alert.code) == ("error", "checkpoint")
    assert "cannot read this checkpoint" in alert.message


def test_layernorm_weights_keep_their_checkpoint_names() -> None:
    """torch's LayerNorm (bias optional since 2.1) holds what the hand-written one held."""
    for bias in (False, True):
        cfg = load_preset("tiny", ["model.n_layer=1", f"model.bias={str(bias).lower()}"]).model
        names = {k for k in GPT(cfg, 32).state_dict() if ".ln_" in k or k.startswith("ln_")}
        expected = {"blocks.0.ln_1.weight", "blocks.0.ln_2.weight", "ln_f.weight"}
        if bias:
            expected |= {n.replace("weight", "bias") for n in expected}
        assert names == expected


def test_the_documented_contract_names_every_command() -> None:
    page = (REPO / "docs" / "reference" / "wire.md").read_text(encoding="utf-8")
    section = page.split("\n## The contract\n", 1)[1].split("\n## ", 1)[0]
    commands = "pause resume checkpoint set_lr scale_lr sample evaluate stop rollback".split()
    for command in commands:
        assert callable(getattr(Trainer, command))
        assert re.search(rf"`{command}\(", section), f"{command}() is missing from the contract"
