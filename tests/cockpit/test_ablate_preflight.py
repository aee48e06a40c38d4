"""`cockpit ablate` checks every run's command line as `cockpit train` checks its own before
anything trains: a change to a device this machine lacks, or to a tokenizer that cannot be
loaded offline, is refused up front, one line per refused change, nothing trained (the series
trained its baseline first and only then refused that run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cockpit.cli import main

QUICK = ["--headless", "--no-telemetry", "--preset", "tiny", "--steps", "2"]


@pytest.fixture
def no_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.fixture
def offline_bpe(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No tiktoken file cached, and no network to download one from."""
    import tiktoken.load
    import tiktoken.registry

    def no_network(blobpath: str) -> bytes:
        raise ConnectionError(f"no network to fetch {blobpath}")

    empty = tmp_path / "empty-tiktoken-cache"
    empty.mkdir()
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(empty))
    monkeypatch.setattr(tiktoken.load, "read_file", no_network)
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})  # none loaded in this process


def ablate(capsys, runs: Path, *args: str) -> tuple[int, list[str]]:
    code = main(["ablate", *QUICK, "--runs", str(runs), *args])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    return code, captured.err.splitlines()


def test_changes_a_run_could_not_start_are_refused_before_anything_trains(capsys, tmp_path, no_cuda, offline_bpe):
    runs = tmp_path / "runs"
    code, lines = ablate(
        capsys, runs,
        "--change", "train.device=cuda", "--change", "data.tokenizer=gpt2", "--change", "optim.lr=2e-3",
    )  # fmt: skip
    assert code == 2
    assert len(lines) == 2, lines
    assert lines[0] == (
        "cockpit ablate: ablate 2/4: train.device=cuda: train.device: CUDA is not available on this "
        "machine; use --set train.device=auto"
    )
    assert lines[1].startswith("cockpit ablate: ablate 3/4: data.tokenizer=gpt2: tiktoken could not load the gpt2 encoding")
    assert "set TIKTOKEN_CACHE_DIR" in lines[1]
    assert not runs.exists() or not any(runs.rglob("metrics.jsonl"))  # the baseline did not train


def test_a_refusal_of_every_run_is_said_once(capsys, tmp_path, no_cuda):
    runs = tmp_path / "runs"
    code, lines = ablate(
        capsys, runs, "--set", "train.device=cuda", "--change", "optim.lr=2e-3", "--change", "optim.lr=1e-3"
    )
    assert code == 2
    assert lines == [
        "cockpit ablate: ablate 1/3: baseline (and 2 more runs): train.device: CUDA is not available "
        "on this machine; use --set train.device=auto"
    ]
    assert not runs.exists() or not any(runs.rglob("metrics.jsonl"))


def test_cockpit_train_refuses_them_before_the_run_too(capsys, tmp_path, no_cuda, offline_bpe):
    for setting, said in (
        ("train.device=cuda", "cockpit: train.device: CUDA is not available on this machine"),
        ("data.tokenizer=gpt2", "cockpit: tiktoken could not load the gpt2 encoding"),
    ):
        run_dir = tmp_path / setting.partition("=")[0]
        code = main(["train", "--headless", "--no-telemetry", "--preset", "tiny", "--set", setting, "--run-dir", str(run_dir)])
        err = capsys.readouterr().err
        assert code == 2
        assert err.startswith(said) and err.count("\n") == 1, err
        assert not run_dir.exists()
