import math

import pytest

from engine.config.presets import load_preset
from engine.optim.schedule import constant_lr, cosine_lr, lr_at, planned_curve, wsd_lr


def test_cosine_matches_nanogpt_by_hand():
    # warmup 100, decay to 2000, peak 1e-3, floor 1e-4
    assert cosine_lr(0, 1e-3, 1e-4, 100, 2000) == pytest.approx(1e-3 * 1 / 101)
    assert cosine_lr(99, 1e-3, 1e-4, 100, 2000) == pytest.approx(1e-3 * 100 / 101)
    assert cosine_lr(100, 1e-3, 1e-4, 100, 2000) == pytest.approx(1e-3)
    # halfway through the decay the cosine is at 0.5: floor + 0.5 * (peak - floor)
    assert cosine_lr(1050, 1e-3, 1e-4, 100, 2000) == pytest.approx(5.5e-4)
    assert cosine_lr(2000, 1e-3, 1e-4, 100, 2000) == pytest.approx(1e-4)
    assert cosine_lr(2500, 1e-3, 1e-4, 100, 2000) == 1e-4  # past decay_steps: the floor


def test_wsd_warmup_stable_then_linear_decay():
    # 1000 steps, 20% decay: stable until 800, then linear to the floor at 1000
    assert wsd_lr(500, 1e-3, 0.0, 10, 1000, 0.2) == 1e-3
    assert wsd_lr(799, 1e-3, 0.0, 10, 1000, 0.2) == 1e-3
    assert wsd_lr(900, 1e-3, 0.0, 10, 1000, 0.2) == pytest.approx(5e-4)
    assert wsd_lr(1000, 1e-3, 0.0, 10, 1000, 0.2) == pytest.approx(0.0)


def test_constant_after_warmup():
    assert constant_lr(4, 2e-3, 4) == pytest.approx(2e-3)
    assert constant_lr(1, 2e-3, 4) == pytest.approx(2e-3 * 2 / 5)


def test_planned_curve_spans_the_run_and_matches_lr_at():
    cfg = load_preset("nanogpt-cpu")
    curve = planned_curve(cfg, points=50)
    assert len(curve) == 50
    assert curve[0][0] == 0 and curve[-1][0] == cfg.train.max_steps - 1
    for step, lr in curve:
        assert lr == lr_at(step, cfg)
    assert max(lr for _, lr in curve) <= cfg.optim.lr
    assert math.isclose(curve[-1][1], cfg.schedule.min_lr, rel_tol=1e-3)
