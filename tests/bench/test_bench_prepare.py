"""The corpus-preparation bench (bench/prepare.py) at a tiny size: it generates a corpus outside
the repository, measures cockpit's preparation and tiktoken's batch encoder in child processes,
and prints plausible figures; bad arguments are one line, never a traceback."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import warm_process

ROOT = Path(__file__).resolve().parents[2]
FIGURES = re.compile(
    r"^(?P<label>cockpit prepare|tiktoken batch)\s+(?P<s>[\d.]+) s\s+(?P<mbs>[\d.]+) MB/s\s+"
    r"(?P<tps>[\d,]+) tokens/s\s+(?P<tokens>[\d,]+) tokens\s+peak RSS\s+(?P<peak>[\d,]+) MB\s+"
    r"above baseline\s+(?P<above>-?[\d,]+) MB",
    re.MULTILINE,
)


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    """The bench as a script, forked warm (its measurements run in child processes of its own)."""
    return warm_process.run(
        [sys.executable, "-m", "bench.prepare", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )


def number(raw: str) -> float:
    return float(raw.replace(",", ""))


def test_bench_prints_both_measurements_and_the_ratio(tiktoken_cache: Path, tmp_path: Path) -> None:
    done = bench("--size", "2MB", "--threads", "2", "--dir", str(tmp_path), "--keep")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    figures = {m["label"]: m for m in FIGURES.finditer(done.stdout)}
    assert set(figures) == {"cockpit prepare", "tiktoken batch"}, done.stdout
    for m in figures.values():
        assert number(m["mbs"]) > 0 and number(m["tps"]) > 0
        assert 300_000 < number(m["tokens"]) < 1_000_000  # ~3.3 bytes a token for GPT-2's BPE
        assert 10 < number(m["peak"]) < 1500
    # the same text, tokenized by both: the counts agree but for chunk-boundary effects
    ours, theirs = (number(figures[k]["tokens"]) for k in ("cockpit prepare", "tiktoken batch"))
    assert abs(ours - theirs) <= 0.01 * theirs
    ratio = re.search(r"ratio cockpit/tiktoken ([\d.]+) \(goal >= 0\.9\): (met|not met)", done.stdout)
    assert ratio is not None and float(ratio[1]) > 0, done.stdout
    assert re.search(r"cockpit peak RSS [\d,]+ MB < 1,500 MB \(goal\): (yes|no)", done.stdout)
    # --keep leaves the corpus (about 2 MB, whole lines) and nothing else; a rerun reuses it
    kept = list(tmp_path.iterdir())
    assert [p.name for p in kept] == ["corpus-2MB-seed0.txt"]
    assert abs(kept[0].stat().st_size - 2_000_000) < 1000
    assert kept[0].read_bytes().endswith(b"\n")
    again = bench("--size", "2MB", "--threads", "1", "--dir", str(tmp_path))
    assert again.returncode == 0, again.stderr
    assert "reusing" in again.stdout and "ratio cockpit/tiktoken" in again.stdout
    assert list(tmp_path.iterdir()) == []  # without --keep the corpus goes


def test_jsonl_corpus_is_one_document_per_line(tiktoken_cache: Path, tmp_path: Path) -> None:
    done = bench("--size", "1MB", "--format", "jsonl", "--dir", str(tmp_path), "--keep")
    assert done.returncode == 0, done.stderr
    assert len(FIGURES.findall(done.stdout)) == 2
    lines = (tmp_path / "corpus-1MB-seed0.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) > 100 and all(line.startswith('{"text": "') for line in lines)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--size", "lots"], "cockpit: --size 'lots' is not a size; write e.g. 2GB"),
        (["--size", "2MB", "--threads", "0"], "cockpit: --threads 0 is below 1"),
        (["--size", "2MB", "--dir", str(ROOT / "bench")], "is inside the repository"),
    ],
)
def test_bad_arguments_are_one_line(args: list[str], message: str) -> None:
    done = bench(*args)
    assert done.returncode == 2
    assert message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
