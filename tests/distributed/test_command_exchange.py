"""The per-boundary command exchange between 2 gloo ranks (two processes of this test, no
torchrun, no Trainer): a `set`'s settings reach rank 1 whole, among the other commands and in
their order, a rollback's named checkpoint and who asked for an LR change too, and a boundary without either makes no
broadcast."""

from __future__ import annotations

import json
from pathlib import Path

import torch.distributed as dist
import torch.multiprocessing as mp

from engine.distributed.command_exchange import RankSync
from engine.distributed.world import World

SETTINGS = {"optim.weight_decay": 0.0, "train.max_steps": 5000, "sample.prompts": ["ROMEO:", "é"]}
BY = "viewer 2 alice@gpu1 (pts/3)"
RANK_0_ASKS = [
    [
        ("pause", None), ("set", (SETTINGS, BY)), ("set_lr", (1e-3, BY)),
        ("set", ({"eval.interval": 7}, "app")),
    ],  # fmt: skip
    [("checkpoint", None)],  # no set: no broadcast
    [("set", ({"optim.grad_clip": 0.5}, "app"))],
    [("rollback", (0.5, "ckpt-00000010.pt")), ("rollback", (0.25, None))],  # the file asked about
]


def exchange_on_rank(rank: int, init: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    try:
        sync = RankSync(World(rank=rank, world_size=2), dist.group.WORLD)
        seen = []
        for asked in RANK_0_ASKS:
            commands = sync.exchange(asked if rank == 0 else [])
            seen.append({"commands": commands, "broadcasts": sync.payload_broadcasts})
        Path(out, f"rank-{rank}.json").write_text(json.dumps(seen))
    finally:
        dist.destroy_process_group()


def test_a_set_reaches_every_rank_whole_and_only_its_boundary_broadcasts(tmp_path: Path) -> None:
    init = f"file://{tmp_path / 'store'}"
    mp.start_processes(exchange_on_rank, args=(init, str(tmp_path)), nprocs=2, start_method="fork")
    ranks = [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0] == ranks[1]  # the same commands, the same arguments, on both ranks
    first, second, third, fourth = ranks[1]
    assert fourth["commands"] == [["rollback", [0.5, "ckpt-00000010.pt"]], ["rollback", [0.25, None]]]
    assert fourth["broadcasts"] == 3
    assert first["commands"] == [
        ["pause", None], ["set", [SETTINGS, BY]], ["set_lr", [1e-3, BY]],
        ["set", [{"eval.interval": 7}, "app"]],
    ]  # fmt: skip
    assert [first["broadcasts"], second["broadcasts"], third["broadcasts"]] == [1, 1, 2]
    assert second["commands"] == [["checkpoint", None]]
