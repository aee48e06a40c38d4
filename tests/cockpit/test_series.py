"""Bounded series, min/max downsampling and the debiased EMA, against hand-computed values."""

from __future__ import annotations

import math
import random

import pytest

from cockpit.figures.series import BoundedSeries, DebiasedEMA, downsample_minmax

# BoundedSeries ------------------------------------------------------------------------------------


def test_bounded_series_decimates_the_older_half_alternating_low_high() -> None:
    s = BoundedSeries(capacity=8)
    ys = [5, 1, 4, 2, 8, 3, 0, 9]
    for x, y in enumerate(ys):
        s.append(x, y)
    assert s.xs.tolist() == list(range(8)) and len(s) == 8
    s.append(8, 7)
    # older half = points 0..3 in pairs (0,1) and (2,3): keep the lower of the first pair
    # (x=1, y=1), the higher of the second (x=2, y=4); points 4.. are untouched.
    assert s.xs.tolist() == [1, 2, 4, 5, 6, 7, 8]
    assert s.ys.tolist() == [1, 4, 8, 3, 0, 9, 7]
    assert s.total == 9
    assert s.last == (8, 7)


def test_bounded_series_keeps_non_finite_points_visible() -> None:
    s = BoundedSeries(capacity=4)
    for x, y in enumerate([1.0, float("nan"), 2.0, 3.0]):
        s.append(x, y)
    s.append(4, 4.0)
    assert s.xs[0] == 1 and math.isnan(s.ys[0])


def test_bounded_series_memory_is_bounded_and_recent_points_exact() -> None:
    s = BoundedSeries(capacity=1000)
    for i in range(100_000):
        s.append(i, float(i % 97))
    assert len(s) <= 1000
    assert s.total == 100_000
    assert s.xs.tolist() == sorted(s.xs.tolist())
    assert s.xs[0] < 1000  # the start of the run is still represented
    # the newest points are at full resolution
    assert s.xs[-100:].tolist() == list(range(99_900, 100_000))
    assert s.last == (99_999, float(99_999 % 97))


def test_bounded_series_window() -> None:
    s = BoundedSeries()
    for i in range(10):
        s.append(i * 10, i)
    xs, ys = s.window(35)
    assert xs == [40, 50, 60, 70, 80, 90] and ys == [4, 5, 6, 7, 8, 9]


# downsample_minmax ----------------------------------------------------------------------------------


def test_downsample_returns_small_input_unchanged() -> None:
    assert downsample_minmax([0, 1, 2], [3.0, 1.0, 2.0], 2) == ([0, 1, 2], [3.0, 1.0, 2.0])


def test_downsample_min_and_max_per_bucket_in_order() -> None:
    xs = list(range(10))
    ys = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3]
    # 2 buckets of width 4.5: x in [0, 4.5) -> ys 3 1 4 1 5: min 1 (first, x=1), max 5 (x=4);
    # x in [4.5, 9] -> ys 9 2 6 5 3: max 9 (x=5) comes before min 2 (x=6).
    assert downsample_minmax(xs, ys, 2) == ([1, 4, 5, 6], [1, 5, 9, 2])


def test_downsample_keeps_spikes_and_bounds_the_output() -> None:
    xs = list(range(10_000))
    ys = [1.0] * 10_000
    ys[5_678] = 50.0
    ys[123] = -3.0
    ox, oy = downsample_minmax(xs, ys, 40)
    assert len(ox) <= 80
    assert 50.0 in oy and -3.0 in oy
    assert ox == sorted(ox)


def test_downsample_drops_non_finite_points() -> None:
    xs = list(range(8))
    ys = [1.0, float("nan"), 2.0, float("inf"), 3.0, 4.0, 5.0, 6.0]
    ox, oy = downsample_minmax(xs, ys, 1)
    assert oy == [1.0, 6.0] and ox == [0, 7]
    assert downsample_minmax([0, 1], [float("nan")] * 2, 5) == ([], [])


def test_downsample_constant_x() -> None:
    assert downsample_minmax([5] * 6, [2, 1, 3, 3, 0, 1], 2) == ([5, 5], [3, 0])


def _downsample_by_definition(xs, ys, n, x_range=None):
    """The docstring's definition, point by point: the reference for the vectorised version."""
    pts = [(x, y) for x, y in zip(xs, ys, strict=True) if math.isfinite(x) and math.isfinite(y)]
    if len(pts) <= 2 * n:
        return [p[0] for p in pts], [p[1] for p in pts]
    x0, x1 = (pts[0][0], pts[-1][0]) if x_range is None else x_range
    span = x1 - x0
    buckets: dict[int, list[int]] = {}
    for i, (x, _) in enumerate(pts):
        k = (
            n - 1
            if span <= 0
            else min(n - 1, next(j for j in range(n) if j == n - 1 or x < x0 + span * (j + 1) / n))
        )
        buckets.setdefault(0 if span <= 0 else k, []).append(i)
    out = []
    for k in sorted(buckets):
        idx = buckets[k]
        lo = min(idx, key=lambda i: (pts[i][1], i))
        hi = min(idx, key=lambda i: (-pts[i][1], i))
        out += sorted({lo, hi})
    return [pts[i][0] for i in out], [pts[i][1] for i in out]


def test_downsample_matches_its_definition_on_random_series() -> None:
    rng = random.Random(7)
    for _ in range(300):
        n_points = rng.randint(0, 120)
        xs = sorted(
            rng.choice([rng.random() * 50, float(rng.randint(0, 9))]) for _ in range(n_points)
        )
        ys = [
            rng.choice([rng.random(), float(rng.randint(0, 2)), float("nan"), float("-inf")])
            for _ in range(n_points)
        ]
        n = rng.randint(1, 25)
        assert downsample_minmax(xs, ys, n) == _downsample_by_definition(xs, ys, n)
        x_range = (rng.uniform(-5, 10), rng.uniform(20, 70))  # may cut into the data
        assert downsample_minmax(xs, ys, n, x_range) == _downsample_by_definition(
            xs, ys, n, x_range
        )


def test_downsample_with_fixed_range_changes_only_the_last_bucket_as_points_arrive() -> None:
    rng = random.Random(3)
    xs = list(range(5_000))
    ys = [rng.random() for _ in xs]
    before = downsample_minmax(xs, ys, 50, x_range=(0, 6_400))  # buckets 128 steps wide
    after = downsample_minmax(xs + [5_000], ys + [7.0], 50, x_range=(0, 6_400))
    # bucket 39 holds x 4992..5119: only its points change, everything before stays put
    kept = [i for i, x in enumerate(before[0]) if x < 4_992]
    assert after[0][: len(kept)] == before[0][: len(kept)]
    assert after[1][: len(kept)] == before[1][: len(kept)]
    assert after[1][-1] == 7.0


def test_downsample_rejects_mismatched_lengths() -> None:
    with pytest.raises(ValueError):
        downsample_minmax([1, 2], [1], 3)


# DebiasedEMA ----------------------------------------------------------------------------------------


def test_debiased_ema_hand_computed() -> None:
    ema = DebiasedEMA(beta=0.5)
    assert ema.value is None
    # m1 = 0.5*0 + 0.5*2 = 1; debiased 1 / (1 - 0.5) = 2
    assert ema.update(2.0) == pytest.approx(2.0)
    # m2 = 0.5*1 + 0.5*4 = 2.5; debiased 2.5 / (1 - 0.25) = 3.3333
    assert ema.update(4.0) == pytest.approx(10 / 3)
    # NaN is skipped
    assert ema.update(float("nan")) == pytest.approx(10 / 3)
    # m3 = 0.5*2.5 + 0.5*1 = 1.75; debiased 1.75 / (1 - 0.125) = 2.0
    assert ema.update(1.0) == pytest.approx(2.0)


def test_debiased_ema_starts_at_the_first_value() -> None:
    ema = DebiasedEMA(beta=0.99)
    assert ema.update(4.2) == pytest.approx(4.2)
    ema.reset()
    assert ema.value is None
