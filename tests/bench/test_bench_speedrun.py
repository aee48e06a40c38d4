"""The speedrun bench (bench/speedrun.py): its ablation table's medians and spreads over rounds
and seeds, and the ablation run as a script in its smallest mode (`tiny`-sized speedrun-cpu,
two variants, two seeds) printing that table."""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path

import warm_process

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.speedrun import ABLATIONS, Result, ablation_table, summarise  # noqa: E402


def curve(*points: tuple[int, float, float]) -> Result:
    return Result("x", curve=list(points))


def test_time_to_target_is_interpolated_between_the_evaluations_around_it() -> None:
    r = curve((10, 1.0, 2.0), (20, 3.0, 1.8))
    t_eval, t_interp, step = r.time_to(1.9)
    assert (t_eval, step) == (3.0, 20)
    assert math.isclose(t_interp, 2.0)
    assert math.isnan(r.time_to(1.5)[1])


def test_a_variant_row_has_the_median_and_spread_of_its_runs() -> None:
    runs = [
        curve((10, 1.0, 2.0), (20, 2.0, 1.85)),
        curve((10, 2.0, 2.0), (20, 4.0, 1.87)),
        curve((10, 1.5, 2.0), (20, 3.0, 1.95)),  # never reaches 1.9
    ]
    row = summarise("v", runs, 1.9)
    assert (row.runs, row.reached, row.step_to) == (3, 2, 20)
    assert row.final_val == (1.87, 1.85, 1.95)
    lo, hi = sorted(
        [1.0 + 1.0 * (2.0 - 1.9) / (2.0 - 1.85), 2.0 + 2.0 * (2.0 - 1.9) / (2.0 - 1.87)]
    )
    assert math.isclose(row.time_to[1], lo) and math.isclose(row.time_to[2], hi)
    assert math.isclose(row.ms_per_step, 150.0)  # median of 100, 200, 150 ms a step
    base = summarise("base", [curve((10, 1.0, 1.8))], 1.9)
    text = "\n".join(ablation_table([base, row], 1.9))
    assert "2/3:" in text  # the runs that reached the target are said
    assert "1.8700 (1.8500-1.9500)" in text


def test_every_technique_of_the_record_is_in_the_ablation() -> None:
    overrides = {o for _, ov in ABLATIONS for o in ov}
    for switch in (
        "model.value_embeds=2",
        "model.unet_skips=true",
        "optim.muon_ns=polar",
        "optim.muon_variant=normuon",
        "optim.cautious_wd=true",
        "train.batch_start=4",
        "train.seq_start=0",  # the preset's sequence warmup, removed
    ):
        assert switch in overrides, switch


def test_the_ablation_prints_its_table_over_seeds(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(
        Path(argparse.__file__).read_text(encoding="utf-8")[:40_000], encoding="utf-8"
    )
    shrink = [
        "model.n_layer=2", "model.n_embd=32", "model.n_head=2", "model.block_size=32",
        "train.max_steps=20", "train.batch_size=8", "schedule.warmup_steps=5",
    ]  # fmt: skip
    args = [
        sys.executable,
        str(ROOT / "bench" / "speedrun.py"),
        "--ablation",
        "--data",
        str(corpus),
    ]
    args += ["--seeds", "2", "--target", "3.6", "--only", "speedrun-cpu", "--only", "- qk_norm"]
    for s in shrink:
        args += ["--set", s]
    out = warm_process.run(args, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "2 seed(s)" in out.stdout
    (base,) = [line for line in out.stdout.splitlines() if line.startswith("speedrun-cpu ")]
    (other,) = [line for line in out.stdout.splitlines() if line.startswith("- qk_norm ")]
    assert re.search(r"\d\.\d{4} \(\d\.\d{4}-\d\.\d{4}\)", base), base
    assert " 1.00 " in base, base  # the baseline against itself
