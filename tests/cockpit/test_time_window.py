"""The zoomed Device panel's history window: readings over time turned into chart columns,
checked against values worked out by hand."""

from __future__ import annotations

from cockpit.widgets.time_window import TimeSeries, span_label, window_columns


def test_each_column_is_the_mean_of_its_readings_and_a_short_pause_repeats_the_last() -> None:
    # 10 s in 5 columns of 2 s: (90,92] (92,94] (94,96] (96,98] (98,100]
    readings = [(93.0, 10.0), (93.5, 20.0), (95.0, 30.0), (99.0, 50.0), (100.0, 70.0)]
    # the first column is before any reading: left out (drawn as no history yet); (96,98] has
    # no reading but the one at 95 still stands (5 s): 30
    assert window_columns(readings, end=100.0, columns=5, span_s=10.0) == [15.0, 30.0, 30.0, 60.0]


def test_no_reading_for_longer_than_the_hold_is_a_gap() -> None:
    # a reading at 80 (before the window), then none until 100: the window's columns are gaps
    readings = [(80.0, 5.0), (100.0, 9.0)]
    assert window_columns(readings, end=100.0, columns=5, span_s=10.0) == [
        None,
        None,
        None,
        None,
        9.0,
    ]
    # within the hold the reading before the window fills its first columns
    readings = [(89.0, 5.0), (100.0, 9.0)]
    assert window_columns(readings, end=100.0, columns=5, span_s=10.0) == [
        5.0,
        5.0,
        None,
        None,
        9.0,
    ]


def test_a_reading_that_could_not_tell_is_a_gap_not_a_zero() -> None:
    readings = [(97.0, 40.0), (99.0, None), (99.5, float("nan"))]
    assert window_columns(readings, end=100.0, columns=5, span_s=10.0) == [40.0, None]


def test_columns_narrower_than_the_readings_interval_have_no_false_gaps() -> None:
    # one reading a second, 20 columns of 0.5 s: every other column repeats the reading before
    readings = [(float(t), float(t)) for t in range(91, 101)]
    expected = [v for t in range(91, 100) for v in (float(t), float(t))] + [100.0]
    assert window_columns(readings, end=100.0, columns=20, span_s=10.0) == expected


def test_the_window_ends_at_the_newest_reading_and_keeps_only_its_span() -> None:
    series = TimeSeries(keep_s=10.0)
    for t in range(0, 30):
        series.add(float(t), float(t % 7))
    assert series.end == 29.0 and series.latest == 1.0
    assert [t for t, _ in series.readings] == [float(t) for t in range(19, 30)]
    series.add(5.0, 3.0)  # an older clock (another run's readings): history starts over
    assert list(series.readings) == [(5.0, 3.0)]
    assert window_columns([], end=0.0, columns=10) == []
    assert window_columns(series.readings, end=5.0, columns=0) == []


def test_span_labels() -> None:
    assert [span_label(s) for s in (300.0, 90.0, 3600.0, 45.0)] == ["5 min", "90 s", "1 h", "45 s"]
