"""QA of `cockpit ablate` (issue 26 item 3), each test a defect found by trying it as a user:
a bad --runs is one line and exit 2 (it was a traceback), a series file's repeat_baseline = 0
is refused (it became 1), a value no setting takes names its file and change, and a run of a
headless series stopped from elsewhere (`cockpit attach`'s "stop the run") ends the series
as the app's does (the next run started)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cockpit.ablation.spec import check_spec, spec_from_file
from cockpit.cli.ablate import run_headless, spec_from_args
from cockpit.cli.command_line import main, parse_args
from cockpit.cli.series_driver import SeriesDriver
from engine.config import ConfigError

SERIES = ["--preset", "tiny", "--steps", "5", "--change", "optim.name=lion", "--headless"]


def test_a_runs_folder_that_is_a_file_or_cannot_be_made_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("not a folder")
    assert main(["ablate", *SERIES, "--runs", "afile"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--runs afile: not a directory" in err and "Traceback" not in err
    # under a file: the series' directory cannot be made (this was an OSError's traceback)
    assert main(["ablate", *SERIES, "--runs", "afile/sub"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--runs afile/sub: cannot write the series there" in err
    assert "pass --runs DIR" in err
    assert (tmp_path / "afile").read_text() == "not a folder"


def test_a_series_file_with_repeat_baseline_0_is_refused_not_made_1(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('preset = "tiny"\nsteps = 5\nrepeat_baseline = 0\n[[change]]\n"optim.name" = "lion"\n')
    spec = spec_from_file(path)
    assert spec.repeat_baseline == 0
    with pytest.raises(ConfigError, match="at least 1"):
        check_spec(spec)
    path.write_text('preset = "tiny"\nsteps = 5\n[[change]]\n"optim.name" = "lion"\n')
    assert spec_from_file(path).repeat_baseline == 1  # left out: once


def test_a_value_no_setting_takes_names_the_file_and_the_change(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('preset = "tiny"\n[[change]]\nname = "dated"\n"optim.name" = 2020-01-01\n')
    with pytest.raises(ConfigError) as e:
        spec_from_file(path)
    assert str(e.value).startswith(f"{path}: change 'dated': optim.name: ")


class StoppedElsewhere:
    """A trainer whose run is stopped by someone else (attach's stop): no signal here."""

    def __init__(self, built: list) -> None:
        built.append(self)

    def run(self) -> str:
        return "stopped"

    def stop(self, **_: object) -> None:  # pragma: no cover - only a signal calls it
        raise AssertionError("no signal was sent")


def test_a_run_stopped_from_elsewhere_ends_the_headless_series(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    args = parse_args(["ablate", *SERIES, "--change", "model.norm=rmsnorm", "--name", "s"])
    spec = spec_from_args(args)
    check_spec(spec)
    from cockpit.ablation.series_record import Series

    driver = SeriesDriver(Series.open(spec, Path(args.runs_root)), args)
    built: list = []
    driver.engine = lambda plan, sinks=(), interactive=True: StoppedElsewhere(built)  # type: ignore[method-assign]
    assert run_headless(driver) == 1
    assert len(built) == 1  # the next run did not start, as in the app
    out = capsys.readouterr().out
    assert "ablate 2/3" not in out and "ablate stopped: 0 of 3 runs done" in out


@pytest.mark.parametrize(("term", "app"), [("dumb", False), ("xterm-256color", True)])
def test_a_dumb_terminal_runs_the_series_headless_as_cockpit_train_does(term, app, tmp_path, monkeypatch, capsys):
    import sys

    import cockpit.cli.ablate as ablate

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TERM", term)
    monkeypatch.delenv("TEXTUAL_DRIVER", raising=False)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    chosen: list[str] = []
    monkeypatch.setattr(ablate, "run_headless", lambda driver: chosen.append("headless") or 0)
    monkeypatch.setattr(ablate, "run_in_app", lambda driver: chosen.append("app") or 0)
    argv = [a for a in SERIES if a != "--headless"]
    assert main(["ablate", *argv]) == 0
    assert chosen == (["app"] if app else ["headless"])
    said = capsys.readouterr().err
    assert ("a dumb terminal (TERM=dumb), running headless" in said) is not app
    assert "no terminal" not in said  # there is one: it is dumb


def test_a_terminal_with_no_input_runs_the_series_headless(tmp_path, monkeypatch, capsys):
    """stdout a terminal, stdin not (`< /dev/null`): the app would wait for a q that never comes."""
    import sys

    import cockpit.cli.ablate as ablate

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.delenv("TEXTUAL_DRIVER", raising=False)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    monkeypatch.setattr(sys.stdin, "isatty", lambda: False)
    chosen: list[str] = []
    monkeypatch.setattr(ablate, "run_headless", lambda driver: chosen.append("headless") or 0)
    monkeypatch.setattr(ablate, "run_in_app", lambda driver: chosen.append("app") or 0)
    assert main(["ablate", *[a for a in SERIES if a != "--headless"]]) == 0
    assert chosen == ["headless"]
    assert "input is not a terminal" in capsys.readouterr().err


def test_a_change_dropped_and_another_of_the_same_name_never_takes_its_run(tmp_path):
    """--name n with a TOML change "x" = lion, then "x" = adafactor, then "x" = muon: muon was
    given lion's directory (01-x, dropped from the record by the adafactor command) and its
    finished run was reported as muon's. Now every run of the record is kept, lion's found again."""
    from cockpit.ablation.series_record import Series
    from cockpit.ablation.spec import AblationSpec, Change

    def series(optim: str) -> Series:
        change = Change(label="x", settings=(f'optim.name="{optim}"',))
        opened = Series.open(AblationSpec(preset="tiny", steps=5, name="n", changes=(change,)), tmp_path)
        opened.save()
        for run in opened.runs:
            run.run_dir.mkdir(exist_ok=True)  # as a run would
        return opened

    dirs = {optim: series(optim).runs[1].run_dir.name for optim in ("lion", "adafactor", "muon")}
    assert dirs["lion"] == "01-x" and len(set(dirs.values())) == 3  # each a directory of its own
    assert series("lion").runs[1].run_dir.name == "01-x"  # added back: its run is found
    assert series("adafactor").runs[1].run_dir.name == dirs["adafactor"]
    # a directory no record names (series.json lost) is not taken either
    (tmp_path / "n" / "series.json").unlink()
    assert series("lion").runs[1].run_dir.name not in dirs.values()


def test_the_notes_say_when_a_baseline_run_never_reached_the_target():
    """The time's mean and spread are over the baseline runs that reached the target; the
    note said "over its 3 runs" when one had not, a noise hidden."""
    from cockpit.ablation.results import RunResult
    from cockpit.ablation.table import build_table
    from cockpit.ablation.table_text import to_markdown

    def run(label: str, time: float | None, baseline: bool = True) -> RunResult:
        return RunResult(label, label, "finished", baseline, 100, 5.0, 2.8, time, 90 if time else None, 1e4)

    table = build_table([run("baseline", 2.0), run("baseline #2", None), run("baseline #3", 4.0), run("c", 3.0, False)], 2.9)
    assert table.base_time == 3.0 and table.time_spread is not None and table.time_spread.n == 2
    md = to_markdown(table)
    assert "Only 2 of the 3 baseline runs reached val 2.9: the time's mean and spread are of those alone." in md
    assert " not reached |" in md
    every = build_table([run("baseline", 2.0), run("baseline #2", 4.0), run("c", 3.0, False)], 2.9)
    assert "Only" not in to_markdown(every)


def test_a_changed_command_says_it_starts_a_new_series_beside_the_last_one(tmp_path):
    """Without --name, another change (or target, --set) is another series in a directory of
    its own, the baseline trained again: said in a line, not left to be found in runs/."""
    from cockpit.ablation.series_record import Series
    from cockpit.ablation.spec import AblationSpec, Change
    from cockpit.cli.ablate import new_series_note

    def spec(*optims: str, name: str | None = None) -> AblationSpec:
        changes = tuple(Change(o, (f'optim.name="{o}"',)) for o in optims)
        return AblationSpec(preset="tiny", steps=5, changes=changes, name=name)

    first = Series.open(spec("lion"), tmp_path)
    assert new_series_note(first) is None  # the first of its preset
    first.save()
    assert new_series_note(Series.open(spec("lion"), tmp_path)) is None  # the same command again
    note = new_series_note(Series.open(spec("lion", "muon"), tmp_path))
    assert note is not None and note.startswith("a new series, ") and str(first.directory) in note
    assert "not reused" in note and "--name SERIES" in note
    assert new_series_note(Series.open(spec("lion", "muon", name="mine"), tmp_path)) is None  # named: chosen


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ("optim.name=lion optim.name=adamw", "optim.name is given twice"),  # was "changes nothing"
        ("optim.name=lion optim.name=lion", "optim.name is given twice"),  # was run, labelled so
        ("=3", "'=3' is not KEY=VALUE"),  # was the engine's "--set: unknown key ''" and every key
    ],
)
def test_a_change_giving_a_key_twice_or_no_key_is_one_line_naming_it(change, said, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["ablate", "--preset", "tiny", "--steps", "5", "--change", change, "--headless"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err and "known keys" not in err
    assert not (tmp_path / "runs").exists()  # refused before anything ran


def test_a_file_change_without_a_name_is_labelled_as_a_change_is_typed(tmp_path):
    """Its label and directory were `model.norm="rmsnorm"` and `02-model.norm=_rmsnorm_+...`."""
    from cockpit.ablation.series_record import dir_name

    path = tmp_path / "s.toml"
    path.write_text(
        'preset = "tiny"\n[[change]]\nmodel.norm = "rmsnorm"\nmodel.mlp = "relu2"\n'
        '[[change]]\n"data.source" = "my corpus.txt"\n[[change]]\n"model.qk_norm" = true\n'
    )
    changes = spec_from_file(path).changes
    assert [c.label for c in changes] == [
        "model.norm=rmsnorm model.mlp=relu2", 'data.source="my corpus.txt"', "model.qk_norm=true"
    ]
    assert changes[0].settings == ('model.norm="rmsnorm"', 'model.mlp="relu2"')  # what is compared
    assert dir_name(1, changes[0].label) == "01-model.norm=rmsnorm+model.mlp=relu2"


def test_a_preset_name_given_as_the_series_file_says_preset(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["ablate", "tiny", "--change", "optim.name=lion", "--headless"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "tiny: no such file" in err and "--preset tiny" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["--steps", "30", "--change", "train.max_steps=10"],  # ran 10 steps, its train time set against 30's
        ["--steps", "30", "--set", "train.max_steps=50", "--change", "optim.name=lion"],  # --steps won unsaid
        ["--target", "2.9", "--change", "stop_at_val=2"],  # ran past the series' target
    ],
)
def test_a_change_or_setting_of_what_the_series_measures_to_is_refused(argv, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["ablate", "--preset", "tiny", *argv, "--headless"]) == 2
    err = capsys.readouterr().err
    option = argv[0]
    assert err.count("\n") == 1 and f"is the series' {option} " in err and f"change {option} (another series)" in err
    # without --steps, a change of train.max_steps is a change as any other
    spec = spec_from_args(parse_args(["ablate", "--preset", "tiny", "--change", "train.max_steps=10"]))
    check_spec(spec)
