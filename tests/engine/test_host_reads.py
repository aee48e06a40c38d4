"""No host read on the step's hot path: the values of a step (its loss, gradient norm, whether
its update was refused) are read back in batches, one read per read-back, however many steps
it holds. On a GPU a read per step would keep the CPU from queueing the next step."""

from __future__ import annotations

import contextlib
import threading
from collections import Counter

import numpy as np
import pytest
import torch
from tiny import tiny_overrides

from engine.config.presets import load_preset
from engine.data.batches import BatchSampler
from engine.model.gpt import GPT
from engine.optim.optimizers import build_optimizer
from engine.optim.refused_step import skips_on_device
from engine.train.device import autocast_context
from engine.train.step import StepParts, train_step
from engine.train.trainer import Trainer

# the ways a tensor's value reaches Python (not `numpy`: the batch sampler draws its window
# starts with a CPU generator and reads them so, on the host whatever the device)
READS = ("item", "tolist", "__bool__", "__float__", "__int__", "__index__", "cpu")


class HostReads:
    """Counts the tensor reads made by this thread while `counting` is set, by kind."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.counting = False
        self.kinds: Counter[str] = Counter()
        thread = threading.get_ident()
        for name in READS:
            real = getattr(torch.Tensor, name)

            def read(tensor, *args, _real=real, _name=name, **kwargs):
                if self.counting and threading.get_ident() == thread:
                    self.kinds[_name] += 1
                return _real(tensor, *args, **kwargs)

            monkeypatch.setattr(torch.Tensor, name, read)

    @property
    def total(self) -> int:
        return sum(self.kinds.values())

    @contextlib.contextmanager
    def count(self):
        self.counting = True
        try:
            yield
        finally:
            self.counting = False


def step_parts(optimizer: str, muon_ns: str, extra: tuple[str, ...] = ()) -> StepParts:
    cfg = load_preset(
        "tiny",
        ["model.n_layer=1", "model.n_embd=16", "model.block_size=8", f"optim.name={optimizer}",
         f"optim.muon_ns={muon_ns}", *extra],
    )  # fmt: skip
    torch.manual_seed(0)
    model = GPT(cfg.model, 11)
    device = torch.device("cpu")
    return StepParts(
        cfg=cfg,
        model=model,
        forward=model,
        scaler=torch.amp.GradScaler("cpu", enabled=False),
        autocast=autocast_context(device, torch.float32),
        batches=BatchSampler(np.arange(500, dtype=np.int64) % 11, 8, 4, device, seed=1),
        device=device,
        dtype=torch.float32,
        micro_steps=cfg.train.grad_accum,
        grad_sync=lambda last: contextlib.nullcontext(),
    )


@pytest.mark.parametrize(
    ("optimizer", "muon_ns", "on_device"),
    [
        ("adamw", "bf16", True),  # fused
        ("lion", "bf16", True),
        ("muon", "fp32", True),  # ours, batched (with the fused AdamW for the rest)
        ("muon", "bf16", False),  # torch's Muon cannot skip on the device: one read, for it only
        ("adafactor", "bf16", None),  # whichever the optimizer says
        ("sgd", "bf16", True),
    ],
)
def test_a_step_reads_nothing_back_to_the_host(
    monkeypatch: pytest.MonkeyPatch, optimizer: str, muon_ns: str, on_device: bool | None
) -> None:
    """None with an optimizer that skips on the device; with one that cannot, one read a step
    more than without the finite check (whatever the optimizer reads itself)."""
    reads = HostReads(monkeypatch)
    counted = []
    for check_finite in (True, False):
        parts = step_parts(optimizer, muon_ns)
        parts.cfg.train.check_finite = check_finite
        opt = build_optimizer(parts.model, parts.cfg.optim, "cpu")
        if on_device is not None:
            assert skips_on_device(opt) is on_device
        held_back, before = None, reads.total
        with reads.count():
            for step in range(4):  # the health sample at step 0 included
                held_back = train_step(parts, opt, step, 1.0, False, held_back).pending.held_back
        counted.append(reads.total - before)
        if skips_on_device(opt):
            assert counted[0] == 0, reads.kinds
            return
    assert counted[0] - counted[1] == 4, reads.kinds


@pytest.mark.parametrize(
    ("optimizer", "muon_ns", "extra"),
    [
        ("muon", "polar", ()),
        ("muon", "bf16", ("optim.muon_variant=normuon",)),  # ours, in bfloat16
        ("muon", "polar", ("optim.muon_variant=normuon", "optim.cautious_wd=true")),
        ("adamw", "bf16", ("optim.cautious_wd=true", "optim.embed_lr=0.01")),
    ],
)
def test_the_speedrun_optimizer_variants_read_nothing_back_either(
    monkeypatch: pytest.MonkeyPatch, optimizer: str, muon_ns: str, extra: tuple[str, ...]
) -> None:
    reads = HostReads(monkeypatch)
    parts = step_parts(optimizer, muon_ns, extra)
    opt = build_optimizer(parts.model, parts.cfg.optim, "cpu")
    assert skips_on_device(opt)
    held_back = None
    with reads.count():
        for step in range(4):
            held_back = train_step(parts, opt, step, 1.0, False, held_back).pending.held_back
    assert reads.total == 0, reads.kinds


def test_a_run_reads_back_once_per_read_back_not_once_per_step(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """24 steps read back every 6: the steps read nothing, each read-back one batch of values."""
    cfg = load_preset(
        "default",
        tiny_overrides("train.max_steps=24", "train.log_every=6", "eval.batches=1", quiet=True),
    )
    trainer = Trainer(cfg, run_dir=tmp_path, telemetry=False)
    reads = HostReads(monkeypatch)
    in_steps, in_flushes, flushes = Counter(), Counter(), [0]
    trainer.set_up()
    run = trainer.built
    assert run is not None
    real_step, real_flush, real_finish = run.train_one_step, run.readings.flush, run.finish

    def counted_step(*args, **kwargs):
        before = reads.kinds.copy()
        real_step(*args, **kwargs)
        in_steps.update(reads.kinds - before)

    def counted_flush():
        before = reads.kinds.copy()
        flushes[0] += bool(run.pending)
        real_flush()
        in_flushes.update(reads.kinds - before)

    def finish(*args) -> None:
        reads.counting = False  # the final evaluation and checkpoint are not the loop
        real_finish(*args)

    reads.counting = True  # from the loop's first step on
    run.finish = finish
    run.train_one_step, run.readings.flush = counted_step, counted_flush
    assert trainer.run() == "finished"
    assert trainer.step == 24 and flushes[0] == 4
    assert sum(in_steps.values()) == 0, in_steps
    assert sum(in_flushes.values()) <= flushes[0], in_flushes  # one `tolist` a read-back
    assert reads.total <= flushes[0], reads.kinds  # and nothing else in the loop
