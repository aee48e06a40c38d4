"""The ablation table's arithmetic, against hand-computed figures: the time to a target
interpolated between evaluations, the differences from the baseline's mean (absolute and %),
the baseline's spread as the noise and the differences inside it marked; and the CSV and
Markdown written from it. Pure: no run, no torch."""

from __future__ import annotations

import csv
import io
import json

import pytest

from cockpit.ablation.results import RunResult, eval_curve, read_result, time_to_target
from cockpit.ablation.table import build_table
from cockpit.ablation.table_text import to_csv, to_markdown


def test_the_time_to_a_target_is_linear_between_the_evaluations_around_it():
    curve = [(10, 1.0, 2.5), (20, 2.0, 2.1), (30, 3.0, 1.9)]
    # 2.1 at 2.0 s, 1.9 at 3.0 s: 2.0 is halfway, at 2.5 s; the step is the first eval below
    assert time_to_target(curve, 2.0) == (pytest.approx(2.5), 30)
    assert time_to_target(curve, 2.1) == (2.0, 20)  # reached exactly at an evaluation
    assert time_to_target(curve, 3.0) == (1.0, 10)  # the first evaluation is already below it
    assert time_to_target(curve, 1.0) is None  # never reached


def test_the_notes_say_how_far_apart_the_evaluations_around_the_crossings_were(tmp_path):
    def run(name: str, curve: list[tuple[int, float, float]]) -> RunResult:
        (tmp_path / name).mkdir()
        lines = [
            json.dumps({"kind": "eval", "time": 1e9 + t, "step": s, "train_time_s": t, "val_loss": v, "train_loss": v})
            for s, t, v in curve
        ]
        (tmp_path / name / "metrics.jsonl").write_text("\n".join(lines) + "\n")
        return read_result(name, tmp_path / name, "finished", 2.0, is_baseline=name == "base")

    base = run("base", [(50, 1.0, 2.5), (100, 2.0, 2.1), (105, 2.1, 2.05), (110, 2.2, 1.95)])
    assert (base.target_step, base.before_step) == (110, 105)
    assert base.time_to_target_s == pytest.approx(2.15)  # halfway between 2.05 and 1.95
    wide = run("wide", [(50, 1.0, 2.5), (100, 2.0, 1.9)])
    first = run("first", [(50, 1.0, 1.9)])
    never = run("never", [(50, 1.0, 2.5)])
    assert (first.target_step, first.before_step) == (50, None) and never.before_step is None
    text = to_markdown(build_table([base, wide, first, never], target=2.0))
    assert "and the first at or below it (5 to 50 steps apart)." in text
    assert "Reached at the run's first evaluation (first): that evaluation's time, at most the time it took (a lower --target, or --set eval.interval=N" in text
    assert "(5 steps apart)." in to_markdown(build_table([base], target=2.0))
    assert "steps apart" not in to_markdown(build_table([first], target=2.0))
    rows = list(csv.DictReader(io.StringIO(to_csv(build_table([base, first], target=2.0)))))
    assert [(r["target_step"], r["before_step"]) for r in rows] == [("110", "105"), ("50", "")]


def test_evaluations_a_resume_trained_again_replace_the_first_ones():
    records = [
        {"kind": "eval", "step": s, "train_time_s": t, "val_loss": v}
        for s, t, v in [(10, 1.0, 3.0), (20, 2.0, 2.5), (30, 3.0, 2.2), (30, 3.1, 2.3), (40, 4.1, 2.0)]
    ]
    records.insert(3, {"kind": "run_started"})  # resumed from step 20: step 30 again
    assert eval_curve(records) == [(10, 1.0, 3.0), (20, 2.0, 2.5), (30, 3.1, 2.3), (40, 4.1, 2.0)]


def result(label: str, time: float | None, val: float | None, baseline: bool = False) -> RunResult:
    return RunResult(
        label=label, run_dir=f"runs/s/{label}", status="finished", is_baseline=baseline, steps=100,
        train_time_s=20.0, final_val=val, time_to_target_s=time, target_step=90 if time else None,
        tokens_per_s=1000.0,
    )  # fmt: skip


RESULTS = [
    result("baseline", 10.0, 1.90, baseline=True),
    result("a", 11.0, 1.85),
    result("baseline #2", 12.0, 1.88, baseline=True),
    result("b", 9.0, 1.91),
    result("baseline #3", 14.0, 1.92, baseline=True),
    result("c", None, 1.95),
]


def test_differences_are_from_the_baselines_mean_and_judged_against_its_spread():
    table = build_table(RESULTS, target=1.9)
    assert table.base_time == pytest.approx(12.0)  # (10 + 12 + 14) / 3
    assert table.base_val == pytest.approx(1.90)  # (1.90 + 1.88 + 1.92) / 3
    assert (table.time_spread.low, table.time_spread.high) == (10.0, 14.0)
    assert table.time_spread.std == pytest.approx(2.0)  # sample std of 10, 12, 14
    assert table.val_spread.std == pytest.approx(0.02)
    rows = {row.result.label: row for row in table.rows}
    a, b, c = rows["a"], rows["b"], rows["c"]
    assert a.d_time.value == pytest.approx(-1.0)
    assert a.d_time.percent == pytest.approx(-100 / 12)  # -8.33 %
    assert a.d_time.in_noise is True  # 11 s is inside 10-14 s
    assert a.d_val.value == pytest.approx(-0.05)
    assert a.d_val.percent == pytest.approx(-0.05 / 1.90 * 100)  # -2.63 %
    assert a.d_val.in_noise is False  # 1.85 is below 1.88-1.92
    assert b.d_time.value == pytest.approx(-3.0) and b.d_time.percent == pytest.approx(-25.0)
    assert b.d_time.in_noise is False
    assert b.d_val.in_noise is True  # 1.91
    assert c.time_s is None and c.d_time is None  # not reached: no difference
    assert rows["baseline #2"].d_time.value == pytest.approx(0.0)
    assert rows["baseline #2"].d_time.in_noise is None  # a baseline is the noise, not judged


def test_one_baseline_run_gives_differences_but_no_noise():
    table = build_table([RESULTS[0], RESULTS[1]], target=1.9)
    assert table.time_spread is None and table.val_spread is None
    a = table.rows[1]
    assert a.d_time.value == pytest.approx(1.0) and a.d_time.percent == pytest.approx(10.0)
    assert a.d_time.in_noise is None
    assert "No noise estimate: --repeat-baseline" in to_markdown(table)


def test_without_a_target_the_whole_runs_train_time_is_compared():
    table = build_table([RESULTS[0], RESULTS[5]], target=None)
    assert [row.time_s for row in table.rows] == [20.0, 20.0]
    assert table.rows[1].d_time.value == 0.0


def test_the_csv_has_a_row_per_run_with_its_figures():
    rows = list(csv.DictReader(io.StringIO(to_csv(build_table(RESULTS, target=1.9)))))
    assert [r["run"] for r in rows] == ["baseline", "a", "baseline #2", "b", "baseline #3", "c"]
    a = rows[1]
    assert float(a["time_to_target_s"]) == 11.0 and float(a["d_time_s"]) == pytest.approx(-1.0)
    assert float(a["d_time_pct"]) == pytest.approx(-8.33333, rel=1e-4)
    assert a["time_in_noise"] == "true" and a["val_in_noise"] == "false"
    assert rows[5]["time_to_target_s"] == "" and rows[5]["d_time_s"] == ""
    assert rows[0]["baseline"] == "true" and a["baseline"] == "false"


def test_the_markdown_marks_the_differences_inside_the_noise():
    text = to_markdown(build_table(RESULTS, target=1.9, title="Ablation of x"))
    lines = text.splitlines()
    assert lines[0] == "# Ablation of x"
    header = next(line for line in lines if line.startswith("| run"))
    assert "time to val 1.9" in header
    a = next(line for line in lines if line.startswith("| a "))
    assert "-1.00 s (-8.3%) ~" in a  # inside the baseline's 10-14 s
    assert "-0.0500 (-2.63%) |" in a  # outside its val spread: not marked
    c = next(line for line in lines if line.startswith("| c "))
    assert "not reached" in c
    assert "Noise, the baseline's spread: time 10.0 s to 14.0 s (std 2.00 s)" in text


def test_a_target_no_run_reached_says_what_to_change():
    never = [result("baseline", None, 3.22, baseline=True), result("lion", None, 3.14)]
    text = to_markdown(build_table(never, target=0.5))
    assert text.count("not reached") == 2
    assert "No run reached val 0.5 (the lowest final val 3.1400, in at most 100 steps): a higher --target, or more --steps" in text
    assert "No run reached" not in to_markdown(build_table(RESULTS, target=1.9))  # some did


def test_a_run_changed_while_it_trained_is_marked_with_what_was_changed(tmp_path):
    # QA: + pressed twice during a series' run; its row read as the change's alone
    (tmp_path / "run").mkdir()
    lines = [
        {"kind": "eval", "time": 1e9, "step": 50, "train_time_s": 1.0, "val_loss": 3.0, "train_loss": 3.0},
        {"kind": "lr_changed", "time": 1e9, "step": 1005, "old_lr": 1e-3, "new_lr": 1.5625e-3, "scale": 1.5625},
        {"kind": "settings_changed", "time": 1e9, "step": 1200, "changes": {"optim.weight_decay": [0.1, 0.0]}, "by": "app"},
        {"kind": "settings_changed", "time": 1e9, "step": 1300, "changes": {"optim.lr": [1, 2]}, "replayed": True},
    ]
    (tmp_path / "run" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    changed = read_result("lion", tmp_path / "run", "finished", None)
    assert changed.changed_live == ("LR x1.56 at step 1005", "optim.weight_decay at step 1200")  # not the replayed
    table = build_table([RESULTS[0], changed], target=None)
    text = to_markdown(table)
    assert next(line for line in text.splitlines() if line.startswith("| lion ")).endswith("| finished * |")
    assert "* changed while it trained, so its figures are not those of its settings alone: lion: LR x1.56 at " \
        "step 1005, optim.weight_decay at step 1200." in text
    rows = list(csv.DictReader(io.StringIO(to_csv(table))))
    assert rows[0]["changed_live"] == "" and rows[1]["changed_live"] == "LR x1.56 at step 1005; optim.weight_decay at step 1200"
    assert "changed while it trained" not in to_markdown(build_table(RESULTS, target=1.9))


def test_a_rollback_is_said_as_one(tmp_path):
    (tmp_path / "run").mkdir()
    lines = [
        {"kind": "lr_changed", "time": 1e9, "step": 1750, "old_lr": 1e-3, "new_lr": 5e-4, "scale": 0.5},
        {"kind": "alert", "time": 1e9, "step": 1750, "level": "info", "code": "rollback", "message": "rolled back to step 1750"},
    ]
    (tmp_path / "run" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert read_result("b", tmp_path / "run", "finished", None).changed_live == ("rolled back to step 1750 (LR x0.5)",)
