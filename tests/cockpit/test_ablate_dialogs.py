"""During `cockpit ablate`, the dialogs of p (another preset), n (a new run of this config) and
f (a fork) say, before the user goes ahead, that going ahead stops the series (it said so only
in a warning after the fact); the plain app's dialogs say nothing of a series."""

from __future__ import annotations

from pathlib import Path

from pilot import run_pilot, settle, wait_for
from scripted import ScriptedTrainer
from textual.pilot import Pilot

from cockpit.app.ablating import AblationApp
from cockpit.app.cockpit_app import CockpitApp
from cockpit.screens.dialogs import ConfirmScreen
from cockpit.screens.preset_menu import PresetScreen
from cockpit.screens.settings import SettingsScreen

SERIES_LINE = "This stops the ablation series here"


class OneRunSeries:
    """A series of one run (the scripted one) that never gets to its next."""

    def __init__(self) -> None:
        self.current_engine = ScriptedTrainer("default")

    def next_run(self):
        return None

    def run_ended(self) -> None:
        pass

    def run_dirs(self):
        return []

    def finish(self) -> str:
        return "done"

    def stopped_note(self) -> str:
        return "ablate stopped"


def dialog_text(app: CockpitApp) -> str:
    return " ".join(str(w.render()) for w in app.screen.query("Static, Label"))


async def texts_of_p_n_f(pilot: Pilot, app: CockpitApp) -> list[str]:
    said = []
    await pilot.press("p")
    await wait_for(pilot, lambda: isinstance(app.screen, PresetScreen))
    names = [r.name for r in app.screen.rows]
    for _ in range(names.index("tiny") - names.index("default")):
        await pilot.press("down")
    await pilot.press("enter")
    await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
    said.append(dialog_text(app))
    await pilot.press("n")
    await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmScreen))
    await pilot.press("n")
    await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
    said.append(dialog_text(app))
    await pilot.press("escape")
    await wait_for(pilot, lambda: not isinstance(app.screen, ConfirmScreen))
    await pilot.press("f")
    await wait_for(pilot, lambda: isinstance(app.screen, SettingsScreen))
    said.append(dialog_text(app))
    await pilot.press("escape")
    return said


def said_by_p_n_f(app: CockpitApp) -> list[str]:
    """The app run until it settles, then what the dialogs of p, n and f say, one text each."""
    said: list[str] = []

    async def scenario(pilot: Pilot) -> None:
        await settle(pilot)
        said.extend(await texts_of_p_n_f(pilot, app))

    run_pilot(app, scenario)
    assert len(said) == 3
    return said


def series_app(series: OneRunSeries, engine_factory) -> AblationApp:
    """The app of `cockpit ablate` at its first run (the baseline) of `series`."""
    return AblationApp(
        engine_factory, "default", series=series, first_label="ablate 1/3: baseline",
        resume_factory=lambda *_: None,
    )  # fmt: skip


def a_run_dir(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "runs" / "default-scripted"  # the scripted run's directory
    run.mkdir(parents=True)
    (run / "config.toml").write_text('name = "default"\n')
    (run / "ckpt-000250.pt").write_bytes(b"")


def test_p_n_and_f_say_in_the_dialog_that_the_series_stops(tmp_path: Path, monkeypatch) -> None:
    a_run_dir(tmp_path, monkeypatch)
    series = OneRunSeries()
    said = said_by_p_n_f(series_app(series, lambda _preset: series.current_engine))
    for text in said:
        assert SERIES_LINE in text and "the same `cockpit ablate` command continues it" in text


def test_the_plain_app_s_dialogs_say_nothing_of_a_series(tmp_path: Path, monkeypatch) -> None:
    a_run_dir(tmp_path, monkeypatch)
    app = CockpitApp(lambda _preset: ScriptedTrainer("default"), "default", resume_factory=lambda *_: None)
    said = said_by_p_n_f(app)
    assert not any(SERIES_LINE in text for text in said)


def test_once_the_series_is_left_the_dialogs_no_longer_say_it_stops(tmp_path: Path, monkeypatch) -> None:
    a_run_dir(tmp_path, monkeypatch)
    series = OneRunSeries()
    series.current_engine = object()  # the run on screen is another (p, n or f went ahead)
    said = said_by_p_n_f(series_app(series, lambda _preset: ScriptedTrainer("default")))
    assert not any(SERIES_LINE in text for text in said)
