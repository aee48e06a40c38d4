"""Pure pieces of the panels: formatting, the memory bar, status-line fitting, samples."""

from __future__ import annotations

from textual.content import Content

from cockpit.figures.durations import fmt_duration
from cockpit.figures.numbers import (
    fmt_bytes,
    fmt_gib_pair,
    fmt_loss,
    fmt_lr,
    fmt_lr_tick,
    fmt_si,
    fmt_tick,
)
from cockpit.widgets.memory import allocate_cells
from cockpit.widgets.samples import format_sample
from cockpit.widgets.status import Segment, fit_segments


def test_formatting() -> None:
    assert fmt_si(14_400) == "14.4k"
    assert fmt_si(999) == "999"
    assert fmt_si(2_500_000) == "2.50M"
    assert fmt_si(810_000) == "810k"
    assert fmt_si(None) == "-"
    assert fmt_tick(1500) == "1.5k" and fmt_tick(2000) == "2k" and fmt_tick(250) == "250"
    assert fmt_lr(3e-4) == "3.00e-4" and fmt_lr(None) == "-"
    assert fmt_lr_tick(5e-4) == "5e-4" and fmt_lr_tick(1.2e-3) == "1.2e-3"
    assert fmt_loss(float("nan")) == "NaN" and fmt_loss(1.23456) == "1.2346"
    assert fmt_bytes(1536) == "1.5 KiB" and fmt_bytes(3 * 2**30) == "3 GiB"
    assert fmt_gib_pair(61.3 * 2**30, 80 * 2**30) == "61.3/80.0 GiB"
    assert fmt_duration(42) == "42s"
    assert fmt_duration(754) == "12:34"
    assert fmt_duration(3 * 3600 + 2 * 60 + 15) == "3:02:15"
    assert fmt_duration(2 * 86400 + 3 * 3600) == "2d 03h"
    assert fmt_duration(None) == "-"


def test_memory_cells_give_every_nonzero_part_a_cell() -> None:
    # raw cells 0.1, 0, 9.8, 0.1 -> largest remainder gives [0, 0, 10, 0]; then the two tiny
    # parts take one cell each from the largest.
    assert allocate_cells([1, 0, 98, 1], 10) == [1, 0, 8, 1]
    assert allocate_cells([1, 1, 2], 4) == [1, 1, 2]
    assert sum(allocate_cells([3, 5, 7, 11, 13], 37)) == 37
    assert allocate_cells([0, 0], 10) == [0, 0]


def test_fit_segments_drops_least_important_first() -> None:
    segs = [Segment(Content("AAAA"), 0), Segment(Content("BBBB"), 5), Segment(Content("CCCC"), 1)]
    assert fit_segments(segs, 80).plain == "AAAA  BBBB  CCCC"
    assert fit_segments(segs, 10).plain == "AAAA  CCCC"
    assert fit_segments(segs, 4).plain == "AAAA"
    assert fit_segments(segs, 3).cell_length <= 3


def test_sample_shows_the_prompt_once_and_keeps_newlines() -> None:
    c = format_sample(1250, "def ", "def main():\n\tpass\x07")
    assert c.plain == "step 1,250\ndef main():\n    pass"
    c2 = format_sample(10, "\n", "hello")
    assert c2.plain == "step 10\n⏎\nhello"


def test_progress_bar() -> None:
    from cockpit.widgets.status import progress_bar

    assert progress_bar(0.0, 8).plain == "────────"
    assert progress_bar(0.5, 8).plain == "━━━━────"
    assert progress_bar(0.0625, 8).plain == "╸───────"
    assert progress_bar(1.2, 8).plain == "━━━━━━━━"


def test_status_badge_has_a_label_for_each_state_the_engine_sends_and_no_other() -> None:
    # a state the engine never emits (e.g. "stopping") is dead code that the badge would lie with
    from cockpit.widgets.status import STATE_LABELS
    from engine.events import RunState

    engine_states = {v for k, v in vars(RunState).items() if k.isupper() and isinstance(v, str)}
    assert set(STATE_LABELS) == engine_states | {"idle"}
    assert all(label == state.upper() for state, label in STATE_LABELS.items())


def test_status_segments_from_the_run_view() -> None:
    from cockpit.app.run_view import RunView, status_segments
    from cockpit.widgets.status import fit_segments

    view = RunView(step=250, max_steps=1000, tokens_per_s=12_300.0, grad_norm=0.91, mfu=0.412)
    view.last_checkpoint = (200, "runs/x/ckpt-000200.pt", "interval")
    running = [s.text.plain for s in status_segments(view, "tiny", "running", 2.5, dropped_events=3)]
    assert running[:5] == ["tiny", "step 250/1,000", "━━━━────────────", "25%", "loss 2.5000"]
    assert "12.3k tok/s" in running and "MFU 41.2%" in running and "ckpt @200" in running
    assert "⚠ 3 events dropped" in running
    # paused: no speed nor MFU (they are not live); the step and the checkpoint stay
    paused = [s.text.plain for s in status_segments(view, "tiny", "paused", 2.5)]
    assert not any("tok/s" in p or "MFU" in p or "dropped" in p for p in paused)
    assert "step 250/1,000" in paused and "ckpt @200" in paused
    # at 40 columns the preset and the step survive, the checkpoint does not
    narrow = fit_segments(status_segments(view, "tiny", "running", 2.5), 40).plain
    assert narrow.startswith("tiny  step 250/1,000") and "ckpt" not in narrow
