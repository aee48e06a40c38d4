"""A prepared corpus's meta.json is read, never trusted: JSON of any other shape (a changed
dtype, a tokenizer that is not one, a count that is not a count) means the corpus is prepared
again, not loaded as it says or ended in a traceback. The real prepare() on a real corpus (the
bundled pydoc text) in a temporary cache."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from command_here import cockpit_here

from engine.config.presets import load_preset
from engine.data.preparation import prepare


def _malformed(good: dict) -> dict[str, dict]:
    """meta.json variants whose token file still has the size they claim (so only their
    contents can tell them from a complete preparation)."""
    total, chars = good["total_tokens"], good["tokenizer"]
    return {
        "floats": {**good, "dtype": "float32", "total_tokens": total // 2},
        "bytes": {**good, "dtype": "uint8", "total_tokens": total * 2},
        "no tokenizer": {k: v for k, v in good.items() if k != "tokenizer"},
        "tokenizer a list": {**good, "tokenizer": ["char"]},
        "chars not text": {**good, "tokenizer": {**chars, "chars": 5}},
        "fewer chars than ids": {**good, "tokenizer": {**chars, "chars": chars["chars"][:9]}},
        "count a float": {**good, "total_tokens": float(total)},
        "no hash": {k: v for k, v in good.items() if k != "source_sha256"},
    }


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict]:
    cache = tmp_path_factory.mktemp("cache")
    cfg = load_preset("tiny", ["data.source=pydoc"]).data
    prepare(cfg, cache_dir=cache)
    [out] = [p for p in cache.iterdir() if (p / "meta.json").exists()]
    return cache, out, json.loads((out / "meta.json").read_text())


CASES = list(_malformed({"total_tokens": 2, "tokenizer": {"chars": ""}}))


@pytest.mark.parametrize("case", CASES)
def test_a_malformed_corpus_meta_is_prepared_again(prepared, case) -> None:
    cache, out, good = prepared
    (out / "meta.json").write_text(json.dumps(_malformed(good)[case]))
    cfg = load_preset("tiny", ["data.source=pydoc"]).data
    data = prepare(cfg, cache_dir=cache)  # no traceback, no float tokens
    assert data.train.dtype == np.dtype("<u2")
    assert data.tokenizer.vocab_size == good["vocab_size"]
    assert len(data.train) + len(data.val) == good["total_tokens"]
    again = json.loads((out / "meta.json").read_text())
    assert again["dtype"] == "uint16" and again["tokenizer"] == good["tokenizer"]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from engine.train.trainer import Trainer

    run_dir = tmp_path_factory.mktemp("run") / "run"
    small = ["model.n_layer=1", "model.n_embd=16", "train.batch_size=4", "train.max_steps=2",
             "eval.interval=0", "sample.interval=0", "checkpoint.interval=0"]  # fmt: skip
    assert Trainer(load_preset("tiny", small), run_dir=run_dir, sinks=[], telemetry=False).run() == "finished"
    return run_dir


BAD_FORKS = {
    "list": "[]",
    "string": '"a branch"',
    "huge step": '{"parent": "p", "step": 1e400}',
    "parent a dict": '{"parent": {"a": 1}, "step": 2}',
    "negative step": '{"parent": "p", "step": -3}',
    "step a bool": '{"parent": "p", "step": true}',
}


@pytest.mark.parametrize("fork", list(BAD_FORKS.values()), ids=list(BAD_FORKS))
def test_a_malformed_fork_json_is_no_parent_and_the_run_still_lists(finished_run, tmp_path, fork) -> None:
    import shutil

    from engine.rundir.summary import SUMMARY_NAME, read_summary

    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    (run_dir / SUMMARY_NAME).unlink()
    (run_dir / "fork.json").write_text(fork)
    summary = read_summary(run_dir)
    assert summary.facts["parent"] is None
    assert summary.facts["step"] == 2 and summary.facts["last_state"] == "finished"


def test_a_fork_json_with_a_time_no_float_holds_keeps_its_parent(finished_run, tmp_path) -> None:
    import shutil

    from engine.rundir.summary import read_summary

    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    (run_dir / "fork.json").write_text('{"parent": "p", "step": 1, "time": 1' + "0" * 400 + "}")
    assert read_summary(run_dir).facts["parent"] == {"run": "p", "step": 1, "time": None}


# A checkpoint's plain fields hold what cockpit writes (a checkpoint someone sent you is
# weights-only, but weights-only data can still be any dict or string): each reader gets one line
WRONG_FIELDS = {
    "step a string": ("step", "x"),
    "step negative": ("step", -5),
    "config a list": ("config", []),
    "optim not a table": ("config", {"optim": 3}),
    "tokenizer a number": ("tokenizer", 5),
    "model a list": ("model", [1]),
    "lr scale a string": ("lr_scale", "1"),
    "rng a tensor": ("rng", None),
}


def _with_field(finished_run: Path, tmp_path: Path, case: str) -> tuple[Path, Path]:
    import shutil

    import torch

    run_dir = tmp_path / "run"
    shutil.copytree(finished_run, run_dir)
    (run_dir / "best.pt").unlink(missing_ok=True)
    [path] = run_dir.glob("ckpt-*.pt")
    state = torch.load(path, weights_only=True)
    field, value = WRONG_FIELDS[case]
    state[field] = torch.zeros(2) if value is None else value
    torch.save(state, path)
    return run_dir, path


@pytest.mark.parametrize("case", list(WRONG_FIELDS))
def test_a_checkpoint_field_cockpit_never_writes_is_refused_in_one_line(finished_run, tmp_path, case) -> None:
    from engine.checkpoint.store import CheckpointError, load_checkpoint

    _, path = _with_field(finished_run, tmp_path, case)
    for mmap in (False, True):
        with pytest.raises(CheckpointError) as refused:
            load_checkpoint(path, mmap=mmap)
        line = str(refused.value)
        assert "\n" not in line and str(path) in line and WRONG_FIELDS[case][0] in line
        assert "another checkpoint" in line


def test_sample_fork_and_resume_refuse_such_a_checkpoint_in_one_line(finished_run, tmp_path) -> None:
    run_dir, path = _with_field(finished_run, tmp_path, "step a string")
    for argv in (
        ["sample", str(path), "--tokens", "2"],
        ["fork", str(path), "--no-start", "--set", "train.max_steps=9", "--run-dir", str(tmp_path / "b")],
        ["train", "--headless", "--no-telemetry", "--resume", str(run_dir), "--set", "train.max_steps=4"],
    ):
        done = cockpit_here(*argv)
        lines = (done.stdout + done.stderr).strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1, (argv[0], lines)
        assert str(path) in lines[0] and "step is 'x'" in lines[0], lines
