"""The orthogonalisation bench (bench/orthogonalise.py) on `tiny`: one line per shape of its
block matrices with both times and their ratio, the path Muon takes as gram_is_cheaper says, a
difference between the two results at float32's rounding, and a step's total."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import warm_process

from engine.optim.muon import gram_is_cheaper

ROOT = Path(__file__).resolve().parents[2]
SHAPE = re.compile(
    r"(?P<count>\d+) x \((?P<m>\d+), (?P<n>\d+)\): direct +(?P<direct>[\d.]+) ms, on the Gram matrix"
    r" +(?P<gram>[\d.]+) ms, ratio (?P<ratio>[\d.]+); Muon takes the (?P<taken>Gram|direct) one;"
    r" largest difference (?P<diff>[\d.e+-]+)"
)


def test_one_line_per_shape_and_the_step_total() -> None:
    done = warm_process.run(
        [sys.executable, "bench/orthogonalise.py", "--preset", "tiny", "--rounds", "2", "--repeat", "2"],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    rows = [m.groupdict() for m in SHAPE.finditer(done.stdout)]
    # tiny's blocks (n_embd 32, 2 of them), as Linear weights (out, in): qkv, the attention's
    # projection, the MLP's up and down projections; each shape batched apart
    shapes = [(96, 32), (32, 32), (128, 32), (32, 128)]
    assert sorted((int(r["m"]), int(r["n"])) for r in rows) == sorted(shapes), done.stdout
    assert all(r["count"] == "2" for r in rows), done.stdout
    for row in rows:
        m, n = int(row["m"]), int(row["n"])
        assert (row["taken"] == "Gram") is gram_is_cheaper(m, n, 5)
        assert float(row["diff"]) < 1e-4
        direct, gram, half = float(row["direct"]), float(row["gram"]), 0.005  # printed to 0.01 ms
        assert (gram - half) / (direct + half) - 0.005 <= float(row["ratio"])
        assert float(row["ratio"]) <= (gram + half) / max(direct - half, 1e-9) + 0.005
    assert "a step's orthogonalisation: all direct" in done.stdout
