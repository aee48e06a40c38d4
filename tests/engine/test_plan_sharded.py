"""`cockpit plan --nproc N --parallel ddp|fsdp`: the per-device plan of a torchrun world,
checked against figures computed here by hand from the model's dimensions."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from math import ceil

import pytest
import warm_ranks
from command_here import cockpit_here

from cockpit.cli import main
from engine.config.byte_sizes import GIB, format_bytes
from engine.config.presets import load_preset
from engine.config.run_config import ConfigError
from engine.plan.fixes import check_fits, suggest_fixes
from engine.plan.planner import ALLOCATOR_SLACK, CUDA_OVERHEAD, plan_memory

# local-300m: 20 blocks of width 1024, block 1024, no biases, LayerNorm weights only, the head
# tied to the token embedding; r50k_base's 50257 tokens, the embedding's rows padded to 50304
LAYERS, C, T, VOCAB, ROWS = 20, 1024, 1024, 50257, 50304


def local_300m_shapes() -> dict[str, list[tuple[int, ...]]]:
    """The parameters by group, written out from the preset's numbers (not from the model)."""
    block = [(C,), (3 * C, C), (C, C), (C,), (4 * C, C), (C, 4 * C)]  # ln_1, attn, ln_2, mlp
    return {"root": [(ROWS, C), (T, C), (C,)], "blocks": block * LAYERS}  # wte=head, wpe, ln_f


def numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def rank_share(shape: tuple[int, ...], n: int) -> int:
    """Elements one rank holds under FSDP2: ceil(rows / n) rows (the first chunk, padded)."""
    return ceil(shape[0] / n) * numel(shape[1:])


def test_local_300m_fsdp_over_8_by_hand():
    cfg = load_preset("local-300m")
    shapes = local_300m_shapes()
    every = shapes["root"] + shapes["blocks"]
    n_params = sum(numel(s) for s in every)
    # 50304 x 1024 embedding + 1024 x 1024 positions + 20 x (12 x 1024^2 + 2 x 1024) + 1024
    assert n_params == 51_511_296 + 1_048_576 + 20 * 12_584_960 + 1024 == 304_260_096

    plan = plan_memory(cfg, VOCAB, "cuda", 24 * GIB, 8, "fsdp")
    held = sum(rank_share(s, 8) for s in every)
    assert plan.n_params == n_params
    assert plan.weights == 4 * held  # fp32 master weights, 1/8 each
    assert plan.gradients == 4 * held
    assert plan.optimizer == 8 * held + 4 * len(every)  # AdamW's two moments, a step per tensor
    # the padded embedding's 50304 rows are 8 x 6288: every tensor shards evenly
    assert plan.weights == 4 * n_params / 8
    # unpadded, 50257 = 8 x 6282 + 1: each rank allocates 6283 rows (7 of padding over the world)
    unpadded = plan_memory(load_preset("local-300m", ["model.vocab_multiple=1"]), VOCAB, "cuda", 24 * GIB, 8, "fsdp")
    assert unpadded.weights - 4 * (n_params - 47 * C) / 8 == 4 * C * (6283 - 50257 / 8)
    # the all-gathered working set in bf16: root and its gradient, two blocks and one gradient
    root = sum(numel(s) for s in shapes["root"])
    block = sum(numel(s) for s in shapes["blocks"][:6])
    assert plan.unsharded == 2 * (2 * root + 3 * block)
    assert plan.buckets == 0
    # activations are each rank's own micro-batch, as alone, less autocast's weight copies
    alone = plan_memory(cfg, VOCAB, "cuda", 24 * GIB)
    assert plan.activations == alone.activations - 2 * n_params
    tensors = plan.weights + plan.gradients + plan.optimizer + plan.activations + plan.unsharded
    assert plan.overhead == CUDA_OVERHEAD + int(ALLOCATOR_SLACK * tensors)
    assert plan.total == tensors + plan.overhead
    assert plan.as_dict()["world_size"] == 8 and plan.as_dict()["unsharded"] == plan.unsharded


def test_cockpit_plan_nproc_8_fsdp_prints_the_hand_computed_shards():
    result = cockpit_here(
        "plan", "--preset", "local-300m", "--nproc", "8", "--parallel", "fsdp", "--device-memory", "24GB"
    )
    assert result.returncode == 0, result.stderr  # fits
    out = result.stdout
    every = local_300m_shapes()["root"] + local_300m_shapes()["blocks"]
    held = sum(rank_share(s, 8) for s in every)
    rows = {line[:18].strip(): line[18:].split() for line in out.splitlines() if line[:2] == "  "}
    assert " ".join(rows["weights"][:2]) == format_bytes(4 * held) == "145.08 MiB"
    assert " ".join(rows["gradients"][:2]) == format_bytes(4 * held)
    assert " ".join(rows["optimizer state"][:2]) == format_bytes(8 * held + 4 * len(every))
    assert "all-gathered" in rows
    assert "on each of 8 cuda devices" in out
    assert "each 4 of the 32 micro-batches of 16 x 1024 tokens: 524,288 tokens" in out
    assert "optimizers that shard: adamw, lion" in out
    assert "per device" in out and "an estimate" in out
    assert result.stderr == ""


def test_ddp_over_2_is_the_single_device_plan_plus_buckets():
    cfg = load_preset("local-300m")
    alone = plan_memory(cfg, VOCAB, "cuda", 24 * GIB)
    ddp = plan_memory(cfg, VOCAB, "cuda", 24 * GIB, 2, "ddp")
    n_params = sum(numel(s) for s in local_300m_shapes()["root"] + local_300m_shapes()["blocks"])
    assert ddp.weights == alone.weights == 4 * n_params
    assert ddp.gradients == alone.gradients == 4 * n_params
    assert ddp.optimizer == alone.optimizer
    assert ddp.activations == alone.activations  # each rank's micro-batch is the same size
    # the buckets copy the gradients; at the step torch rebuilds them, both sets are held
    assert ddp.buckets == 2 * ddp.gradients and ddp.unsharded == 0
    # the buckets, and the allocator's slack on them
    assert abs(ddp.total - alone.total - ddp.buckets * (1 + ALLOCATOR_SLACK)) <= 1
    # the single-process record is unchanged: no distributed keys
    assert set(alone.as_dict()) == {
        "weights", "gradients", "optimizer", "activations", "overhead", "total", "capacity"
    }


def test_ddp_that_does_not_fit_is_offered_fsdp_and_refused_with_the_world_in_the_message():
    cfg = load_preset("local-300m", ["model.grad_checkpoint=false", "train.batch_size=32"])
    with pytest.raises(ConfigError) as err:
        check_fits(cfg, VOCAB, "cuda", 24 * GIB, 8, "ddp")
    message = str(err.value)
    assert "each cuda device (ddp over 8 ranks)" in message and "\n" not in message
    assert "`cockpit plan --nproc 8 --parallel ddp`" in message
    fixes = suggest_fixes(cfg, VOCAB, "cuda", 24 * GIB, 8, "ddp")
    shard = [f for f in fixes if f.overrides == ("train.parallel=fsdp",)]
    assert shard and shard[0].plan.parallel == "fsdp" and shard[0].plan.world_size == 8
    # FSDP refuses optimizers that need whole matrices: never offered under it
    fsdp_fixes = suggest_fixes(cfg, VOCAB, "cuda", 24 * GIB, 8, "fsdp")
    assert not any(o in f.overrides for f in fsdp_fixes for o in ("optim.name=muon", "optim.name=adafactor"))
    # and the one-process call is what it always was
    assert check_fits(cfg, VOCAB, "cuda", 80 * GIB).parallel == "single"


def test_auto_shards_what_does_not_fit_one_device(capsys):
    argv = ["plan", "--preset", "local-300m", "--device-memory", "16GB", "--nproc", "8"]
    cfg = load_preset("local-300m")
    assert not plan_memory(cfg, VOCAB, "cuda", 16 * GIB).fits  # one device: too small
    assert main([*argv, "--parallel", "auto"]) == 0  # so fsdp, which fits 16GB per device
    assert "world: 8 ranks (fsdp)" in capsys.readouterr().out
    assert main([*argv, "--parallel", "ddp"]) == 1  # a whole replica per device does not
    out = capsys.readouterr().out
    assert "world: 8 ranks (ddp)" in out and "DOES NOT FIT" in out
    assert "--set train.parallel=fsdp" in out


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--nproc", "3"], ["train.grad_accum=32 cannot be shared by 3 ranks", "--set train.grad_accum=33"]),
        # 64 ranks now split the step's 512 sequences (8 each); 5 cannot
        (["--nproc", "5"], ["train.grad_accum=32 cannot be shared by 5 ranks", "--set train.grad_accum=35"]),
        (["--nproc", "0"], ["--nproc '0'", "like 8"]),
        (["--nproc", "two"], ["--nproc 'two'", "like 8"]),
        (["--nproc", "2", "--parallel", "zero"], ["--parallel 'zero'", "ddp, fsdp, auto"]),
        (["--parallel", "fsdp"], ["needs --nproc 2 or more"]),
        (
            ["--nproc", "2", "--parallel", "fsdp", "--set", "optim.name=muon"],
            ["optim.name=muon needs whole matrices", "--set optim.name=adamw", "--parallel ddp"],
        ),
    ],
)
def test_bad_worlds_are_refused_in_one_line(capsys, extra, words):
    assert main(["plan", "--preset", "local-300m", "--device-memory", "24GB", *extra]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cockpit: ")
    assert all(w in lines[0] for w in words), lines[0]


FSDP2_SHARES = """
import json
import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from engine.model.gpt import GPT
from engine.optim.optimizers import build_optimizer
from engine.config.presets import load_preset

dist.init_process_group("gloo")
cfg = load_preset("tiny")
model = GPT(cfg.model, 65)  # 65 rows of embedding: uneven over 2 ranks
for block in model.blocks:
    fully_shard(block)
fully_shard(model)
weights = sum(p.to_local().untyped_storage().nbytes() for p in model.parameters())
optimizer = build_optimizer(model, cfg.optim, "cpu")
x = torch.randint(65, (2, cfg.model.block_size))
model(x, x)[1].backward()
grads = sum(p.grad.to_local().numel() * 4 for p in model.parameters())
optimizer.step()
state = sum(
    (t.to_local() if hasattr(t, "to_local") else t).numel() * t.element_size()
    for s in optimizer.state.values() for t in s.values() if torch.is_tensor(t)
)
print(json.dumps([dist.get_rank(), weights, grads, state]), flush=True)
dist.destroy_process_group()
"""


def test_fsdp2_allocates_what_the_plan_says_on_rank_0(tmp_path):
    """torch's own fully_shard on 2 gloo ranks: rank 0's shards are the plan's exactly (the
    other rank holds at most as much)."""
    script = tmp_path / "shares.py"
    script.write_text(FSDP2_SHARES)
    stand_in = str(warm_ranks.STAND_IN)  # torchrun and its ranks start warm
    result = subprocess.run(
        [sys.executable, stand_in, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
         "2", stand_in, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env=warm_ranks.sharing_env(),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    ranks = {}
    # each rank prints one JSON list; two processes writing at once may share a line
    for found in re.findall(r"\[[^\[\]]*\]", result.stdout):
        rank, *figures = json.loads(found)
        ranks[rank] = figures
    plan = plan_memory(load_preset("tiny"), 65, "cpu", None, 2, "fsdp")
    expected = [plan.weights, plan.gradients, plan.optimizer]
    assert ranks[0] == expected
    assert all(a <= b for a, b in zip(ranks[1], expected, strict=True))


def test_a_grad_accum_the_ranks_cannot_share_is_planned_as_a_split_micro_batch(capsys):
    # nanogpt-cpu: one micro-batch of 12 a step; at 2 ranks each trains one of 6 (was refused)
    assert main(["plan", "--preset", "nanogpt-cpu", "--nproc", "2", "--device-memory", "8GB"]) == 0
    out = capsys.readouterr().out
    assert "each 1 of the 2 micro-batches of 6 x 64 tokens: 768 tokens per optimizer step" in out


def test_the_plan_says_how_the_loss_is_computed(capsys):
    """A 50k vocabulary's loss runs in chunks (the full logits never held); a char model's
    micro-batch is one chunk, the plain loss at 12 bytes a logit."""
    assert main(["plan", "--preset", "local-300m", "--device-memory", "24GB"]) == 0
    out = capsys.readouterr().out
    assert "padded to 50,304" in out and "the loss in chunks of 512 tokens" in out
    assert main(["plan", "--preset", "tiny", "--device-memory", "24GB"]) == 0
    assert "the loss on the whole micro-batch's logits (12 B each)" in capsys.readouterr().out
