"""The loss panel with other runs overlaid and its x axis in steps, tokens or training time
(issue 16, item 3): in a Pilot app, drawn, with the legend read off the border."""

from __future__ import annotations

import math

import numpy as np
import pytest
from pilot import run_pilot
from test_overlay import loop_ema, noisy_losses, run_curves
from textual.app import App, ComposeResult
from textual.content import Content
from textual.geometry import Region
from textual.pilot import Pilot

from cockpit.figures.overlay import OVERLAY_COLOURS, Overlay, legend
from cockpit.widgets.loss import LossPanel
from cockpit.widgets.plotext_frame import Recorder

STEP_S = 0.25  # a step's training time, exact in binary: the axes agree to the bit


class RecordingPanel(LossPanel):
    """The loss panel, remembering the x and y limits of each drawing."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.xlims: list[tuple[float, float]] = []
        self.ylims: list[tuple[float, float]] = []

    def draw(self, plt, width: int, height: int) -> None:
        super().draw(plt, width, height)
        if isinstance(plt, Recorder):
            for name, args, _ in plt.calls:
                if name == "xlim":
                    self.xlims.append(tuple(args))
                elif name == "ylim":
                    self.ylims.append(tuple(args))


class LossApp(App):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.panel_width = width

    CSS = "RecordingPanel { border: round $primary; }"  # the border carries the legend

    def compose(self) -> ComposeResult:
        panel = RecordingPanel(id="loss")
        panel.styles.width = self.panel_width
        yield panel


def current_loss(step: int) -> float:
    return 1.4 + 3 * math.exp(-step / 250) + 0.03 * math.sin(step)


def feed(panel: LossPanel, steps: range) -> None:
    for step in steps:
        panel.add_step(step, current_loss(step), 64 * step, step_time_s=STEP_S)


def bottom_border(panel: LossPanel) -> str:
    width, height = panel.outer_size
    return panel.render_lines(Region(0, 0, width, height))[-1].text


def text_of(panel: LossPanel) -> str:
    return "\n".join(panel.render_line(y).text for y in range(panel.size.height))


BASE = run_curves("base-lr3e-4", noisy_losses(2_000, seed=1), step_s=STEP_S)
FORK = run_curves("fork-lr1e-4", noisy_losses(2_000, seed=2) - 0.1, step_s=STEP_S)


def expected_entry(curves, panel: LossPanel, beta: float) -> str:
    """An overlay's legend entry, from its arrays: its EMA at the current run's newest step."""
    at = int(np.searchsorted(curves.step, panel.raw.last[0], side="right")) - 1
    finite = curves.loss[: at + 1]
    value = loop_ema(finite.tolist(), beta)[-1] if beta else float(curves.loss[at])
    now = panel.ema.value if beta else panel.last_loss
    return f"{curves.name} {value:.3f} {now - value:+.3f}"


def test_the_legend_shows_each_overlay_at_the_current_runs_x_and_the_difference() -> None:
    app = LossApp(120)

    async def scenario(pilot: Pilot) -> None:
        panel = app.query_one(RecordingPanel)
        feed(panel, range(1, 601))
        panel.set_overlays([Overlay(BASE), Overlay(FORK)])
        for axis, beta in (("steps", 0.9), ("tokens", 0.9), ("time", 0.9), ("steps", 0.99)):
            while panel.x_axis != axis:
                panel.cycle_x_axis()
            while panel.ema_beta != beta:
                panel.cycle_smoothing()
            panel.flush(force=True)
            await pilot.pause()
            border = bottom_border(panel)
            assert f"now {panel.ema.value:.3f}" in border
            for curves in (BASE, FORK):
                assert expected_entry(curves, panel, beta) in border, (axis, beta, border)
        panel.cycle_smoothing()  # off: the raw losses
        assert panel.ema_beta == 0.0
        panel.flush(force=True)
        await pilot.pause()
        assert expected_entry(FORK, panel, 0.0) in bottom_border(panel)

    run_pilot(app, scenario, size=(120, 24))


def test_at_80x24s_width_the_legend_shows_fewer_runs_and_shorter_names() -> None:
    app = LossApp(48)  # the loss panel's width in the 80x24 cockpit

    async def scenario(pilot: Pilot) -> None:
        panel = app.query_one(RecordingPanel)
        feed(panel, range(1, 601))
        runs = [run_curves(f"tiny-20261129-10150{i}", noisy_losses(900, seed=i)) for i in range(3)]
        panel.set_overlays([Overlay(c) for c in runs])
        panel.flush(force=True)
        await pilot.pause()
        border = bottom_border(panel)
        wanted = legend(panel.current_value(), panel.legend_entries(), panel.legend_width())
        shown = Content.from_markup(wanted).plain
        assert shown in border and shown.endswith("+2 more")  # whole: not cut by the border
        assert "…" in shown and len(shown) > panel.legend_width() - 8  # the width is used

    run_pilot(app, scenario, size=(80, 24))


def test_overlays_are_drawn_in_their_colours_under_the_run_and_widen_the_y_range() -> None:
    app = LossApp(120)

    async def scenario(pilot: Pilot) -> None:
        panel = app.query_one(RecordingPanel)
        feed(panel, range(1, 601))
        panel.flush(force=True)
        await pilot.pause()
        alone = panel.ylims[-1]
        high = run_curves("high", noisy_losses(2_000, seed=3) + 3.0)  # well above the run
        panel.set_overlays([Overlay(BASE), Overlay(high)])
        panel.flush(force=True)
        await pilot.pause()
        assert panel.ylims[-1][1] > alone[1] + 2.5  # the y range takes the overlay in
        assert panel.ylims[-1][1] < 8.0  # but not its first steps' ln(vocab) (first 5% cut)
        colours = {
            seg.style.color.get_truecolor()[:3]
            for strip in panel.row_strips()
            for seg in strip
            if seg.style is not None and seg.style.color is not None and seg.text.strip()
        }
        assert set(panel.overlay_colours) <= colours
        assert "◆" in text_of(panel)  # their val points
        assert panel.overlay_colours == list(OVERLAY_COLOURS[:2])

    run_pilot(app, scenario, size=(120, 24))


def test_live_steps_redo_an_overlays_downsampling_only_when_the_x_limits_change() -> None:
    app = LossApp(120)

    async def scenario(pilot: Pilot) -> None:
        panel = app.query_one(RecordingPanel)
        overlays = [Overlay(run_curves(f"r{i}", noisy_losses(100_000, seed=i))) for i in range(5)]
        feed(panel, range(1, 2001))
        panel.set_overlays(overlays)
        panel.flush(force=True)
        await pilot.pause()
        text_of(panel)
        seen = set(panel.xlims)
        before = [o.downsamplings for o in overlays]
        draws, builds = panel.draw_count, panel.frame_builds
        new_limits = 0
        for step in range(2001, 2101):
            feed(panel, range(step, step + 1))
            panel.flush(force=True)
            text_of(panel)
            if panel.xlims[-1] not in seen:
                seen.add(panel.xlims[-1])
                new_limits += 1
        assert panel.draw_count - draws == 100  # every step was drawn...
        assert 0 < new_limits <= 5  # ...while the x limits moved a few times, in round steps
        for overlay, was in zip(overlays, before, strict=True):
            assert overlay.downsamplings - was == new_limits  # downsampled once per x limits
        assert panel.frame_builds - builds <= new_limits + 2

    run_pilot(app, scenario, size=(120, 24))


def test_the_x_axis_cycles_steps_tokens_time_with_durations_on_the_time_axis() -> None:
    app = LossApp(120)

    async def scenario(pilot: Pilot) -> None:
        panel = app.query_one(RecordingPanel)
        feed(panel, range(1, 1001))  # 250 s of training
        assert [panel.cycle_x_axis() for _ in range(3)] == ["tokens", "time", "steps"]
        assert panel.cycle_x_axis() == "tokens" and panel.x_axis == "tokens"
        assert panel.cycle_x_axis() == "time" and "x:time" in panel.border_title
        panel.flush(force=True)
        await pilot.pause()
        drawn = text_of(panel)
        assert "2:00" in drawn and "4:00" in drawn  # ticks at whole minutes, as clocks
        assert panel.xlims[-1][1] >= 250.0 > panel.xlims[-1][1] - 10

    run_pilot(app, scenario, size=(120, 24))


def test_a_run_of_seconds_has_fractional_time_ticks() -> None:
    """200 steps of 2 ms: ticks like 0.1s, 0.2s, never a row of "0s"."""
    app = LossApp(120)

    async def scenario(pilot: Pilot) -> None:
        panel = app.query_one(RecordingPanel)
        for step in range(1, 201):
            panel.add_step(step, current_loss(step), 64 * step, step_time_s=0.002)
        panel.cycle_x_axis()
        panel.cycle_x_axis()
        panel.flush(force=True)
        await pilot.pause()
        axis = text_of(panel).splitlines()[-1]
        assert "0.2s" in axis and "0.4s" in axis, axis
        assert axis.split().count("0s") <= 1, axis

    run_pilot(app, scenario, size=(120, 24))


def test_set_overlays_replaces_and_a_run_keeps_its_colour() -> None:
    panel = LossPanel()
    a, b, c = (Overlay(run_curves(n, noisy_losses(50))) for n in "abc")
    panel.set_overlays([a, b, c])
    colours = dict(zip("abc", panel.overlay_colours, strict=True))
    panel.set_overlays([a, c])
    assert panel.overlays == [a, c]
    assert panel.overlay_colours == [colours["a"], colours["c"]]
    d = Overlay(run_curves("d", noisy_losses(50)))
    panel.set_overlays([c, d, a])
    assert panel.overlay_colours == [colours["c"], colours["b"], colours["a"]]
    panel.set_overlays([])
    assert panel.overlays == [] and "now" not in str(panel.border_subtitle)


def test_training_time_counts_step_times_from_exact_anchors() -> None:
    panel = LossPanel()
    for step in range(1, 11):  # a fresh run: 0 s at step 0
        panel.add_step(step, 2.0, 64 * step, step_time_s=0.5)
    assert panel.raw_time.xs.tolist() == [0.5 * s for s in range(1, 11)]
    panel.add_eval(10, 1.9, train_time_s=5.25)  # the engine's exact figure wins from here
    panel.add_step(11, 2.0, 704, step_time_s=0.5)
    assert panel.raw_time.last == (5.75, 2.0)
    assert panel.val_time.last == (5.25, 1.9)
    panel.add_step(12, 2.0, 768)  # an old caller, without step times: not on the time axis
    assert panel.raw_time.last[0] == 5.75 and panel.raw.last[0] == 12
    assert panel.time_at(10.5) == pytest.approx((5.0 + 5.75) / 2)  # between timed steps


def test_a_resumed_runs_replay_is_timed_from_its_anchors() -> None:
    panel = LossPanel()
    panel.set_time_anchor(300, 200.0)  # RunStarted: start_step, train_time_s
    # the replay, thinned: every 100th step, its evals with their exact times
    for step in (1, 100, 200):
        panel.add_step(step, 2.0, 64 * step, step_time_s=0.5)
        if step == 100:
            panel.add_eval(100, 1.9, train_time_s=60.0)
    panel.add_step(300, 2.0, 64 * 300, step_time_s=0.5)
    panel.add_step(301, 2.0, 64 * 301, step_time_s=0.5)  # the first live step
    # step 100 counted from step 1; its eval's exact 60 s then anchors step 200 (+100 x 0.5)
    assert panel.raw_time.xs.tolist() == [0.5, 50.0, 110.0, 200.0, 200.5]
    assert panel.val_time.xs.tolist() == [60.0]
    panel.add_marker(200, "lr")
    panel.cycle_x_axis()
    panel.cycle_x_axis()
    assert panel.x_axis == "time" and panel._x_of(200, 0) == 110.0  # markers move with it


def test_twin_runs_are_named_as_one_line_and_a_shorter_run_shows_where_it_ended() -> None:
    """Two runs of one preset and seed drew one line (the later over the other: one colour
    never showed), and a run shorter than the current one said `-` in the legend. Now the later
    twin names the earlier ('≡'), and a run that ended shows its last loss at its last step."""
    app = LossApp(160)
    seed_1 = noisy_losses(800, seed=1)
    long_run = run_curves("lr3e-4-seed1", seed_1)
    same_but_shorter = run_curves("lr3e-4-seed1-again", seed_1[:300])
    short_other = run_curves("lr1e-3", noisy_losses(400, seed=3))

    async def scenario(pilot: Pilot) -> str:
        panel = app.query_one(RecordingPanel)
        feed(panel, range(1, 601))
        panel.set_overlays([Overlay(c) for c in (long_run, same_but_shorter, short_other)])
        panel.flush(force=True)
        await pilot.pause()
        return bottom_border(panel)

    border = run_pilot(app, scenario, size=(170, 24))
    assert "lr3e-4-seed1-again ≡ lr3e-4-seed1 to 300" in border, border
    last = loop_ema(short_other.loss.tolist(), 0.9)[-1]
    assert f"lr1e-3 {last:.3f}@400" in border, border
    assert " - " not in border.replace("─", " ")
