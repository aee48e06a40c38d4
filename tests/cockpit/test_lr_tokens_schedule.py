"""The LR panel draws a batch-size schedule or sequence-length warmup (RunStarted.tokens_schedule)
on its step axis: a staircase of the tokens a step, its full size at the peak LR, and a legend
entry; a run without one is drawn as before."""

from __future__ import annotations

from pilot import run_pilot
from textual.app import App, ComposeResult
from textual.pilot import Pilot

from cockpit.widgets.loss import LossPanel
from cockpit.widgets.lr import LrPanel

PLAN = [(0, 0.0), (10, 1e-3), (100, 1e-4)]
SCHEDULE = ((0, 8), (3, 16), (6, 48), (8, 64))


class LrApp(App):
    CSS = "LrPanel { border: round $primary; }"  # the border carries the legend

    def compose(self) -> ComposeResult:
        yield LrPanel(id="lr")


def text_of(panel: LrPanel) -> str:
    return "\n".join(panel.render_line(y).text for y in range(panel.size.height))


def test_the_staircase_steps_at_each_change_and_reaches_the_peak_at_full_size() -> None:
    panel = LrPanel()
    panel.set_tokens_schedule(SCHEDULE)
    xs, ys = panel.tokens_curve(100, 2.0)
    assert xs == [0, 3, 3, 6, 6, 8, 8, 100]
    assert ys == [0.25, 0.25, 0.5, 0.5, 1.5, 1.5, 2.0, 2.0]  # tokens / 64 of the peak, 2.0
    panel.set_tokens_schedule(())
    assert panel.tokens_curve(100, 2.0) == ([], [])


def test_a_schedule_is_drawn_and_named_and_a_run_without_one_is_not() -> None:
    app = LrApp()

    async def scenario(pilot: Pilot) -> None:
        panel = app.query_one(LrPanel)
        panel.set_plan(PLAN, 100)
        panel.set_tokens_schedule(())
        panel.flush(force=True)
        await pilot.pause()
        without = text_of(panel)
        assert "tokens/step" not in str(panel.border_title)
        panel.set_tokens_schedule(SCHEDULE)
        panel.flush(force=True)
        await pilot.pause()
        assert "tokens/step" in str(panel.border_title)
        drawn = text_of(panel)
        assert drawn != without  # the staircase is drawn
        panel.set_tokens_schedule(())
        panel.flush(force=True)
        await pilot.pause()
        assert text_of(panel) == without  # and gone again with the schedule

    run_pilot(app, scenario, size=(80, 20))


def test_the_loss_panel_places_evals_and_markers_at_the_tokens_trained() -> None:
    """On the tokens axis: an eval or a marker at the newest step is at that step's own count
    (8 tokens a step at first, here), not at step x tokens_per_step (64, the full size)."""
    panel = LossPanel()
    panel.tokens_per_step = 64
    for step in range(1, 5):
        panel.add_step(step, 3.0, 8 * step)
    panel.add_eval(4, 2.5)
    panel.add_marker(4, "lr")
    assert panel.val_tok.last == (32, 2.5)
    assert panel.markers[-1] == (4, 32, "lr")
    panel.add_marker(2, "rollback")  # not the newest step: at tokens_per_step each, as before
    assert panel.markers[-1] == (2, 128, "rollback")


def test_the_staircase_has_its_own_scale_on_the_right() -> None:
    """speedrun-cpu's staircase was drawn on the LR's axis with no figure of its own: the right
    axis now names its smallest and largest step sizes, level with them."""
    app = LrApp()

    async def scenario(pilot: Pilot) -> list[str]:
        panel = app.query_one(LrPanel)
        panel.set_plan(PLAN, 100)
        panel.set_tokens_schedule(((0, 256), (3, 512), (6, 1024)))
        panel.flush(force=True)
        await pilot.pause()
        return text_of(panel).splitlines()

    rows = run_pilot(app, scenario, size=(80, 20))
    top = next(i for i, r in enumerate(rows) if r.rstrip().endswith("├1,024 tok"))
    low = next(i for i, r in enumerate(rows) if r.rstrip().endswith("├256"))
    assert top < low
    # the right axis is the staircase's: 256 sits a quarter of the way from 0 to 1,024
    zero = next(i for i, r in enumerate(rows) if r.lstrip().startswith("0┤"))
    assert abs((zero - low) - (zero - top) / 4) <= 1, "\n".join(rows)
