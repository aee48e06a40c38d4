"""The cockpit's pure data structures, against hand-computed values."""

from __future__ import annotations

import math
import random

import pytest

from cockpit.history import (
    BoundedSeries,
    DebiasedEMA,
    ProgressTracker,
    RedrawGovernor,
    downsample_minmax,
    nice_ticks,
    steady_limits,
)

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


# RedrawGovernor -------------------------------------------------------------------------------------


def test_governor_keeps_drawing_within_budget() -> None:
    g = RedrawGovernor(min_interval=1.0, max_interval=10.0, budget=0.02)
    assert g.due(0.0)
    g.record(0.0, 0.005)  # 5 ms: the minimum interval applies
    assert g.interval == 1.0
    assert not g.due(0.9) and g.due(1.0)
    g2 = RedrawGovernor(min_interval=1.0, max_interval=10.0, budget=0.02)
    g2.record(0.0, 0.06)  # 60 ms per draw: at most 2% of a core means every 3 s
    assert g2.interval == pytest.approx(3.0)
    g2.record(3.0, 1.0)
    assert g2.interval == 10.0  # capped


# nice_ticks -----------------------------------------------------------------------------------------


def test_nice_ticks() -> None:
    assert nice_ticks(0, 2000, 5) == [0, 500, 1000, 1500, 2000]
    assert nice_ticks(1.3, 4.5, 4) == [2, 4]
    assert nice_ticks(0, 1.3e-3, 4) == pytest.approx([0, 5e-4, 1e-3])
    assert nice_ticks(3, 3, 4) == [3]
    assert nice_ticks(0, float("nan"), 4) == []
    # ranges below floating-point resolution must not loop forever
    assert nice_ticks(1.9999999999999996, 2.0000000000000004, 9) == [1.9999999999999996]
    assert nice_ticks(1e9, 1e9 + 1e-6, 5) == [1e9]
    assert nice_ticks(1e9, 1e9 + 1e4, 5) == [1e9, 1e9 + 2500, 1e9 + 5000, 1e9 + 7500, 1e9 + 1e4]


# ProgressTracker ------------------------------------------------------------------------------------


def test_progress_tracker_from_event_times() -> None:
    p = ProgressTracker(window=10)
    assert p.elapsed is None and p.rate is None
    p.start(100.0)
    p.add_step(102.0, 10)
    assert p.rate is None  # one point
    p.add_step(112.0, 60)
    assert p.rate == pytest.approx(5.0)
    assert p.elapsed == pytest.approx(12.0)
    assert p.eta(60, 110) == pytest.approx(10.0)
    p.observe(120.0)  # e.g. telemetry while paused: elapsed moves on
    assert p.elapsed == pytest.approx(20.0)
    p.forget_rate()
    assert p.rate is None
    p.add_step(130.0, 70)
    assert p.rate is None
    p.add_step(131.0, 75)
    assert p.rate == pytest.approx(5.0)


def test_progress_tracker_of_a_resumed_run_counts_the_time_trained_before() -> None:
    p = ProgressTracker(window=10)
    p.start(1000.0, before=600.0)  # 10 minutes trained in earlier sessions
    assert p.elapsed == pytest.approx(600.0)
    p.add_step(1002.0, 251)
    p.add_step(1004.0, 252)
    assert p.elapsed == pytest.approx(604.0)
    assert p.rate == pytest.approx(0.5)  # the rate is this session's own
    p.start(2000.0)  # a new run: nothing before
    assert p.elapsed == pytest.approx(0.0)


def test_load_governor_slows_down_and_recovers() -> None:
    from cockpit.history import LoadGovernor

    g = LoadGovernor(target=0.02, window=5.0, max_factor=8.0)
    assert g.sample(0.0, 0.0) == 1.0
    assert g.sample(4.0, 1.0) == 1.0  # window not over yet
    assert g.sample(5.0, 0.25) == pytest.approx(1.5)  # 5% > 2%
    assert g.share == pytest.approx(0.05)
    assert g.sample(10.0, 0.50) == pytest.approx(2.25)
    for i in range(3, 20):
        g.sample(5.0 * i, 0.25 * i)
    assert g.factor == 8.0  # capped
    assert g.sample(200.0, 5.0) == pytest.approx(8.0 / 1.25)  # 0.5% < 1%: speed back up
    cpu = 5.0
    for i in range(1, 40):
        cpu += 0.04  # 0.8% of 5 s
        g.sample(200.0 + 5 * i, cpu)
    assert g.factor == 1.0
    g.sample(400.0, cpu + 0.075)  # 1.5%: between half and target, holds
    assert g.factor == 1.0


def test_steady_limits_widen_to_round_steps_and_hold_still() -> None:
    # span 100,000 -> at least 1/64 of it (1,562.5) -> step 2,000
    assert steady_limits(1, 100_001) == (0, 102_000)
    # the frame holds while the data grows within the step
    assert steady_limits(1, 101_999) == (0, 102_000)
    # span 3.18 -> at least 0.0497 -> step 0.05
    lo, hi = steady_limits(1.43, 4.61)
    assert math.isclose(lo, 1.40) and math.isclose(hi, 4.65)
    assert steady_limits(2.0, 2.0) == (2.0, 2.0)
    assert steady_limits(0.0, float("nan"))[0] == 0.0
