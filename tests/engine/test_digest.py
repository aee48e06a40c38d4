"""The digest of a time away, from hand-written records: steps and tokens, evaluations, alerts
and what was done about them (a rollback, a cooldown set), checkpoints, settings and who changed
them; when a viewer's gap is worth one; durations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.rundir.digest import (
    AWAY_MIN_S,
    away_digest,
    digest,
    digest_lines,
    last_detach,
    parse_duration,
)

T0 = 1_700_000_000.0
HOUR = 3600.0


def step(t: float, n: int) -> dict:
    return {"kind": "step", "time": T0 + t, "step": n, "loss": 2.0, "lr": 1e-3, "grad_norm": 1.0,
            "tokens_per_s": 1e4, "step_time_s": 0.1, "tokens": n * 1000}  # fmt: skip


def clock(t: float) -> str:
    return f"t+{(t - T0) / HOUR:g}h"


RECORDS = [
    {"kind": "run_started", "time": T0, "preset": "tiny", "resumed_from": None},
    step(10, 100),
    {"kind": "viewer", "time": T0 + 20, "viewer": 1, "who": "alice@gpu1 (pts/3)",
     "read_only": False, "attached": True, "step": 100},
    {"kind": "eval", "time": T0 + 30, "step": 100, "train_loss": 2.5, "val_loss": 2.4, "train_time_s": 9},
    {"kind": "viewer", "time": T0 + HOUR, "viewer": 1, "who": "alice@gpu1 (pts/3)",
     "read_only": False, "attached": False, "step": 100},
    step(HOUR + 10, 200),
    {"kind": "eval", "time": T0 + 2 * HOUR, "step": 200, "train_loss": 2.0, "val_loss": 1.9,
     "train_time_s": 20, "val_bpb": 1.5},
    {"kind": "alert", "time": T0 + 2.5 * HOUR, "step": 250, "level": "warning", "code": "spike",
     "message": "loss spike: 6.1 against 2.0"},
    {"kind": "lr_changed", "time": T0 + 2.5 * HOUR + 1, "step": 200, "old_lr": 1e-3, "new_lr": 5e-4},
    {"kind": "alert", "time": T0 + 2.5 * HOUR + 1, "step": 200, "level": "info", "code": "rollback",
     "message": "rolled back to step 200"},
    {"kind": "checkpoint", "time": T0 + 3 * HOUR, "step": 300, "path": "/r/ckpt_300.pt", "reason": "interval"},
    {"kind": "command", "time": T0 + 4 * HOUR, "step": 390, "name": "set",
     "args": {"settings": {"schedule.cooldown_steps": 100}}, "viewer": 2, "who": "bob@gpu1 (pts/9)"},
    {"kind": "settings_changed", "time": T0 + 4 * HOUR + 1, "step": 390,
     "changes": {"schedule.cooldown_steps": [0, 100]}, "by": "viewer 2 bob@gpu1 (pts/9)"},
    {"kind": "eval", "time": T0 + 5 * HOUR, "step": 450, "train_loss": 2.1, "val_loss": 2.0, "train_time_s": 40},
    step(6 * HOUR, 500),
]  # fmt: skip


def test_the_digest_since_a_detach_counts_what_the_run_did_after_it() -> None:
    since = last_detach(RECORDS, "alice")
    assert since == T0 + HOUR
    d = digest(RECORDS, since)
    assert (d.step_from, d.step_to, d.steps, d.tokens) == (100, 500, 400, 400_000)
    assert d.evals == 2  # the eval at step 100 was seen
    assert (d.best_val, d.best_val_bpb, d.best_val_step) == (1.9, 1.5, 200)
    assert [(a.what, a.step) for a in d.alerts] == [("warning spike", 250)]  # info alerts are not
    assert [(a.who, a.what) for a in d.actions] == [
        ("engine", "rollback")
    ]  # what was done about it
    assert "rolled back to step 200" in d.actions[0].detail
    assert [(s.who, s.what) for s in d.settings] == [
        ("viewer 2 bob@gpu1 (pts/9)", "set schedule.cooldown_steps 0 -> 100")
    ]
    assert [(c.step, c.who, c.what) for c in d.checkpoints] == [(300, "interval", "ckpt_300.pt")]
    lines = digest_lines(d, now=T0 + 7 * HOUR, clock=clock)
    assert lines[0] == "Since t+1h (6h 0m ago):"
    assert lines[1] == "trained 400 steps (step 100 -> 500), 400.0k tokens"
    assert lines[2] == "evaluations: 2; best val 1.9000, 1.500 bpb at step 200, t+2h"
    text = "\n".join(lines)
    assert "alerts: 1\n  t+2.5h  step 250  warning spike (loss spike: 6.1 against 2.0)" in text
    assert (
        "what was done: 1\n  t+2.50028h  step 200  engine: rollback (rolled back to step 200"
        in text
    )
    assert (
        "settings changed: 1\n  t+4h  step 390  viewer 2 bob@gpu1 (pts/9): set schedule.cooldown_steps"
        in text
    )
    assert lines[-1] == "checkpoints: 1, the last ckpt_300.pt at step 300 (interval)"


def test_a_quiet_window_says_none_and_a_viewer_gets_no_digest() -> None:
    d = digest(RECORDS, T0 + 6 * HOUR)
    assert d.empty and d.step_to == 500
    assert digest_lines(d, now=T0 + 7 * HOUR, clock=clock)[1:] == [
        "no steps trained (at step 500)", "evaluations: none", "alerts: none",
        "settings changed: none", "checkpoints: none",
    ]  # fmt: skip


def test_a_viewer_gets_a_digest_only_after_a_gap_and_only_its_own(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("".join(json.dumps(r) + "\n" for r in RECORDS) + '{"kind":"st')  # a cut line
    assert away_digest(metrics, "alice", now=T0 + 7 * HOUR).steps == 400
    assert away_digest(metrics, "alice", now=T0 + HOUR + AWAY_MIN_S - 1) is None  # back too soon
    assert away_digest(metrics, "bob", now=T0 + 7 * HOUR) is None  # never detached: never watched
    assert away_digest(metrics, "alice", min_gap_s=0, now=T0 + 7 * HOUR) is not None


@pytest.mark.parametrize(
    ("text", "seconds"), [("30m", 1800), ("8h", 28800), ("2d", 172800), ("90s", 90), ("1.5h", 5400)]
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["8", "h", "8x", "-1h", "0m", "1h30m", ""])
def test_a_bad_duration_is_one_line_saying_how_to_write_one(text: str) -> None:
    with pytest.raises(
        ValueError, match=r"is not a duration; write a number and a unit: 90s, 30m, 8h or 2d"
    ):
        parse_duration(text)


def test_a_long_list_shows_the_newest_and_counts_the_rest() -> None:
    alerts = [
        {"kind": "alert", "time": T0 + HOUR + 1 + i, "step": 100 + i, "level": "warning", "code": "disk",
         "message": f"no room {i}"}
        for i in range(10)
    ]  # fmt: skip
    lines = digest_lines(digest([*RECORDS[:5], *alerts], T0 + HOUR), now=T0 + 2 * HOUR, clock=clock)
    at = lines.index("alerts: 10")
    assert lines[at + 1] == "  (2 earlier not listed: the journal, j in the app, has them all)"
    assert "no room 2" in lines[at + 2] and "no room 9" in lines[at + 9]
