"""One fact, one place: durations, the ended states and the default preset name are each
defined once and used by the app, the headless CLI and the engine alike."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import cockpit
import engine
from cockpit.cli.headless import ProgressPrinter
from cockpit.figures.durations import fmt_duration
from engine.events import Eval

SOURCES = [
    path
    for package in (cockpit, engine)
    for path in sorted(Path(package.__file__).parent.rglob("*.py"))
]


def _string_literals(path: Path) -> list[str]:
    tokens = tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline)
    return [t.string for t in tokens if t.type == tokenize.STRING]


def test_headless_lines_write_durations_as_the_panels_do() -> None:
    lines: list[str] = []
    printer = ProgressPrinter(out=lines.append)
    for train_time in (18.0, 754.0, 2 * 86400 + 3 * 3600):
        printer(Eval(step=500, train_loss=2.26, val_loss=2.27, train_time_s=train_time))
    assert [line.rsplit("train time ", 1)[1] for line in lines] == ["18s", "12:34", "2d 03h"]
    assert lines[0].endswith(f"train time {fmt_duration(18.0)}")


def test_the_ended_states_are_spelled_out_only_in_run_state() -> None:
    # RunState.ENDED is the one list: a literal ("stopped", "finished", ...) elsewhere drifts
    ended = r"""["'](stopped|finished|failed)["']"""
    literal_list = re.compile(ended + r"\s*,\s*" + ended)
    spelled = [
        path.name for path in SOURCES if literal_list.search(path.read_text(encoding="utf-8"))
    ]
    assert spelled == []


def test_the_default_preset_name_is_written_once() -> None:
    # engine.config.presets.DEFAULT_PRESET; plotext_frame's "default" is plotext's colour, not a preset
    writers = [
        path.name
        for path in SOURCES
        if path.name not in ("presets.py", "plotext_frame.py")
        and any(s in ('"default"', "'default'") for s in _string_literals(path))
    ]
    assert writers == []
