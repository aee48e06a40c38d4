"""A run started from inside the app (a preset picked with p, a new run with n) trains under the
app's runs root: `cockpit ablate --runs DIR`'s DIR (and `cockpit compare --runs DIR`'s), not
./runs/ whatever the app was given."""

from __future__ import annotations

from pathlib import Path

import pytest

from cockpit.cli.launch import run_app, train_arguments


class Captured(Exception):
    pass


def app_factory(runs_root: str):
    """The trainer factory run_app gives the app (the app itself is not run)."""

    def capture(factory, *_args, **_kwargs):
        raise Captured(factory)

    args = train_arguments(preset="tiny", no_telemetry=True)
    with pytest.raises(Captured) as caught:
        run_app(args, runs_root=runs_root, app_class=capture)
    return caught.value.args[0]


def test_a_preset_picked_in_the_app_trains_under_its_runs_root(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "series-root"
    factory = app_factory(str(root))
    factory("tiny")  # the run named on the command line: its own --run-dir rules
    picked = factory("tiny")  # p (a preset) or n (a run's config.toml): built the same way
    assert picked.run_dir is None  # made when it starts: a taken name gives way to a free one
    assert picked.runs_root == root
    assert not (tmp_path / "runs").exists()


def test_the_plain_app_s_picks_still_go_to_runs(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    factory = app_factory("runs")
    factory("tiny")
    assert factory("tiny").runs_root == Path("runs")
