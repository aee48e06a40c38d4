"""A series' spec and record, alone (no run): changes parsed as `--set` reads them, the running
order with the baseline's repeats spread among the changes, what each run needs next read from
its own directory (a finished or failed run is done, a stopped one with a checkpoint resumes,
one without starts again in a directory of its own), and a rerun under the same --name keeping
its runs while another series is refused."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cockpit.ablation.series_record import DONE, RESTART, RESUME, START, Series, dir_name
from cockpit.ablation.spec import AblationSpec, Change, check_spec, parse_change, spec_from_file
from engine.config import ConfigError


def record(**fields: object) -> str:
    return json.dumps(fields, separators=(",", ":"))  # as the engine writes them


def ended(run_dir: Path, state: str, step: int, checkpoint: bool) -> None:
    """A run directory whose final state record is `state` at `step`."""
    run_dir.mkdir(parents=True)
    lines = [
        record(kind="state", state="running", step=0, reason="", time=1.0),
        record(kind="state", state=state, step=step, reason="", time=2.0),
    ]
    (run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    if checkpoint:
        (run_dir / f"ckpt-{step:08d}.pt").write_bytes(b"")


def test_a_change_is_its_settings_as_set_spells_them():
    change = parse_change("weight_decay=0 model.qk_norm=false")
    assert change == Change("weight_decay=0 model.qk_norm=false", ("optim.weight_decay=0", "model.qk_norm=false"))
    # quoted as a shell quotes: the value with its space is one word, a string
    assert parse_change('data.source="my corpus.txt"').settings == ('data.source="my corpus.txt"',)
    # one spelling whatever the command's: a rerun finds the same runs
    assert parse_change("lr=1e-3 optim.name=lion").settings == ("optim.lr=0.001", 'optim.name="lion"')
    with pytest.raises(ConfigError, match="'x' is not KEY=VALUE"):
        parse_change("x")
    with pytest.raises(ConfigError, match="empty; give KEY=VALUE"):
        parse_change("  ")


def test_the_baselines_repeats_are_spread_among_the_changes(tmp_path):
    changes = tuple(parse_change(f"optim.lr={lr}") for lr in ("1e-3", "2e-3", "4e-3", "5e-3"))
    series = Series.open(AblationSpec(preset="tiny", changes=changes, repeat_baseline=2), tmp_path)
    assert [r.label for r in series.runs] == [
        "baseline", "optim.lr=1e-3", "optim.lr=2e-3", "baseline #2", "optim.lr=4e-3", "optim.lr=5e-3",
    ]  # fmt: skip
    assert series.runs[3].settings == ("train.seed=1338",)  # tiny's seed is 1337: a seed of its own
    assert [r.run_dir.name for r in series.runs][:4] == ["00-baseline", "01-optim.lr=1e-3", "02-optim.lr=2e-3", "03-baseline-2"]
    assert series.overrides(series.runs[1]) == ["optim.lr=0.001"]
    assert series.position(series.runs[3]) == "ablate 4/6: baseline #2"
    assert dir_name(2, "model.norm=rmsnorm model.mlp=relu2") == "02-model.norm=rmsnorm+model.mlp=relu2"


def test_more_baselines_than_changes_never_run_two_baselines_in_a_row(tmp_path):
    changes = tuple(parse_change(f"optim.lr={lr}") for lr in ("1e-3", "2e-3"))
    series = Series.open(AblationSpec(preset="tiny", changes=changes, repeat_baseline=3), tmp_path)
    assert [r.label for r in series.runs] == [
        "baseline", "optim.lr=1e-3", "baseline #2", "optim.lr=2e-3", "baseline #3",
    ]  # fmt: skip


def test_what_a_run_needs_next_is_read_from_its_directory(tmp_path):
    changes = tuple(parse_change(f"optim.lr={lr}") for lr in ("1e-3", "2e-3", "4e-3"))
    spec = AblationSpec(preset="tiny", changes=changes, steps=10, name="s")
    series = Series.open(spec, tmp_path)
    first, second, third, fourth = series.runs
    ended(first.run_dir, "finished", 10, checkpoint=True)
    ended(second.run_dir, "stopped", 4, checkpoint=True)
    ended(third.run_dir, "stopped", 0, checkpoint=False)  # stopped before its first save
    assert [series.next_step(r) for r in series.runs] == [DONE, RESUME, RESTART, START]
    assert second.status == "stopped"
    assert series.restart_dir(third).name == "02-optim.lr=2e-3-retry2"  # the old one is kept
    assert (tmp_path / "s" / "02-optim.lr=2e-3" / "metrics.jsonl").is_file()
    series.save()
    again = Series.open(spec, tmp_path)
    assert [r.run_dir for r in again.runs] == [r.run_dir for r in series.runs]
    assert again.next_step(again.runs[2]) == START
    failed = tmp_path / "s" / "03-optim.lr=4e-3"
    ended(failed, "failed", 3, checkpoint=False)
    assert again.next_step(again.runs[3]) == DONE  # a failed run is a result, not run again


def test_a_rerun_under_its_name_keeps_the_runs_and_refuses_another_series(tmp_path):
    spec = AblationSpec(preset="tiny", changes=(parse_change("optim.lr=1e-3"),), steps=10, name="s")
    series = Series.open(spec, tmp_path)
    series.save()
    more = AblationSpec(preset="tiny", changes=(parse_change("optim.name=lion"), parse_change("optim.lr=1e-3")), steps=10, name="s")
    grown = Series.open(more, tmp_path)
    by_label = {r.label: r.run_dir.name for r in grown.runs}
    assert by_label["optim.lr=1e-3"] == "01-optim.lr=1e-3"  # where it was
    assert by_label["optim.name=lion"] not in ("00-baseline", "01-optim.lr=1e-3")
    other = AblationSpec(preset="tiny", changes=spec.changes, steps=20, name="s")
    with pytest.raises(ConfigError, match="holds another series .preset tiny, 10 steps.; this one is preset tiny, 20 steps"):
        Series.open(other, tmp_path)


def test_a_series_file_reads_quoted_and_dotted_keys(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(
        'preset = "tiny"\ntarget = 2.5\nrepeat_baseline = 2\n[settings]\n"eval.interval" = 5\n'
        '[[change]]\nname = "lion"\n"optim.name" = "lion"\n'
        "[[change]]\nmodel.qk_norm = true\nmodel.norm = \"rmsnorm\"\n"
    )
    spec = spec_from_file(path)
    assert spec.preset == "tiny" and spec.target == 2.5 and spec.repeat_baseline == 2
    assert spec.settings == ("eval.interval=5",)
    assert spec.changes == (
        Change("lion", ('optim.name="lion"',)),
        Change("model.qk_norm=true model.norm=rmsnorm", ("model.qk_norm=true", 'model.norm="rmsnorm"')),
    )
    check_spec(spec)  # every change loads with the preset
    # with a target, evaluations near it are 10 times as frequent (at least every step)
    assert spec.common_settings() == ["eval.interval=5", "train.stop_at_val=2.5", "eval.fine_interval=1"]


def test_a_target_evaluates_ten_times_as_often_near_it_unless_set():
    lion = (parse_change("optim.name=lion"),)
    assert AblationSpec("tiny", lion, target=2.9).common_settings() == [
        "train.stop_at_val=2.9", "eval.fine_interval=5",  # tiny evaluates every 50 steps
    ]  # fmt: skip
    assert AblationSpec("tiny", lion, steps=20).common_settings() == ["train.max_steps=20"]  # no target
    off = AblationSpec("tiny", lion, target=2.9, settings=("eval.fine_interval=0",))
    assert off.common_settings() == ["eval.fine_interval=0", "train.stop_at_val=2.9"]  # --set wins
    # the cadence is not part of what makes the series: the same command finds the same runs
    assert AblationSpec("tiny", lion, target=2.9).identity()["settings"] == []


def test_a_target_with_no_periodic_evaluation_is_refused_in_one_line():
    lion = (parse_change("optim.name=lion"),)
    with pytest.raises(ConfigError, match=r"^--set: eval.interval is 0 .* no run could stop at --target 2.9; --set eval.interval=N"):
        check_spec(AblationSpec("tiny", lion, target=2.9, settings=("eval.interval=0",)))
    with pytest.raises(ConfigError, match=r"^--change 'eval.interval=0': eval.interval is 0"):
        check_spec(AblationSpec("tiny", (parse_change("eval.interval=0"),), target=2.9))
    check_spec(AblationSpec("tiny", lion, steps=20, settings=("eval.interval=0",)))  # no target: fine


@pytest.mark.parametrize(
    ("text", "says"),
    [
        # a wrong type is said as such, not as a missing baseline
        ('preset = 3\n[[change]]\n"optim.name" = "lion"\n', "preset: expected a preset name or .toml path in quotes, got 3"),
        # a name that is no label was taken (the table's row read 3, or was blank)
        ('preset = "tiny"\n[[change]]\nname = 3\n"optim.name" = "lion"\n', "change 1: name: expected its label in quotes"),
        ('preset = "tiny"\n[[change]]\nname = ""\n"optim.name" = "lion"\n', "change 1: name: expected its label in quotes"),
    ],
)
def test_a_series_file_of_a_wrong_type_says_which_key(tmp_path, text, says):
    path = tmp_path / "s.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(says)):
        spec_from_file(path)


def test_an_unknown_key_in_a_change_is_not_said_to_be_a_set(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('preset = "tiny"\n[[change]]\noptim = "lion"\n')
    with pytest.raises(ConfigError) as caught:
        spec_from_file(path)
    assert str(caught.value).endswith("s.toml: change 1: unknown key 'optim' (did you mean 'optim.lr', 'optim.eps' or 'optim.name'?)")
    with pytest.raises(ConfigError) as caught:
        parse_change("a=1")
    assert str(caught.value).startswith("--change 'a=1': unknown key 'a' (")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("x", "malformed TOML"),  # it read '--set: malformed TOML' (or 'the baseline: ...')
        ('[model]\nn_layer = "x"\n', "model.n_layer: expected an integer, got 'x'"),
    ],
)
def test_a_bad_preset_file_is_said_as_the_preset_s(tmp_path, text, says):
    preset = tmp_path / "mine.toml"
    preset.write_text(text)
    spec = AblationSpec(str(preset), (parse_change("optim.name=lion"),), settings=("sample.interval=0",))
    with pytest.raises(ConfigError) as caught:
        check_spec(spec)
    assert str(caught.value).startswith(f"--preset {preset}: ") and says in str(caught.value)
