"""config.toml: every key explained, written so it reads back to the same config, and a run's
config.toml replays the run (real headless runs, one from another working directory)."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import fields
from pathlib import Path

import pytest
import tomllib
from command_here import cockpit_here

from engine.config.loading import config_from_dict
from engine.config.presets import discover, load_preset
from engine.config.run_config import SECTIONS, RunConfig
from engine.config.to_toml import config_to_toml


@pytest.mark.parametrize("section", list(SECTIONS))
def test_every_key_of_every_section_has_help(section):
    missing = [f.name for f in fields(SECTIONS[section]) if not f.metadata.get("help", "").strip()]
    assert missing == [], f"[{section}] keys without help=: {missing}"


def test_every_key_is_written_with_its_help_above_it():
    text = config_to_toml(load_preset("tiny"))
    lines = text.splitlines()
    for section, cls in SECTIONS.items():
        start = lines.index(f"[{section}]")
        for f in fields(cls):
            at = next(i for i in range(start, len(lines)) if lines[i].startswith(f"{f.name} = "))
            assert lines[at - 1].startswith("# ") and len(lines[at - 1]) > 3, (section, f.name)


@pytest.mark.parametrize("preset", sorted(discover()))
def test_every_builtin_preset_reads_back_to_the_same_config(preset):
    cfg = load_preset(preset)
    assert config_from_dict(tomllib.loads(config_to_toml(cfg))) == cfg


def test_awkward_values_read_back_exactly():
    cfg = RunConfig(name='quote " and \\ back', description="line\nbreak, tab\t, é, ☃")
    cfg.sample.prompts = ["\n", 'say "hi"', "\\n is not a newline", "\u0007bell"]
    cfg.data.source = "/tmp/dir with spaces/corpus #1.txt"
    cfg.optim.lr = 1e-5
    cfg.optim.eps = 1.5e-12
    cfg.schedule.min_lr = 3.0e-6
    cfg.model.logit_softcap = 30.0
    back = config_from_dict(tomllib.loads(config_to_toml(cfg, header="a\n\nheader")))
    assert back == cfg


def _step_losses(run_dir: Path) -> list[tuple[int, float]]:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"]) for r in records if r["kind"] == "step"]


def _cockpit(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "TERM": "dumb", "PYTHONPATH": str(repo)}  # runs from another cwd
    return cockpit_here(*args, env=env, cwd=cwd)


def test_a_runs_config_toml_replays_the_run_from_another_directory(tmp_path, some_text):
    # The first run names its corpus relative to where it started ...
    first_cwd, elsewhere = tmp_path / "first", tmp_path / "elsewhere"
    first_cwd.mkdir()
    elsewhere.mkdir()
    (first_cwd / "corpus.txt").write_text(some_text.read_text()[:100_000])
    a = _cockpit(
        first_cwd, "train", "--headless", "--preset", "tiny", "--set", "train.max_steps=8",
        "--set", "optim.lr=2e-3", "--set", "data.source=corpus.txt", "--run-dir", "A",
    )  # fmt: skip
    assert a.returncode == 0, a.stderr
    run_a = first_cwd / "A"
    replay = tomllib.loads((run_a / "config.toml").read_text())
    assert replay["data"]["source"] == str(first_cwd / "corpus.txt")  # ... the record is absolute

    # ... so its config.toml, run from a directory without corpus.txt, trains the same run.
    b = _cockpit(
        elsewhere, "train", "--headless", "--preset", str(run_a / "config.toml"), "--run-dir", "B"
    )
    assert b.returncode == 0, b.stderr
    run_b = elsewhere / "B"
    assert json.loads((run_b / "config.json").read_text()) == json.loads(
        (run_a / "config.json").read_text()
    )
    losses = _step_losses(run_a)
    assert [step for step, _ in losses] == list(range(1, 9))
    assert _step_losses(run_b) == losses  # CPU, same seed: the same run, bit for bit
