"""A run remembers its corpus: resume trains on the same text with no flag, follows a moved copy
given with --data when its sha256 matches, and refuses a changed corpus or vocabulary with one
line naming both hashes and the override. Driven through the real CLI (exit codes, messages)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch
from tiny import set_args, tiny_overrides

from cockpit.cli import main
from engine.checkpoint import store as ckpt

TINY = [*set_args(tiny_overrides(quiet=True)), "--no-telemetry"]

# Characters that neither pydoc's text nor Tiny Shakespeare's vocabulary has in this order and
# number: a resume on the wrong corpus cannot pass for the right one.
CORPUS = "".join(
    f"the quick brown fox {i} jumps over the lazy dog; ZEBRA quartz #{i * 7 % 13}!\n"
    for i in range(150)
)


def cli(capsys, *args: str) -> tuple[int, str]:
    code = main(["train", "--headless", *args])
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert "Traceback" not in text
    return code, text


def records(run_dir: Path, kind: str) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == kind]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def first_run(capsys, tmp_path: Path, corpus: Path, *extra: str, steps: int = 4) -> Path:
    run_dir = tmp_path / "run"
    code, text = cli(
        capsys,
        "--preset",
        "tiny",
        "--data",
        str(corpus),
        "--run-dir",
        str(run_dir),
        *TINY,
        "--set",
        f"train.max_steps={steps}",
        *extra,
    )
    assert code == 0, text
    return run_dir


def resume(capsys, run_dir: Path, *extra: str, steps: int = 8) -> tuple[int, str]:
    return cli(capsys, "--resume", str(run_dir), "--set", f"train.max_steps={steps}", *extra)


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    path = tmp_path / "texts" / "corpus.txt"
    path.parent.mkdir()
    path.write_text(CORPUS)
    return path


def test_the_run_records_its_corpus(tmp_path, capsys, corpus):
    run_dir = first_run(capsys, tmp_path, corpus)
    expected = {"source": "path", "path": str(corpus.resolve()), "sha256": sha256(corpus)}
    started = records(run_dir, "run_started")[0]
    assert expected.items() <= started["data_source"].items()
    assert started["data_source"]["tokenizer"] == "char"
    # config.json names the file itself, so it says what was trained on
    assert json.loads((run_dir / "config.json").read_text())["data"]["source"] == str(corpus)
    state = ckpt.load_checkpoint(run_dir)
    assert expected.items() <= state["data_source"].items()
    assert state["config"]["data"]["source"] == str(corpus)


def test_resume_with_no_flag_continues_on_the_same_tokens(tmp_path, capsys, corpus):
    straight = tmp_path / "straight"
    code, text = cli(
        capsys,
        "--preset",
        "tiny",
        "--data",
        str(corpus),
        "--run-dir",
        str(straight),
        *TINY,
        "--set",
        "train.max_steps=8",
    )
    assert code == 0, text
    run_dir = first_run(capsys, tmp_path, corpus)
    code, text = resume(capsys, run_dir)
    assert code == 0, text
    first, resumed = records(run_dir, "run_started")
    assert resumed["train_tokens"] == first["train_tokens"]
    assert resumed["vocab_size"] == first["vocab_size"]
    assert resumed["data_source"] == first["data_source"]
    losses = {r["step"]: r["loss"] for r in records(run_dir, "step")}
    assert losses == {r["step"]: r["loss"] for r in records(straight, "step")}


def test_a_moved_corpus_is_named_then_followed_with_data(tmp_path, capsys, corpus):
    run_dir = first_run(capsys, tmp_path, corpus)
    moved = tmp_path / "elsewhere" / "renamed.txt"
    moved.parent.mkdir()
    shutil.move(corpus, moved)
    before = sorted(p.name for p in run_dir.iterdir())
    metrics_before = (run_dir / "metrics.jsonl").read_bytes()

    code, text = resume(capsys, run_dir)
    assert code == 2
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    assert str(corpus) in lines[0] and "--data NEWPATH" in lines[0] and sha256(moved) in lines[0]
    assert sorted(p.name for p in run_dir.iterdir()) == before  # nothing touched
    assert (run_dir / "metrics.jsonl").read_bytes() == metrics_before

    code, text = resume(capsys, run_dir, "--data", str(moved))
    assert code == 0, text
    assert "moved" in text and str(moved) in text
    resumed = records(run_dir, "run_started")[-1]
    assert resumed["data_source"]["path"] == str(moved)
    assert any(str(moved) in note for note in resumed.get("notes", [])) or any(
        str(moved) in a["message"] for a in records(run_dir, "alert")
    )
    # the new place is recorded: the next resume needs no flag
    code, text = resume(capsys, run_dir, steps=10)
    assert code == 0, text
    assert ckpt.load_checkpoint(run_dir)["data_source"]["path"] == str(moved)


def test_an_edited_corpus_is_refused_with_both_hashes(tmp_path, capsys, corpus):
    run_dir = first_run(capsys, tmp_path, corpus)
    old = sha256(corpus)
    corpus.write_text(CORPUS.replace("lazy", "sleepy"))  # sed on the file, same path
    new = sha256(corpus)
    checkpoints = sorted(p.name for p in run_dir.glob("ckpt-*.pt"))
    metrics_before = (run_dir / "metrics.jsonl").read_bytes()

    code, text = resume(capsys, run_dir)
    assert code == 2
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    assert old in lines[0] and new in lines[0] and "--allow-data-change" in lines[0]
    assert sorted(p.name for p in run_dir.glob("ckpt-*.pt")) == checkpoints
    assert (run_dir / "metrics.jsonl").read_bytes() == metrics_before

    # On purpose: the same characters, so every token id keeps its meaning.
    code, text = resume(capsys, run_dir, "--allow-data-change")
    assert code == 0, text
    assert old in text and new in text
    assert records(run_dir, "run_started")[-1]["data_source"]["sha256"] == new
    assert ckpt.load_checkpoint(run_dir)["data_source"]["sha256"] == new


def test_a_changed_character_vocabulary_is_refused_even_on_purpose(tmp_path, capsys, corpus):
    run_dir = first_run(capsys, tmp_path, corpus)
    corpus.write_text(CORPUS.replace("e", "E").replace("Z", "@"))  # ids change meaning
    for extra in ((), ("--allow-data-change",)):
        code, text = resume(capsys, run_dir, *extra)
        assert code == 2, text
        assert len(text.strip().splitlines()) == 1, text
        assert "vocabulary" in text if extra else "--allow-data-change" in text
        assert "size mismatch" not in text and "shape" not in text


def test_a_bpe_run_resumes_on_its_own_file_not_pydoc(tmp_path, capsys, corpus, tiktoken_cache):
    corpus.write_text(CORPUS * 3)
    run_dir = first_run(capsys, tmp_path, corpus, "--set", "data.tokenizer=r50k_base")
    code, text = resume(capsys, run_dir)
    assert code == 0, text
    first, resumed = records(run_dir, "run_started")
    assert resumed["train_tokens"] == first["train_tokens"]
    assert resumed["data_source"]["path"] == str(corpus)
    assert resumed["data_source"]["tokenizer"] == "r50k_base"


def test_tinyshakespeare_offline_resumes_from_the_recorded_copy(
    tmp_path, capsys, some_text, monkeypatch
):
    # a local copy of the corpus is taken as it is (edited or not: test_data.py), so any text will do
    copy = tmp_path / "copy" / "input.txt"
    copy.parent.mkdir()
    shutil.copy(some_text, copy)
    monkeypatch.delenv("COCKPIT_TINYSHAKESPEARE", raising=False)
    run_dir = first_run(capsys, tmp_path, copy, "--set", "data.source=tinyshakespeare", steps=2)
    started = records(run_dir, "run_started")[0]["data_source"]
    assert started["source"] == "tinyshakespeare" and started["path"] == str(copy)
    # offline, no --data, no environment variable: the recorded copy is used
    monkeypatch.setattr("engine.data.tinyshakespeare.DOWNLOAD_TIMEOUT_S", 0.01)
    code, text = resume(capsys, run_dir, steps=4)
    assert code == 0, text
    assert records(run_dir, "run_started")[-1]["data_source"]["path"] == str(copy)
    # the copy gone too, nothing to download: where it was and what to pass
    moved = tmp_path / "moved.txt"
    shutil.move(copy, moved)
    code, text = resume(capsys, run_dir, steps=6)
    assert code == 2 and len(text.strip().splitlines()) == 1, text
    assert str(copy) in text and "--data NEWPATH" in text and sha256(moved) in text
    code, text = resume(capsys, run_dir, "--data", str(moved), steps=6)
    assert code == 0, text


def test_a_checkpoint_from_before_recording_falls_back_to_its_data_meta(tmp_path, capsys, corpus):
    run_dir = first_run(capsys, tmp_path, corpus)
    # What older versions wrote: no data_source, the preset's source in the config.
    path = ckpt.latest_checkpoint(run_dir)
    state = torch.load(path, weights_only=True)
    del state["data_source"]
    state["config"]["data"]["source"] = "pydoc"
    torch.save(state, path)

    code, text = resume(capsys, run_dir)
    assert code == 0, text
    assert "does not record its corpus" in text
    resumed = records(run_dir, "run_started")[-1]
    assert resumed["data_source"]["path"] == str(corpus)
    assert resumed["train_tokens"] == records(run_dir, "run_started")[0]["train_tokens"]


def test_a_folder_corpus_that_moved_resumes_from_its_new_place(tmp_path, capsys):
    folder = tmp_path / "texts"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text(CORPUS)
    (folder / "sub" / "b.md").write_text(CORPUS[::-1])
    run_dir = first_run(capsys, tmp_path, folder)
    record = records(run_dir, "run_started")[0]["data_source"]
    assert record["source"] == "path" and record["path"] == str(folder)
    moved = tmp_path / "archive" / "texts"
    moved.parent.mkdir()
    shutil.move(folder, moved)
    code, text = resume(capsys, run_dir)
    assert code == 2 and str(folder) in text and record["sha256"] in text
    code, text = resume(capsys, run_dir, "--data", str(moved))
    assert code == 0, text
    assert records(run_dir, "run_started")[-1]["data_source"]["path"] == str(moved)


def test_allow_data_change_without_resume_is_refused(tmp_path, capsys, corpus):
    code, text = cli(
        capsys,
        "--preset",
        "tiny",
        "--data",
        str(corpus),
        "--run-dir",
        str(tmp_path / "r"),
        "--allow-data-change",
        *TINY,
    )
    assert code == 2 and "--allow-data-change applies to --resume" in text
    assert not (tmp_path / "r").exists()
