"""Bits per byte where runs are compared: the `cockpit runs` column and JSON, the overlay's and
the loss panel's bpb unit, the note when tokenizers differ; runs recorded before bits per
byte list and compare as before, with "-" (never a made-up number)."""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pilot import run_pilot
from test_loss_overlay import LossApp, RecordingPanel, bottom_border, feed
from textual.pilot import Pilot

from cockpit.cli import compare as compare_cli
from cockpit.cli import runs as runs_cli
from cockpit.figures.overlay import Overlay, TokenUnit, tokenizer_note
from cockpit.figures.run_table import table
from engine.rundir import list_runs, read_curves, run_tokenizer

NOW = time.time()
TRAIN_SCALE, VAL_SCALE = 0.4, 0.5  # bits per byte per nat of loss of the runs written here


def write_run(run_dir: Path, *, bpb: bool, tokenizer: str = "char", steps: int = 300) -> Path:
    """A run's metrics.jsonl as the engine writes it, its evals with bits per byte or, as
    before they were recorded, without the keys at all."""
    run_dir.mkdir(parents=True)
    t = NOW - 3600
    lines: list[dict[str, Any]] = [
        {"kind": "run_started", "time": t, "preset": "tiny", "start_step": 0, "max_steps": steps,
         "tokens_per_step": 64, "resumed_from": None, "train_time_s": 0.0, "tokenizer": tokenizer},
    ]  # fmt: skip
    for n in range(1, steps + 1):
        loss = 2.0 + 2.0 * math.exp(-n / 50)
        lines.append({"kind": "step", "time": t + n, "step": n, "loss": loss, "tokens": 64 * n,
                      "step_time_s": 0.01})  # fmt: skip
        if n % 100 == 0:
            val = loss + 0.1 + (0.2 if n == 300 else 0.0)  # the best at 200
            record = {"kind": "eval", "time": t + n + 0.5, "step": n, "train_loss": loss,
                      "val_loss": val, "train_time_s": n * 0.01, "full_split": False}  # fmt: skip
            if bpb:
                record |= {"train_bpb": loss * TRAIN_SCALE, "val_bpb": val * VAL_SCALE}
            lines.append(record)
    lines.append({"kind": "state", "time": t + steps + 1, "state": "finished", "step": steps})
    text = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in lines)
    (run_dir / "metrics.jsonl").write_text(text)
    return run_dir


def val_at(run_dir: Path, step: int) -> float:
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["kind"] == "eval" and record["step"] == step:
            return record["val_loss"]
    raise AssertionError(step)


# ---------------------------------------------------------------------- cockpit runs


def test_runs_lists_the_best_val_bpb_and_a_dash_for_a_run_recorded_before_them(tmp_path: Path) -> None:
    new = write_run(tmp_path / "new", bpb=True)
    write_run(tmp_path / "old", bpb=False)
    listed = {r.name: r for r in list_runs(tmp_path)}
    header, *rows = table(list(listed.values()), NOW, width=160)
    assert "BPB" in header.split()
    at = header.split().index("BPB") - 1  # "BEST VAL" is two words
    cells = {row.split()[0]: row.split() for row in rows}
    assert cells["new"][at] == f"{val_at(new, 200) * VAL_SCALE:.3f}"  # the lowest: step 200's
    assert cells["old"][at] == "-"
    as_json = {name: r.as_json() for name, r in listed.items()}
    assert as_json["new"]["best_val_bpb"] == pytest.approx(val_at(new, 200) * VAL_SCALE)
    assert as_json["new"]["best_val_bpb_step"] == 200
    assert as_json["new"]["last_val_bpb"] == pytest.approx(val_at(new, 300) * VAL_SCALE)
    assert as_json["old"]["best_val_bpb"] is None and as_json["old"]["last_val_bpb"] is None
    assert as_json["old"]["best_val_loss"] == pytest.approx(val_at(tmp_path / "old", 200))


def test_the_json_listing_has_the_bpb_fields(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_run(tmp_path / "new", bpb=True)
    args = argparse.Namespace(root=str(tmp_path), json=True, since=None)
    assert runs_cli.run(args) == 0
    (entry,) = json.loads(capsys.readouterr().out)
    assert entry["best_val_bpb"] == pytest.approx(val_at(tmp_path / "new", 200) * VAL_SCALE)


def test_runs_all_recorded_before_bits_per_byte_list_as_before(tmp_path: Path) -> None:
    write_run(tmp_path / "old", bpb=False)
    header, row = table(list_runs(tmp_path), NOW, width=160)
    assert "BPB" not in header  # a column of dashes only would tell nothing
    assert row.split()[4].startswith(f"{val_at(tmp_path / 'old', 200):.4f}@200")


def test_a_summary_written_before_bits_per_byte_is_folded_on(tmp_path: Path) -> None:
    """summary.json from before the bpb facts: read, and later evals add them."""
    run_dir = write_run(tmp_path / "run", bpb=True)
    list_runs(tmp_path)  # writes summary.json
    summary = json.loads((run_dir / "summary.json").read_text())
    for key in ("best_val_bpbs", "last_val_bpb", "best_val_bpb"):
        del summary[key]
    summary["offset"] = 0  # folded again from the start: as a summary behind its metrics file
    (run_dir / "summary.json").write_text(json.dumps(summary))
    (listed,) = list_runs(tmp_path)
    assert listed.problem is None
    assert listed.as_json()["best_val_bpb"] == pytest.approx(val_at(run_dir, 200) * VAL_SCALE)


# ---------------------------------------------------------------------- overlays


def test_an_overlay_in_bits_per_byte_scales_each_split_by_its_own_factor(tmp_path: Path) -> None:
    curves = read_curves(write_run(tmp_path / "new", bpb=True, tokenizer="r50k_base"))
    assert curves.tokenizer == "r50k_base"
    assert curves.train_bpb_per_loss == pytest.approx(TRAIN_SCALE)
    assert curves.val_bpb_per_loss == pytest.approx(VAL_SCALE)
    overlay = Overlay(curves)
    assert overlay.has_unit("bpb")
    loss = overlay.value_at(150, "steps", 0.0)
    assert overlay.value_at(150, "steps", 0.0, "bpb") == pytest.approx(loss * TRAIN_SCALE)
    lx, ly, vx, vy = overlay.downsampled("steps", 0.0, 0, 300, 400)
    bx, by, bvx, bvy = overlay.downsampled("steps", 0.0, 0, 300, 400, "bpb")
    assert np.array_equal(lx, bx) and np.allclose(by, ly * TRAIN_SCALE)
    assert np.array_equal(vx, bvx) and np.allclose(bvy, vy * VAL_SCALE)


def test_a_run_recorded_before_bits_per_byte_still_compares_by_loss_only(tmp_path: Path) -> None:
    curves = read_curves(write_run(tmp_path / "old", bpb=False))
    assert curves.train_bpb_per_loss is None and curves.val_bpb_per_loss is None
    overlay = Overlay(curves)
    assert overlay.value_at(150, "steps", 0.9) is not None  # by loss, as before
    assert len(overlay.downsampled("steps", 0.9, 0, 300, 100)[1]) > 0
    assert not overlay.has_unit("bpb")
    assert overlay.value_at(150, "steps", 0.9, "bpb") is None  # never a made-up value
    assert all(len(a) == 0 for a in overlay.downsampled("steps", 0.9, 0, 300, 100, "bpb"))


def test_different_tokenizers_compared_by_loss_say_so_in_one_line() -> None:
    char, bpe, unknown = TokenUnit("char", None), TokenUnit("r50k_base", None), TokenUnit(None, None)
    note = tokenizer_note([char, bpe, unknown], 200)
    assert note is not None and "char, r50k_base" in note and "--bpb" in note
    assert "not comparable" in note
    short = tokenizer_note([char, bpe], 60)
    assert short is not None and len(short) <= 60 and "--bpb" in short
    assert tokenizer_note([char, char, unknown], 200) is None
    assert tokenizer_note([unknown, unknown], 200) is None


def test_measured_tokens_per_byte_tell_where_the_names_do_not() -> None:
    # a run whose tokenizer is not known (a run opened in the app), but whose evals measured
    # 1.44 bits per byte per nat (a char-level run: a token a byte) against a BPE run's 0.4
    own, bpe = TokenUnit(None, 1 / math.log(2)), TokenUnit("r50k_base", 0.4)
    note = tokenizer_note([own, bpe], 200)
    assert note is not None and note.startswith("token sizes differ") and "--bpb" in note
    # the same tokenizer on the same corpus: the same factor, whatever the names say
    assert tokenizer_note([TokenUnit("gpt2", 0.4), TokenUnit("r50k_base", 0.401)], 200) is None


def test_the_run_tokenizer_is_read_from_its_first_run_started(tmp_path: Path) -> None:
    assert run_tokenizer(write_run(tmp_path / "a", bpb=False, tokenizer="r50k_base")) == "r50k_base"
    assert run_tokenizer(tmp_path / "nowhere") is None


def test_compare_takes_a_bpb_flag() -> None:
    parser = argparse.ArgumentParser()
    compare_cli.add_arguments(parser)
    assert parser.parse_args(["a", "b", "--bpb"]).bpb is True
    assert parser.parse_args(["a", "b"]).bpb is False


def test_the_loss_panel_draws_itself_and_its_overlays_in_bits_per_byte(tmp_path: Path) -> None:
    app = LossApp(120)
    other = Overlay(read_curves(write_run(tmp_path / "bpe", bpb=True, tokenizer="r50k_base")))
    old = Overlay(read_curves(write_run(tmp_path / "old", bpb=False, tokenizer="char")))

    async def scenario(pilot: Pilot) -> None:
        panel = app.query_one(RecordingPanel)
        panel.current_tokenizer = "char"
        feed(panel, range(1, 301))
        panel.add_eval(200, 2.5, train_time_s=50.0, train_loss=2.4, train_bpb=2.4 * 1.5, val_bpb=2.5 * 1.6)
        panel.set_overlays([other, old])
        panel.flush(force=True)
        await pilot.pause()
        border = bottom_border(panel)
        assert "tokenizers differ (char, r50k_base)" in border and "--bpb" in border
        assert "now " not in border  # no differences between unlike units
        loss_range = panel.ylims[-1]

        panel.set_y_unit("bpb")
        panel.flush(force=True)
        await pilot.pause()
        border = bottom_border(panel)
        now = panel.ema.value * 1.5
        assert panel.current_value() == pytest.approx(now)
        bpe = other.value_at(300, "steps", panel.ema_beta, "bpb")
        assert f"now {now:.3f}" in border and f"bpe {bpe:.3f} {now - bpe:+.3f}" in border
        assert "old -" in border  # recorded no bits per byte
        assert "bits/byte" in str(panel.border_title)
        assert panel.ylims[-1] != loss_range  # the y axis is in the other unit
        panel.set_y_unit("loss")
        assert panel.y_unit == "loss" and "bits/byte" not in str(panel.border_title)

    run_pilot(app, scenario, size=(120, 24))


def test_a_headless_eval_line_shows_the_val_bits_per_byte_when_recorded() -> None:
    from cockpit.cli.headless import ProgressPrinter
    from engine.events import Eval

    lines: list[str] = []
    printer = ProgressPrinter(out=lines.append)
    printer(Eval(step=500, train_loss=2.26, val_loss=2.27, train_time_s=18.0, val_bpb=1.1234))
    printer(Eval(step=600, train_loss=2.2, val_loss=2.25, train_time_s=19.0))  # not known
    assert "| val 1.1234 bits/byte |" in lines[0] and lines[0].endswith("train time 18s")
    assert "bits/byte" not in lines[1]
