"""Overlays of other runs on the loss panel (issue 16, item 3): the pure part, cockpit/figures/overlay.py."""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import pytest
from textual.content import Content

from cockpit.figures.overlay import (
    OVERLAY_COLOURS,
    ColourBook,
    LegendEntry,
    Overlay,
    debiased_ema,
    legend,
    shorten,
)
from cockpit.figures.series import DebiasedEMA
from engine.rundir.history import RunCurves


def run_curves(
    name: str,
    losses: np.ndarray,
    *,
    tokens_per_step: int = 64,
    step_s: float = 0.01,
    eval_every: int = 100,
) -> RunCurves:
    """A run's curves as the reader gives them: steps 1..n, evenly timed."""
    n = len(losses)
    step = np.arange(1, n + 1, dtype=np.int64)
    val_step = step[eval_every - 1 :: eval_every]
    return RunCurves(
        run_dir=Path("/runs") / name,
        name=name,
        step=step,
        tokens=step * float(tokens_per_step),
        train_s=step * step_s,
        loss=np.asarray(losses, dtype=np.float64),
        val_step=val_step,
        val_tokens=val_step * float(tokens_per_step),
        val_train_s=val_step * step_s,
        val_loss=np.asarray(losses, dtype=np.float64)[val_step - 1] + 0.1,
        tokens_per_step=tokens_per_step,
        max_steps=n,
        preset="tiny",
    )


def noisy_losses(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    steps = np.arange(1, n + 1)
    return 1.5 + 3 * np.exp(-steps / 300) + 0.05 * rng.standard_normal(n)


def loop_ema(values: list[float], beta: float) -> list[float]:
    """The live panel's EMA, one value at a time: what the overlay must equal."""
    ema = DebiasedEMA(beta)
    return [v for v in (ema.update(x) for x in values if math.isfinite(x)) if v is not None]


@pytest.mark.parametrize("beta", [0.9, 0.99])
def test_the_vectorised_ema_equals_the_live_panels_debiased_ema(beta: float) -> None:
    losses = noisy_losses(30_000)  # several blocks of the scan at either beta
    losses[[10, 5000, 20_000]] = [math.nan, math.inf, math.nan]  # skipped, as the live EMA does
    overlay = Overlay(run_curves("a", losses))
    np.testing.assert_allclose(overlay.train(beta), loop_ema(losses.tolist(), beta), rtol=1e-12)
    assert len(overlay.xs("steps")) == 30_000 - 3
    raw = overlay.train(0.0)
    assert np.all(np.isfinite(raw)) and raw[0] == losses[0]
    assert len(debiased_ema(np.array([]), beta)) == 0
    assert debiased_ema(np.array([3.0, 3.0]), beta).tolist() == pytest.approx([3.0, 3.0])


@pytest.mark.serial  # a wall-clock bound: not beside another test
def test_a_million_steps_are_smoothed_well_under_a_second() -> None:
    curves = run_curves("big", noisy_losses(1_000_000))
    t0 = time.perf_counter()
    overlay = Overlay(curves)
    light, heavy = overlay.train(0.9), overlay.train(0.99)
    elapsed = time.perf_counter() - t0
    assert len(light) == len(heavy) == 1_000_000
    assert elapsed < 1.0, f"{elapsed:.2f} s"
    e = DebiasedEMA(0.99)
    tail = curves.loss[-3000:]
    # the EMA's memory at 0.99 is ~100 steps: the last value from the last 3000 alone agrees
    for x in tail:
        e.update(x)
    assert heavy[-1] == pytest.approx(e.value, rel=1e-9)


def test_value_at_is_the_last_step_at_or_before_x_and_none_outside() -> None:
    losses = noisy_losses(500)
    overlay = Overlay(run_curves("a", losses, tokens_per_step=64, step_s=0.5))
    light = overlay.train(0.9)
    assert overlay.value_at(1, "steps", 0.9) == light[0]  # at a point
    assert overlay.value_at(250, "steps", 0.9) == light[249]
    assert overlay.value_at(250.7, "steps", 0.9) == light[249]  # between: the one before
    assert overlay.value_at(0.5, "steps", 0.9) is None  # before its first step
    assert overlay.value_at(500, "steps", 0.0) == losses[499]  # raw: the loss itself
    assert overlay.value_at(501, "steps", 0.9) == light[499]  # one step past its end
    assert overlay.value_at(502, "steps", 0.9) is None  # it never got there
    # the same on the other axes: tokens (64 a step) and training time (0.5 s a step)
    assert overlay.value_at(64 * 250 + 10, "tokens", 0.99) == overlay.train(0.99)[249]
    assert overlay.value_at(63, "tokens", 0.9) is None
    assert overlay.value_at(125.2, "time", 0.9) == light[249]
    assert overlay.value_at(250.6, "time", 0.9) is None
    assert overlay.value_at(math.nan, "steps", 0.9) is None


def test_downsampling_is_cached_per_axes_and_keeps_to_the_x_range() -> None:
    overlay = Overlay(run_curves("a", noisy_losses(100_000)))
    lx, ly, vx, vy = overlay.downsampled("steps", 0.9, 0.0, 2_000.0, 70)
    assert overlay.downsamplings == 1
    assert len(lx) <= 140 and lx.max() <= 2_000 and lx.min() >= 1
    assert list(vx) == [float(s) for s in range(100, 2_001, 100)]  # every eval in range
    assert np.all(np.isin(ly, overlay.train(0.9)))  # points of the smoothed curve itself
    again = overlay.downsampled("steps", 0.9, 0.0, 2_000.0, 70)
    assert again[0] is lx and overlay.downsamplings == 1  # the same axes: no work
    overlay.downsampled("steps", 0.9, 0.0, 2_050.0, 70)
    overlay.downsampled("tokens", 0.9, 0.0, 2_000.0, 70)
    overlay.downsampled("steps", 0.0, 0.0, 2_000.0, 70)
    assert overlay.downsamplings == 4
    empty = overlay.downsampled("steps", 0.9, 200_000.0, 300_000.0, 70)
    assert all(len(a) == 0 for a in empty)


def test_colours_stay_with_their_run_while_it_stays_overlaid() -> None:
    book = ColourBook()
    a, b, c = book.assign(["a", "b", "c"])
    assert len({a, b, c}) == 3 and [a, b, c] == list(OVERLAY_COLOURS[:3])
    assert book.assign(["a", "c"]) == [a, c]  # removing b recolours no one
    a2, c2, d = book.assign(["a", "c", "d"])
    assert (a2, c2) == (a, c) and d == b  # a newcomer takes the first free colour
    assert book.assign(["d", "a", "c"]) == [d, a, c]  # reordering keeps them too
    many = book.assign([f"r{i}" for i in range(8)])
    assert len(set(many[:6])) == 6  # more runs than colours: repeats only past six


def test_the_overlay_colours_differ_from_the_current_runs_own() -> None:
    # the default theme's primary (EMA), warning (val), error (NaN) and the grey raw loss
    own = [(1, 120, 212), (255, 166, 43), (186, 60, 91), (128, 128, 128)]
    for colour in OVERLAY_COLOURS:
        for theirs in own:
            assert sum(abs(p - q) for p, q in zip(colour, theirs, strict=True)) > 120
    assert len(set(OVERLAY_COLOURS)) == len(OVERLAY_COLOURS) >= 6


def visible(markup: str) -> str:
    return Content.from_markup(markup).plain


ENTRIES = [
    LegendEntry("tiny-20261129-101500", (0, 200, 200), 2.398),
    LegendEntry("tiny-20261129-101500-fork-lr", (170, 120, 255), 2.462),
    LegendEntry("nanogpt-cpu-20261128-090000", (150, 210, 60), None),
]


@pytest.mark.parametrize("width", [40, 60, 100, 160])
def test_the_legend_fits_its_width(width: int) -> None:
    text = visible(legend(2.451, ENTRIES, width))
    assert len(text) <= width
    assert text.startswith("now 2.451")
    if width >= 160:  # room for every run, full names
        assert "tiny-20261129-101500 2.398 +0.053" in text
        assert "tiny-20261129-101500-fork-lr 2.462 -0.011" in text
        assert "nanogpt-cpu-20261128-090000 -" in text and "more" not in text
    if width == 60:
        assert text.count("·") >= 2  # at least one run, shortened
    if width == 40:  # 80x24's loss panel is about 48 wide: fewer runs, shorter names
        assert "+2 more" in text or "+1 more" in text
        assert "…" in text


def test_the_legend_colours_each_run_and_the_sign_of_the_difference() -> None:
    markup = legend(2.451, ENTRIES[:2], 160)
    assert "[#00c8c8]tiny-20261129-101500 2.398[/] [$error]+0.053[/]" in markup  # behind
    assert "[#aa78ff]tiny-20261129-101500-fork-lr 2.462[/] [$success]-0.011[/]" in markup
    assert visible(legend(None, ENTRIES[:1], 160)) == "now - · tiny-20261129-101500 2.398"
    odd = legend(2.0, [LegendEntry("[bold]x", (0, 0, 0), 1.0)], 80)
    assert "[bold]x 1.000" in visible(odd)  # a name is text, never markup
    assert visible(legend(2.0, ENTRIES, 8)) == ""  # nothing fits: nothing rather than a cut


def test_names_are_shortened_keeping_their_start_and_end() -> None:
    assert shorten("tiny-20261129-101500", 30) == "tiny-20261129-101500"
    short = shorten("tiny-20261129-101500", 10)
    assert len(short) == 10 and short.startswith("tin") and short.endswith("101500")


def test_a_clock_that_ran_back_at_an_anchor_is_kept_sorted() -> None:
    curves = run_curves("a", noisy_losses(6), step_s=1.0)
    # an eval's exact time below the step times' estimate, then a step without a time
    curves.train_s[:] = [1.0, 2.0, 3.0, 2.5, np.nan, 4.0]
    overlay = Overlay(curves)
    assert overlay.xs("time").tolist() == [1.0, 2.0, 3.0, 3.0, 3.0, 4.0]
    assert overlay.value_at(3.5, "time", 0.0) == curves.loss[4]
    assert overlay.xs("steps") is not curves.step  # steps are floats for the plot


def test_a_level_difference_reads_plus_minus_zero_not_minus_zero() -> None:
    from cockpit.figures.overlay import LegendEntry, legend

    text = legend(1.5780000000001, [LegendEntry("twin", (1, 2, 3), 1.578)], 80)
    assert "±0.000" in text and "-0.000" not in text
