"""The samples screen (enter on the samples panel): each prompt's text at each sampled step,
the words changed since the step before highlighted; comparing runs, the same prompt at the same
step of each run side by side. Snapshots at 80x24 and 160x48 of one run and of two compared; a
Pilot test on the scripted app that enter opens it over the run's and an overlaid run's
metrics.jsonl, and esc closes it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pilot import run_pilot, settle, wait_for
from scripted import ScriptedFactory
from textual.app import App, ComposeResult
from textual.widgets import OptionList, Static

import cockpit.app
from cockpit.app.cockpit_app import CockpitApp
from cockpit.screens.samples_screen import SampleSource, SamplesScreen

SIZES = {"80x24": (80, 24), "160x48": (160, 48)}
DEF, THE = "def ", "The "
RUN_A = (
    (100, DEF, "def foo(self):\n    return self.value"),
    (100, THE, "The file is opened for reading"),
    (200, DEF, "def foo(self, key):\n    return self.cache"),
    (200, THE, "The file is opened for writing"),
    (300, DEF, "def get(self, key):\n    return self.cache.get(key)"),
    (300, THE, "The file object is opened for writing and reading"),
)
RUN_B = (
    (100, DEF, "def bar(x):\n    return x"),
    (200, DEF, "def foo(self, name):\n    return self.cache"),
    (300, DEF, "def get(self, key):\n    return self.cache.get(key)"),
    (300, THE, "The module provides functions"),
)


class ScreenHost(App[None]):
    """The samples screen alone, over a blank app with the cockpit's styles."""

    CSS_PATH = str(Path(cockpit.app.__file__).parent / "cockpit.tcss")

    def __init__(self, sources: list[SampleSource]) -> None:
        super().__init__()
        self.sources = sources

    def compose(self) -> ComposeResult:
        yield Static("")

    def on_mount(self) -> None:
        self.push_screen(SamplesScreen(self.sources))


@pytest.fixture(params=list(SIZES), ids=list(SIZES))
def size(request: pytest.FixtureRequest) -> tuple[int, int]:
    return SIZES[request.param]


def test_one_run(snap_compare: Any, size: tuple[int, int]) -> None:
    app = ScreenHost([SampleSource("tiny-a", RUN_A)])
    assert snap_compare(app, terminal_size=size)


def test_two_runs_compared(snap_compare: Any, size: tuple[int, int]) -> None:
    app = ScreenHost([SampleSource("tiny-a", RUN_A), SampleSource("tiny-b", RUN_B)])
    assert snap_compare(app, terminal_size=size)


def body_text(screen: SamplesScreen) -> str:
    return "\n".join(str(s.render()) for s in screen.query("#samples-body Static"))


def test_no_samples_says_how_to_get_some() -> None:
    app = ScreenHost([SampleSource("tiny-a", ())])

    async def scenario(pilot: Any) -> str:
        await pilot.pause()
        return str(app.screen.query_one("#samples-note", Static).render())

    assert run_pilot(app, scenario).startswith("No samples yet")


def test_the_prompts_list_picks_the_prompt_shown() -> None:
    app = ScreenHost([SampleSource("tiny-a", RUN_A)])

    async def scenario(pilot: Any) -> tuple[str, str]:
        await pilot.pause()
        first = body_text(app.screen)
        await pilot.press("down")
        await pilot.pause()
        return first, body_text(app.screen)

    first, second = run_pilot(app, scenario)
    assert "return self.cache.get(key)" in first and "opened" not in first
    assert "object is opened for writing and reading" in second
    assert "3 words changed" in second  # "object", "and reading" at 300 against 200


def write_records(run_dir: Path, samples: tuple[tuple[int, str, str], ...]) -> None:
    """A run's metrics.jsonl as the engine writes it: steps, evals and its samples."""
    run_dir.mkdir(parents=True, exist_ok=True)
    t = 1_700_000_000.0
    lines: list[dict[str, Any]] = [
        {"kind": "run_started", "time": t, "preset": "tiny", "start_step": 0, "max_steps": 300,
         "tokens_per_step": 64, "resumed_from": None, "train_time_s": 0.0, "tokenizer": "char"},
    ]  # fmt: skip
    for n in range(1, 301):
        lines.append({"kind": "step", "time": t + n, "step": n, "loss": 3.0 - n / 300,
                      "tokens": 64 * n, "step_time_s": 0.01})  # fmt: skip
        lines += [
            {"kind": "sample", "time": t + n, "step": n, "prompt": p, "text": text}
            for step, p, text in samples
            if step == n
        ]
    with (run_dir / "metrics.jsonl").open("a") as f:
        f.writelines(json.dumps(r, separators=(",", ":")) + "\n" for r in lines)


def test_enter_on_the_samples_panel_opens_the_compare_and_esc_closes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    write_records(tmp_path / "runs" / "default-scripted", RUN_A)  # the scripted run's directory
    write_records(tmp_path / "runs" / "tiny-b", RUN_B)
    factory = ScriptedFactory()
    app = CockpitApp(factory, "default")

    async def scenario(pilot: Any) -> None:
        await settle(pilot, factory)
        app.comparing.overlay_runs([Path("runs/tiny-b")])
        await wait_for(pilot, lambda: bool(app.main_screen.loss_panel.overlays))
        await pilot.press("5")  # zoom the samples panel: it has the focus
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, SamplesScreen))
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, SamplesScreen)
        assert [s.name for s in screen.sources] == ["default-scripted", "tiny-b"]
        assert screen.query_one(OptionList).option_count == 2  # def, The
        shown = body_text(screen)
        assert "def bar(x)" not in shown  # the prompt is shown apart: only the continuation
        assert "bar(x):" in shown and "get(self, key):" in shown
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, SamplesScreen)
        assert app.main_screen.samples_panel.has_focus

    run_pilot(app, scenario, size=(160, 48))


def test_a_long_run_shows_its_newest_steps_and_says_so() -> None:
    samples = tuple((step, DEF, f"def f{step}(x)") for step in range(1, 251))
    app = ScreenHost([SampleSource("tiny-a", samples)])

    async def scenario(pilot: Any) -> str:
        await pilot.pause()
        return body_text(app.screen)

    shown = run_pilot(app, scenario)
    assert shown.startswith("the newest 200 of 250 steps")
    # step 51, the first shown, is compared with step 50 all the same
    assert "\nstep 51  1 word changed\nf51(x)\n" in shown and "step 50 " not in shown
    assert shown.endswith("step 250  1 word changed\nf250(x)")
