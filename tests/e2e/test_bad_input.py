"""The bad-input catalogue: each mistake is one line naming the problem and the fix, no
traceback, and nothing already on disk is lost."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest
import torch
import warm_process
from run_copies import copy_run, train_here
from tiny import set_args, tiny_overrides

from cockpit.cli import main

OVERRIDES = tiny_overrides("sample.max_new_tokens=4", "train.max_steps=4")
TINY = [*set_args(OVERRIDES), "--no-telemetry"]


def run_cli(capsys, *args: str) -> tuple[int, str]:
    code = main(["train", "--headless", *args])
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert "Traceback" not in text
    return code, text


def write(path, content: str | bytes):
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return str(path)


# (name, preset TOML body, --set overrides, expected text)
PRESET_CASES = [
    ("malformed toml", "[model\nn_layer = 2\n", [], "malformed TOML"),
    ("unknown key", "[model]\nlayers = 2\n", [], "unknown key 'layers'"),
    ("unknown section", "[optimizer]\nlr = 1\n", [], "unknown key 'optimizer'"),
    ("wrong type", "[train]\nmax_steps = 'many'\n", [], "train.max_steps: expected an integer"),
    ("negative lr", "[optim]\nlr = -3e-4\n", [], "optim.lr: expected a value > 0.0"),
    ("zero lr", "[optim]\nlr = 0.0\n", [], "optim.lr: expected a value > 0.0"),
    ("block size 0", "[model]\nblock_size = 0\n", [], "model.block_size: expected a value >= 1"),
    (
        "embd not divisible",
        "[model]\nn_embd = 30\nn_head = 4\n",
        [],
        "must be divisible by model.n_head",
    ),
    ("dropout 1", "[model]\ndropout = 1.0\n", [], "model.dropout: expected a value < 1.0"),
    ("negative dropout", "[model]\ndropout = -0.1\n", [], "model.dropout: expected a value >= 0.0"),
    ("unknown optimizer", "[optim]\nname = 'adamx'\n", [], "optim.name: expected one of"),
    ("unknown switch value", "[model]\nnorm = 'batchnorm'\n", [], "model.norm: expected one of"),
    (
        "min_lr above lr",
        "[optim]\nlr = 1e-4\n[schedule]\nmin_lr = 1e-3\n",
        [],
        "must not exceed optim.lr",
    ),
    ("set without =", "", ["--set", "optim.lr"], "expected KEY=VALUE"),
    ("set unknown key", "", ["--set", "optim.learning_rate=1e-3"], "unknown key 'learning_rate'"),
    (
        "set bad value",
        "",
        ["--set", "train.max_steps=lots"],
        "train.max_steps: expected an integer",
    ),
    ("set ambiguous key", "", ["--set", "interval=5"], "ambiguous key"),
    # numpy's "ValueError: Seed must be between 0 and 2**32 - 1", exit 1, once the run had started
    ("negative seed", "[train]\nseed = -1\n", [], "train.seed: expected a value >= 0, got -1"),
    (
        "seed too large",
        "",
        ["--set", "train.seed=4294967296"],
        "train.seed: expected a value <= 4294967295, got 4294967296",
    ),
    (
        "temperature too small",
        "[sample]\ntemperature = 1e-300\n",
        [],
        "sample.temperature: expected a value >= 1e-06",
    ),
]


@pytest.mark.parametrize(
    "name, body, extra, expected", PRESET_CASES, ids=[c[0] for c in PRESET_CASES]
)
def test_bad_presets_and_overrides(tmp_path, capsys, name, body, extra, expected):
    preset = write(tmp_path / "mine.toml", body)
    code, text = run_cli(capsys, "--preset", preset, "--run-dir", str(tmp_path / "run"), *extra)
    assert code == 2
    assert expected in text
    assert len(text.strip().splitlines()) == 1


DATA_CASES = [
    ("missing file", None, "no such file"),
    ("empty corpus", "", "empty"),
    ("whitespace corpus", "   \n\n  ", "only whitespace"),
    ("shorter than block", "abc", "block_size"),
    ("binary file", b"\x00\x01\x02\xff\xfe" * 100, "UTF-8"),
    ("latin-1 file", "caf\xe9 ".encode("latin-1") * 200, "UTF-8"),
]


@pytest.mark.parametrize("name, content, expected", DATA_CASES, ids=[c[0] for c in DATA_CASES])
def test_bad_corpora(tmp_path, capsys, monkeypatch, name, content, expected):
    cache = tmp_path / "cache"
    monkeypatch.setenv("COCKPIT_CACHE_DIR", str(cache))
    corpus = tmp_path / "corpus.txt"
    if content is not None:
        write(corpus, content)
    code, text = run_cli(
        capsys, "--preset", "tiny", "--data", str(corpus), "--run-dir", str(tmp_path / "run"), *TINY
    )
    # a path that names nothing is refused before the run; what is inside, by the run before it
    # trains: a refusal too (exit 2, its one line), never a "failed at step 0" report
    assert code == 2 and "failed at step" not in text
    assert expected.lower() in text.lower()
    assert str(corpus) in text
    # a corpus refused while it was read left an empty directory (its lock alone) in the cache
    left = sorted(p.name for p in cache.iterdir()) if cache.exists() else []
    assert all((cache / name / "meta.json").is_file() for name in left), left


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, isolated_env) -> Path:
    """A finished tiny run, trained once for the module: the tests take up copies of it."""
    run_dir = tmp_path_factory.mktemp("bad-input") / "run"
    return train_here(run_dir, OVERRIDES, isolated_env)


@pytest.fixture
def run_dir(tiny_run, tmp_path) -> str:
    """This test's own copy of the module's tiny run, as if trained in `tmp_path / "run"`."""
    return str(copy_run(tiny_run, tmp_path / "run"))


def test_truncated_checkpoint_is_refused_and_kept(run_dir, capsys):
    latest = sorted(os.listdir(run_dir))
    path = os.path.join(run_dir, [p for p in latest if p.startswith("ckpt-")][-1])
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) // 2])
    code, text = run_cli(capsys, "--resume", path)
    assert code == 2 and "truncated or not a cockpit checkpoint" in text
    assert len(text.strip().splitlines()) == 1
    assert os.path.getsize(path) == len(data) // 2  # nothing deleted or overwritten


def test_foreign_file_as_checkpoint(tmp_path, capsys):
    path = tmp_path / "weights.pt"
    torch.save({"state_dict": {}}, path)
    code, text = run_cli(capsys, "--resume", str(path))
    assert code == 2 and "not a cockpit checkpoint" in text


# (--set on resume, expected text): refused before anything starts, exit 2 like a fresh run
RESUME_CASES = [
    ("model.n_embd=32", "cannot change model.n_embd on resume (16 -> 32)"),
    ("model.mlp=relu2", "cannot change model.mlp on resume ('gelu' -> 'relu2')"),
    ("model.norm=rmsnorm", "cannot change model.norm on resume ('layernorm' -> 'rmsnorm')"),
    ("data.tokenizer=r50k_base", "cannot change data.tokenizer on resume"),
    ("train.seed=7", "cannot change train.seed on resume (1337 -> 7)"),
    ("optim.lr=abc", "optim.lr: expected a number, got 'abc'"),
    ("schedule.min_lr=1", "schedule.min_lr (1) must not exceed optim.lr"),
    ("optim.learning_rate=1", "unknown key 'learning_rate'"),
]


@pytest.mark.parametrize("override, expected", RESUME_CASES, ids=[c[0] for c in RESUME_CASES])
def test_refused_changes_on_resume(run_dir, capsys, override, expected):
    before = {name: os.path.getmtime(os.path.join(run_dir, name)) for name in os.listdir(run_dir)}
    code, text = run_cli(
        capsys, "--resume", run_dir, "--set", "train.max_steps=8", "--set", override
    )
    assert code == 2 and expected in text
    assert len(text.strip().splitlines()) == 1
    assert {n: os.path.getmtime(os.path.join(run_dir, n)) for n in os.listdir(run_dir)} == before


def test_run_dir_with_resume_is_refused(run_dir, tmp_path, capsys):
    other = tmp_path / "other"
    code, text = run_cli(
        capsys, "--resume", run_dir, "--run-dir", str(other), "--set", "train.max_steps=8"
    )
    assert code == 2 and "drop --run-dir" in text
    assert len(text.strip().splitlines()) == 1
    assert not other.exists()


def test_resume_of_a_missing_run(tmp_path, capsys):
    code, text = run_cli(capsys, "--resume", str(tmp_path / "nope"))
    assert code == 2 and "no such run directory" in text


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_unwritable_run_directory(tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(stat.S_IRUSR | stat.S_IXUSR)
    code, text = run_cli(capsys, "--preset", "tiny", "--run-dir", str(locked / "run"), *TINY)
    assert code == 2 and "not writable" in text and "failed at step" not in text


def test_run_directory_that_is_a_file(tmp_path, capsys):
    blocker = tmp_path / "blocker"
    blocker.write_text("not a directory")
    code, text = run_cli(capsys, "--preset", "tiny", "--run-dir", str(blocker / "run"), *TINY)
    # refused before training started: exit 2 and its one line, not a "failed at step 0" report
    assert code == 2 and "failed at step" not in text
    assert text.strip().splitlines()[-1] == (
        f"cockpit: run directory {blocker / 'run'} is not writable (Not a directory); pass --run-dir DIR"
    )
    assert blocker.read_text() == "not a directory"


def test_a_corpus_refused_once_read_is_exit_2_and_one_line(tmp_path):
    """Read by the run itself (its bytes are not UTF-8): still a refusal before training, as
    the docs' exit status 2 says (guide/runs.md, Headless); a real CLI process (started warm)."""
    corpus = tmp_path / "latin1.txt"
    corpus.write_bytes("caf\xe9 au lait\n".encode("latin-1") * 200)
    done = warm_process.run(
        [sys.executable, "-m", "cockpit", "train", "--headless", "--preset", "tiny", "--no-telemetry",
         "--data", str(corpus), "--run-dir", str(tmp_path / "run"), *TINY],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2, done
    assert "failed at step" not in done.stdout and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"cockpit: {corpus} is not UTF-8 text (byte 0xe9 at offset 3); convert it to UTF-8, e.g. iconv -f latin1 -t utf-8 IN > OUT"
    ]
    assert not (tmp_path / "run").exists()


def test_unknown_tokenizer(tmp_path, capsys):
    code, text = run_cli(
        capsys,
        "--preset",
        "tiny",
        "--run-dir",
        str(tmp_path / "r"),
        *TINY,
        "--set",
        "data.tokenizer=gpt5",
    )
    assert code == 2 and "gpt5" in text and "failed at step" not in text


def test_unknown_device(tmp_path, capsys):
    code, text = run_cli(
        capsys,
        "--preset",
        "tiny",
        "--run-dir",
        str(tmp_path / "r"),
        *TINY,
        "--set",
        "train.device=tpu",
    )
    assert code == 2 and "train.device" in text and "failed at step" not in text


# (name, what happens to the corpus after the run, extra resume arguments, expected text)
RESUME_CORPUS_CASES = [
    ("corpus moved", "move", [], "is gone (moved or deleted); pass --data NEWPATH"),
    ("corpus edited", "edit", [], "is not the one this run trained on"),
    ("--data other text", "other", [], "is not the one this run trained on"),
    ("--data missing", "keep", ["--data", "/nonexistent/corpus.txt"], "no such file"),
    (
        "vocabulary changed on purpose",
        "recase",
        ["--allow-data-change"],
        "token ids would change meaning",
    ),
]


@pytest.mark.parametrize(
    "name, change, extra, expected", RESUME_CORPUS_CASES, ids=[c[0] for c in RESUME_CORPUS_CASES]
)
def test_resume_on_another_corpus(tmp_path, capsys, name, change, extra, expected):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"line {i}: the cat sat on the mat.\n" for i in range(200)))
    run_dir = tmp_path / "run"
    code, _ = run_cli(
        capsys, "--preset", "tiny", "--data", str(corpus), "--run-dir", str(run_dir), *TINY
    )
    assert code == 0
    other = tmp_path / "other.txt"
    if change == "move":
        corpus.rename(other)
    elif change == "edit":
        corpus.write_text(corpus.read_text().replace("cat", "act"))
    elif change == "other":
        other.write_text(corpus.read_text()[::-1])
        extra = ["--data", str(other)]
    elif change == "recase":
        corpus.write_text(corpus.read_text().upper())
    on_disk = {p.name: p.read_bytes() for p in run_dir.iterdir()}
    code, text = run_cli(capsys, "--resume", str(run_dir), "--set", "train.max_steps=8", *extra)
    assert code == 2
    assert expected in text
    assert len(text.strip().splitlines()) == 1
    assert {p.name: p.read_bytes() for p in run_dir.iterdir()} == on_disk  # nothing touched
