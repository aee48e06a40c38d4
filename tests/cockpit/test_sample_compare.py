"""`cockpit sample RUN --compare OTHER...`: the same prompt, settings and seed sampled from two
tiny runs trained here, printed as one table (a block per source when piped, a column each on a
wide terminal)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from command_here import cockpit_here
from run_copies import train_here

from cockpit.cli.sample_compare import columns, table

PROMPT = "def "


@pytest.fixture(scope="module")
def runs(
    tmp_path_factory: pytest.TempPathFactory, isolated_env: dict[str, str]
) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("compare")
    sets = ["sample.interval=0", "eval.interval=0"]
    short = train_here(base / "short", [*sets, "train.max_steps=4"], isolated_env)
    long = train_here(base / "long", [*sets, "train.max_steps=30"], isolated_env)
    return short, long


def sample(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    done = cockpit_here("sample", *args, env=env)
    return done.returncode, done.stdout, done.stderr


def test_the_same_prompt_and_seed_from_each_run_in_one_table(runs, isolated_env) -> None:
    short, long = runs
    opts = ["--prompt", PROMPT, "--tokens", "24", "--seed", "7", "--device", "cpu"]
    code, out, err = sample(isolated_env, str(short), "--compare", str(long), *opts)
    assert code == 0, err
    alone = [sample(isolated_env, str(run), *opts)[1].removesuffix("\n") for run in (short, long)]
    # piped: the prompt, then a block per source, each the text that source gives alone
    assert out.splitlines() == [
        "prompt 'def '",
        "── short @ 4 ──",
        *alone[0].splitlines(),
        "── long @ 30 ──",
        *alone[1].splitlines(),
    ]
    assert alone[0] != alone[1]  # the same seed: the difference is the models'
    assert err.count("cockpit sample: ") == 2  # a header for each source, on stderr


def test_a_checkpoint_and_the_default_prompts(runs, isolated_env) -> None:
    short, long = runs
    ckpt = sorted(long.glob("ckpt-*.pt"))[-1]
    code, out, err = sample(isolated_env, str(long), "--compare", str(ckpt), "--tokens", "8",
                            "--temperature", "0", "--device", "cpu")  # fmt: skip
    assert code == 0, err
    assert f"── long/{ckpt.name} @ 30 ──" in out
    assert out.count("prompt ") >= 1 and out.count("── long @ 30 ──") == out.count("prompt ")


def test_bad_compare_inputs_are_one_line(runs, isolated_env, tmp_path: Path) -> None:
    short, _ = runs
    for argv, message in [
        ([str(short), "--compare", str(short), "--interactive"], "--compare and --interactive"),
        ([str(short), "--compare", str(tmp_path / "nowhere")], "no such run directory"),
    ]:
        code, out, err = sample(isolated_env, *argv)
        assert code == 2 and out == "", (argv, err)
        assert err.startswith("cockpit: ") and err.count("\n") == 1 and message in err, err


def test_columns_on_a_wide_terminal() -> None:
    lines = columns(["a @ 1", "b @ 2"], ["def f(x):\n    return x", "def g"], 40)
    column = (40 - 3) // 2  # 18 each, " │ " between
    assert lines == [
        "a @ 1".ljust(column) + " │ b @ 2",
        "─" * column + "─┼─" + "─" * column,
        "def f(x):".ljust(column) + " │ def g",
        "    return x".ljust(column) + " │",
    ]
    narrow = table(["'def '"], ["a", "b"], [["x", "y"]], 40)  # columns of 18: blocks instead
    assert narrow.splitlines() == ["prompt 'def '", "── a ──", "x", "── b ──", "y"]


def test_the_seed_line_repeats_the_whole_table(runs, isolated_env) -> None:
    short, long = runs
    code, out, err = sample(isolated_env, str(short), "--compare", str(long), "--tokens", "12",
                            "--device", "cpu")  # fmt: skip
    assert code == 0, err
    seed_line = err.splitlines()[-1]
    assert seed_line.startswith("seed ") and f"--compare {long} " in seed_line
    again = shlex.split(seed_line.split(": ", 1)[1])
    assert again[:2] == ["cockpit", "sample"]
    assert sample(isolated_env, *again[2:])[1] == out
