"""The Samples panel on its own: newest first, bounded, wrapped to its width, and a reader who
scrolled down to older samples is not pushed around when a new one arrives."""

from __future__ import annotations

from pilot import run_pilot
from textual.app import App, ComposeResult
from textual.pilot import Pilot

from cockpit.widgets.samples import MAX_SAMPLES, SamplesPanel


class SamplesApp(App):
    def compose(self) -> ComposeResult:
        yield SamplesPanel(id="samples")


def screen_text(panel: SamplesPanel) -> list[str]:
    return [
        panel.render_line(y).text.rstrip() for y in range(panel.scrollable_content_region.height)
    ]


def add(panel: SamplesPanel, step: int, text: str) -> None:
    panel.add_sample(step, "Q:", "Q:" + text)
    panel.finish_batch()


def test_newest_first_bounded_and_wrapped() -> None:
    app = SamplesApp()

    async def scenario(pilot: Pilot) -> None:
        panel = app.query_one(SamplesPanel)
        await pilot.pause()
        assert screen_text(panel)[0] == "no samples yet"
        add(panel, 1, " first")
        add(panel, 2, " second " + "word " * 12)
        await pilot.pause()
        lines = screen_text(panel)
        assert lines[0] == "step 2"
        assert lines[1].startswith("Q: second word")
        assert all(len(line) <= 40 for line in lines)  # wrapped, not cut
        assert "step 1" in lines  # the older one follows, after a blank line
        for step in range(3, MAX_SAMPLES + 10):
            add(panel, step, f" sample {step}")
        assert len(panel.samples) == MAX_SAMPLES
        assert panel.border_subtitle == f"{MAX_SAMPLES} kept"
        # every kept sample is drawn once: 3 lines each but the last (header, text, blank)
        assert panel.virtual_size.height == 3 * MAX_SAMPLES - 1

    run_pilot(app, scenario, size=(40, 12))


def test_reader_of_older_samples_keeps_their_place() -> None:
    app = SamplesApp()

    async def scenario(pilot: Pilot) -> None:
        panel = app.query_one(SamplesPanel)
        for step in range(1, 11):
            add(panel, step, f" sample {step}")
        await pilot.pause()
        panel.scroll_to(y=9, animate=False, immediate=True)
        await pilot.pause()
        before = screen_text(panel)
        add(panel, 11, " sample 11")
        await pilot.pause()
        assert screen_text(panel)[:6] == before[:6]
        panel.scroll_home(animate=False, immediate=True)
        await pilot.pause()
        assert screen_text(panel)[0] == "step 11"

    run_pilot(app, scenario, size=(40, 12))


def test_resize_rewraps_and_reset_empties() -> None:
    app = SamplesApp()

    async def scenario(pilot: Pilot) -> None:
        panel = app.query_one(SamplesPanel)
        add(panel, 1, " " + "long words " * 8)
        await pilot.pause()
        wide = panel.virtual_size.height
        await pilot.resize_terminal(30, 12)
        await pilot.pause()
        assert panel.virtual_size.height > wide
        assert all(len(line) <= 30 for line in screen_text(panel))
        panel.reset()
        await pilot.pause()
        assert screen_text(panel)[0] == "no samples yet"  # s names itself only once offered
        assert panel.border_subtitle == ""
        panel.offer_sampling(True)
        await pilot.pause()
        assert (
            " ".join(screen_text(panel)).split() == "no samples yet (press s to sample now)".split()
        )

    run_pilot(app, scenario, size=(60, 12))
