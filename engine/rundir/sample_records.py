"""A run's samples read back from its metrics.jsonl: every sample record's step, prompt and
text, in file order. Only the lines that start as a sample record are parsed, so a long run's
file is read at the speed of its bytes. Torch-free and textual-free.
"""

from __future__ import annotations

from pathlib import Path

from engine.config import ConfigError, open_regular_file
from engine.rundir.records import parse_record
from engine.rundir.summary import METRICS_NAME

SAMPLE_LINE = b'{"kind":"sample"'


def read_samples(run_dir: Path) -> list[tuple[int, str, str]]:
    """(step, prompt, text) of each sample the run recorded; [] for a run with no metrics file
    (or one that cannot be read). A line cut short or damaged is skipped."""
    samples: list[tuple[int, str, str]] = []
    try:
        with open_regular_file(Path(run_dir) / METRICS_NAME, "a metrics log") as f:
            for line in f:
                if not line.startswith(SAMPLE_LINE):
                    continue
                try:
                    record = parse_record(line)
                except ValueError:
                    continue
                step, prompt, text = record.get("step"), record.get("prompt"), record.get("text")
                if isinstance(step, int) and isinstance(prompt, str) and isinstance(text, str):
                    samples.append((step, prompt, text))
    except (OSError, ConfigError):
        return []
    return samples
