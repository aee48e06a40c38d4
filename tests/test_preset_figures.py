"""A preset's memory figure is what `cockpit plan` prints for it.

local-300m's description said 'planned 17.8 GiB' where `cockpit plan --preset local-300m
--device-memory 24GB` printed 17.68. Every preset whose description (or row in
docs/guide/presets.md) quotes a planned peak is planned here, on the GPU size it names, and the
figure must be the plan's as printed.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
import warm_process

from engine.config.presets import discover

REPO = Path(__file__).resolve().parents[1]
PLANNED = re.compile(r"planned (\d+(?:\.\d+)?) GiB")
GPU_SIZE = re.compile(r"(\d+) GB GPU")
PRESETS_PAGE = REPO / "docs" / "guide" / "presets.md"


def quoted_plans() -> list[tuple[str, str, str]]:
    """(preset, where, the text quoting its plan) for every description and presets.md row that
    quotes one."""
    quoted = []
    for name, info in sorted(discover().items()):
        if info.origin == "built-in" and PLANNED.search(info.description):
            quoted.append((name, "description", info.description))
    for line in PRESETS_PAGE.read_text(encoding="utf-8").splitlines():
        row = re.match(r"\| `([\w-]+)` \|", line)
        if row and PLANNED.search(line):
            quoted.append((row.group(1), "docs/guide/presets.md", line))
    return quoted


def planned_peak(preset: str, gigabytes: str) -> str:
    done = warm_process.run(
        [sys.executable, "-m", "cockpit", "plan", "--preset", preset,
         "--device-memory", f"{gigabytes}GB"],
        capture_output=True, text=True, cwd=REPO, timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    peak = re.search(r"peak \(estimate\)\s+(\d+(?:\.\d+)?) GiB", done.stdout)
    assert peak is not None, done.stdout + done.stderr
    return peak.group(1)


def test_some_preset_quotes_its_plan() -> None:
    assert any(where == "description" for _, where, _ in quoted_plans())


@pytest.mark.parametrize(("preset", "where", "text"), quoted_plans(), ids=lambda v: str(v)[:30])
def test_a_quoted_plan_is_the_planner_s_figure(preset: str, where: str, text: str) -> None:
    gpu = GPU_SIZE.search(text)
    assert gpu is not None, f"{preset}'s {where} quotes a plan without the GPU size it is for"
    quoted = PLANNED.search(text)
    assert quoted is not None
    printed = planned_peak(preset, gpu.group(1))
    assert quoted.group(1) == printed, (
        f"{preset}'s {where} says planned {quoted.group(1)} GiB; `cockpit plan --preset {preset} "
        f"--device-memory {gpu.group(1)}GB` prints {printed} GiB"
    )
