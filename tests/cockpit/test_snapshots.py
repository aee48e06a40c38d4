"""Snapshot tests: the cockpit as drawn at 80x24 and 160x48, fed by the scripted trainer.

Everything drawn is frozen: event timestamps are fixed, plots are redrawn on demand, toasts are
cleared before the screenshot and the input cursor does not blink. Update with
`pytest tests/cockpit --snapshot-update` and look at the SVGs before committing them.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pilot import settle
from scripted import ScriptedFactory, config_error

from cockpit.app.cockpit_app import CockpitApp

SIZES = {"80x24": (80, 24), "160x48": (160, 48)}


def _fixed_presets(_dirs: Any = ()) -> dict[str, Any]:
    """The preset menu's content, frozen so adding a preset does not change the snapshot."""
    from engine.config.presets import PresetInfo

    rows = [
        (
            "default",
            "built-in",
            "Char-level GPT on the Python docs that ship with Python: trains anywhere, offline",
        ),
        (
            "gpt2-small",
            "built-in",
            "GPT-2 124M (12x768, block 1024, r50k_base BPE) on your corpus: pass --data PATH",
        ),
        (
            "nanogpt-cpu",
            "built-in",
            "nanoGPT's CPU recipe on Tiny Shakespeare (char): 4x128, block 64, 2000 iters",
        ),
        (
            "shakespeare-char",
            "built-in",
            "nanoGPT's GPU recipe on Tiny Shakespeare (char): 6x384, block 256, 5000 iters",
        ),
        ("tiny", "built-in", "A seconds-long smoke test: a 2-layer model on the Python docs"),
        ("my-experiment", "user", "wider MLP, rotary, Muon"),
    ]
    return {n: PresetInfo(n, Path(f"/presets/{n}.toml"), o, d) for n, o, d in rows}


def _data_available(name: str) -> tuple[bool, str, bool]:
    if name in ("nanogpt-cpu", "shakespeare-char"):
        return False, "tinyshakespeare not downloaded (offline)", False
    if name == "gpt2-small":
        return True, "stand-in corpus (pydoc): pass --data", True
    return True, "", False


def scenario(
    keys: Iterable[str] = (), factory: ScriptedFactory | None = None, clear_toasts: bool = True
) -> tuple[CockpitApp, Callable[[Any], Awaitable[None]]]:
    factory = factory or ScriptedFactory()
    app = CockpitApp(factory, "default", data_available=_data_available)

    async def run_before(pilot: Any) -> None:
        await settle(pilot, factory)
        if clear_toasts:  # before any dialog: a dialog shows the main screen's toasts
            app.clear_notifications()
            await pilot.pause()
        for key in keys:
            await pilot.press(key)
            await pilot.pause()
        await settle(pilot)
        if clear_toasts:
            app.clear_notifications()
        await pilot.pause()

    return app, run_before


@pytest.fixture(params=list(SIZES), ids=list(SIZES))
def size(request: pytest.FixtureRequest) -> tuple[int, int]:
    return SIZES[request.param]


@pytest.fixture(autouse=True)
def _frozen_presets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("engine.config.presets.discover", _fixed_presets)


@pytest.fixture(autouse=True)
def _utc_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Times of day on screen (e.g. "readings stopped 22:13:34") read the same everywhere."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_running(snap_compare: Any, size: tuple[int, int]) -> None:
    app, before = scenario()
    assert snap_compare(app, terminal_size=size, run_before=before)


def test_paused(snap_compare: Any, size: tuple[int, int]) -> None:
    app, before = scenario(["space"])
    assert snap_compare(app, terminal_size=size, run_before=before)


def test_lr_dialog_error(snap_compare: Any, size: tuple[int, int]) -> None:
    app, before = scenario(["l", "a", "b", "c", "enter"])
    assert snap_compare(app, terminal_size=size, run_before=before)


def test_preset_menu(snap_compare: Any, size: tuple[int, int]) -> None:
    app, before = scenario(["p"])
    assert snap_compare(app, terminal_size=size, run_before=before)


def test_help(snap_compare: Any, size: tuple[int, int]) -> None:
    app, before = scenario(["question_mark"])
    assert snap_compare(app, terminal_size=size, run_before=before)


def test_config_error(snap_compare: Any, size: tuple[int, int]) -> None:
    app, before = scenario(factory=ScriptedFactory(fail={"default": config_error("default")}))
    assert snap_compare(app, terminal_size=size, run_before=before)


def test_engine_failed(snap_compare: Any, size: tuple[int, int]) -> None:
    app, before = scenario(factory=ScriptedFactory(fail_at=240, telemetry="nvml"))
    assert snap_compare(app, terminal_size=size, run_before=before)


def test_nan_alert(snap_compare: Any, size: tuple[int, int]) -> None:
    app, before = scenario(factory=ScriptedFactory(nan_at=260))
    assert snap_compare(app, terminal_size=size, run_before=before)


def test_non_finite_gradient_paused(snap_compare: Any, size: tuple[int, int]) -> None:
    """The banner names the fault (loss 906: the weights may be damaged) and r's checkpoint."""
    app, before = scenario(factory=ScriptedFactory(nan_at=280, anomaly="gradient"))
    assert snap_compare(app, terminal_size=size, run_before=before)


def test_unattended_rollback(snap_compare: Any) -> None:
    """Rolled back on its own: the banner says so, and nothing about a pause."""
    app, before = scenario(factory=ScriptedFactory(nan_at=280, on_anomaly="rollback"))
    assert snap_compare(app, terminal_size=(160, 48), run_before=before)


def test_spike_pause_resumed(snap_compare: Any) -> None:
    """Resumed from a spike pause: no banner left."""
    app, before = scenario(["space"], factory=ScriptedFactory(nan_at=280, anomaly="spike"))
    assert snap_compare(app, terminal_size=(80, 24), run_before=before)


def test_rollback_confirm(snap_compare: Any) -> None:
    """r on a healthy run asks first, showing what would be lost."""
    app, before = scenario(["r"])
    assert snap_compare(app, terminal_size=(80, 24), run_before=before)


def test_device_two_gpus(snap_compare: Any, size: tuple[int, int]) -> None:
    app, before = scenario(factory=ScriptedFactory(telemetry="nvml"))
    assert snap_compare(app, terminal_size=size, run_before=before)


def test_device_telemetry_unavailable(snap_compare: Any) -> None:
    app, before = scenario(factory=ScriptedFactory(telemetry="unavailable"))
    assert snap_compare(app, terminal_size=(160, 48), run_before=before)


def test_quit_confirm(snap_compare: Any) -> None:
    app, before = scenario(["q"])
    assert snap_compare(app, terminal_size=(80, 24), run_before=before)


def test_zoomed_samples_compact(snap_compare: Any) -> None:
    app, before = scenario(["5"])
    assert snap_compare(app, terminal_size=(80, 24), run_before=before)


def test_loss_tokens_log(snap_compare: Any) -> None:
    app, before = scenario(["t", "g"])
    assert snap_compare(app, terminal_size=(160, 48), run_before=before)


def test_zoomed_device_compact(snap_compare: Any) -> None:
    app, before = scenario(["3"])
    assert snap_compare(app, terminal_size=(80, 24), run_before=before)


def test_zoomed_memory_compact(snap_compare: Any) -> None:
    app, before = scenario(["4"])
    assert snap_compare(app, terminal_size=(80, 24), run_before=before)


def test_live_settings(snap_compare: Any, size: tuple[int, int]) -> None:
    """S: every live setting with its value, its help and a field; the box leaves the LR panel
    in view (beside it when wide, above it when compact); cool down refused on a cosine run."""
    app, before = scenario(["S"])
    assert snap_compare(app, terminal_size=size, run_before=before)
