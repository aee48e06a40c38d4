"""The braille rasteriser behind the plots' dense lines, checked against hand-drawn cells."""

from __future__ import annotations

import numpy as np

from cockpit.widgets.braille import braille_cells, connect, line_cells, to_dots


def test_to_dots_uses_plotexts_mapping_and_clips_outside_values() -> None:
    # floor(0.5 + (bins - 1) * (v - lo) / (hi - lo)) on 4 dots over [0, 3]: 0 1 2 3
    assert to_dots(np.array([0.0, 1.0, 2.0, 3.0]), 0.0, 3.0, 4).tolist() == [0, 1, 2, 3]
    # 1.4 -> floor(0.5 + 1.4) = 1; 1.5 -> floor(2.0) = 2
    assert to_dots(np.array([1.4, 1.5]), 0.0, 3.0, 4).tolist() == [1, 2]
    # far outside: one dot beyond either end, never millions of dots to walk
    assert to_dots(np.array([-1e9, 1e9]), 0.0, 3.0, 4).tolist() == [-1, 4]
    assert to_dots(np.array([5.0]), 2.0, 2.0, 4).tolist() == [0]


def test_connect_walks_every_dot_between_points() -> None:
    xs, ys = connect(np.array([0, 3]), np.array([0, 0]))
    assert xs.tolist() == [0, 1, 2, 3] and ys.tolist() == [0, 0, 0, 0]
    # a vertical jump is a solid stroke, then a diagonal
    xs, ys = connect(np.array([0, 0, 2]), np.array([0, 3, 5]))
    assert list(zip(xs.tolist(), ys.tolist(), strict=True)) == [
        (0, 0),
        (0, 1),
        (0, 2),
        (0, 3),
        (1, 4),
        (2, 5),
    ]


def test_braille_cells_merge_the_dots_of_a_cell() -> None:
    # one cell (2 x 4 dots); y counts up from the bottom, braille rows count down from the top:
    # bottom-left dot (x=0, y=0) is dot 7 (0x40), top-right (x=1, y=3) is dot 4 (0x08)
    cols, rows, chars = braille_cells(np.array([0, 1]), np.array([0, 3]), 1, 1)
    assert cols.tolist() == [0] and rows.tolist() == [0]
    assert chars == [chr(0x2800 + 0x40 + 0x08)]
    # a full left column: dots 1, 2, 3, 7
    _, _, chars = braille_cells(np.array([0, 0, 0, 0]), np.array([0, 1, 2, 3]), 1, 1)
    assert chars == ["⡇"]
    # dots outside the grid are dropped; the second cell row starts at y = 4
    cols, rows, chars = braille_cells(np.array([2, -1, 0]), np.array([4, 0, 9]), 2, 2)
    assert list(zip(cols.tolist(), rows.tolist(), strict=True)) == [(1, 1)]


def test_line_cells_draws_a_horizontal_line_across_the_canvas() -> None:
    cols, rows, chars = line_cells(
        np.array([0.0, 10.0]), np.array([1.0, 1.0]), (0.0, 10.0), (0.0, 1.0), 3, 1
    )
    # y = 1.0 is the top dot row (y = 3): dots 1 and 4 in each of the 3 cells
    assert cols.tolist() == [0, 1, 2] and rows.tolist() == [0, 0, 0]
    assert chars == ["⠉"] * 3
    # NaN points are skipped, not drawn as zeros
    cols, _, _ = line_cells(
        np.array([0.0, 5.0, 10.0]), np.array([0.0, np.nan, 0.0]), (0.0, 10.0), (0.0, 1.0), 3, 1
    )
    assert cols.tolist() == [0, 1, 2]
