"""The anomaly banner as a pure function: the fault, the damage note, what works in each state."""

from __future__ import annotations

import math

from cockpit.figures.anomaly import Anomaly, anomaly_banner, fault_of, loss_in

NAN_MSG = "non-finite gradient at step 226 (loss 906); the update was not applied: paused"


def test_the_engine_advice_is_cut_and_its_loss_read() -> None:
    assert fault_of(NAN_MSG) == (
        "non-finite gradient at step 226 (loss 906); the update was not applied"
    )
    assert loss_in(NAN_MSG) == 906.0
    assert loss_in("loss spike at step 1,200: 9.5, 4x the average; rolling back") == 9.5
    assert loss_in("no loss here") is None


def test_paused_banner_offers_r_only_with_a_checkpoint() -> None:
    a = Anomaly.from_message("nan", NAN_MSG)
    vocab = 65  # ln 65 = 4.17: a loss of 906 is far beyond a fresh model's
    with_ckpt = anomaly_banner(a, "paused", "runs/x/ckpt-000200.pt", vocab, [])
    assert with_ckpt.split(" · ") == [
        f"✗ {a.fault}",
        f"the weights may be damaged (a fresh model's loss is {math.log(vocab):.2f})",
        "paused",
        "r: back to ckpt-000200.pt, LR halved",
        "l: lower the LR, then space: resume",
    ]
    without = anomaly_banner(a, "paused", None, vocab, [])
    assert "r: back" not in without and "p: start afresh" in without
    assert "paused, no checkpoint yet" in without


def test_a_healthy_loss_gets_no_damage_note_and_an_ended_run_its_whole_message() -> None:
    a = Anomaly.from_message("spike", "loss spike at step 90: nan: paused")
    banner = anomaly_banner(a, "paused", None, 65, [3.9, float("nan")])
    assert "damaged" not in banner  # the last finite loss, 3.9, is a fresh model's
    assert banner.split(" · ")[1:3] == ["paused, no checkpoint yet", "l: lower the LR, then space: resume"]
    assert anomaly_banner(a, "failed", None, 65, []) == f"✗ {a.message}"
