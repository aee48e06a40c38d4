"""The engine says what to do in words; the app shows the same advice with its keys."""

from __future__ import annotations

from cockpit.figures.anomaly import with_keys
from engine.train.disk_full import FREE_SPACE
from engine.train.fault_handler import NO_CHECKPOINT
from engine.train.faults import decide_anomaly


def test_the_engine_names_no_key_and_the_app_adds_its_own() -> None:
    paused = decide_anomaly(
        "loss is not finite at step 15",
        policy="pause", interactive=True, rollbacks=0, max_rollbacks=3, checkpoint_name=None,
    )  # fmt: skip
    unreadable = decide_anomaly(
        "loss is not finite at step 15",
        policy="rollback", interactive=True, rollbacks=0, max_rollbacks=3,
        checkpoint_name="ckpt-00000010.pt", checkpoint_problem="ckpt-00000010.pt is damaged",
    )  # fmt: skip
    for words in (paused.message, unreadable.message, NO_CHECKPOINT, FREE_SPACE):
        assert "press" not in words and "(l)" not in words and "(c " not in words, words
    assert with_keys(paused.message) == (
        "loss is not finite at step 15: paused; press r to roll back to the last checkpoint "
        "with half the LR, or l to lower the LR"
    )
    assert with_keys(unreadable.message).endswith(": paused; l lowers the LR, then space resumes")
    assert with_keys(NO_CHECKPOINT) == "no checkpoint to roll back to yet: lower the LR (l) and resume"
    assert with_keys(FREE_SPACE).endswith("once there is room (c retries now)")


def test_a_message_without_advice_is_left_as_the_engine_wrote_it() -> None:
    message = "val loss is nan at step 40"
    assert with_keys(message) == message
