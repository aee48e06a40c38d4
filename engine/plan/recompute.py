"""What selective recompute (model.grad_checkpoint, model.recompute_blocks) costs in compute: the
share of the forward's matmul FLOPs done again in backward (per token and block 24*h^2 + 4*s*h;
the head 2*h*vocab), and a step, about three forwards, slows by a third of that share.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.config.run_config import ModelConfig

RECOMPUTE_MODES = ("mlp", "full")  # what a recomputed block rebuilds: its MLP, or all of it


@dataclass(frozen=True)
class Recompute:
    """One recompute setting: `mode` in the first `blocks` of `n_layer` blocks (0 blocks: none)."""

    mode: str
    blocks: int
    n_layer: int

    @classmethod
    def of(cls, cfg: ModelConfig) -> Recompute:
        n = cfg.recomputed_blocks
        return cls(cfg.grad_checkpoint if n else "none", n, cfg.n_layer)

    @property
    def overrides(self) -> tuple[str, ...]:
        """The --set values that give this setting (recompute_blocks=0 meaning every block)."""
        blocks = 0 if self.blocks == self.n_layer else self.blocks
        return (f"model.grad_checkpoint={self.mode}", f"model.recompute_blocks={blocks}")

    def describe(self) -> str:
        if self.blocks == 0:
            return "no recompute"
        where = "every block" if self.blocks == self.n_layer else f"the first {self.blocks} of {self.n_layer} blocks"
        return f"recompute {'the MLP of ' if self.mode == 'mlp' else ''}{where}"


def forward_flops_per_token(cfg: ModelConfig, vocab: int) -> tuple[int, int, int]:
    """The forward's matmul FLOPs per token: (one block, one block's MLP, the whole model)."""
    h, s = cfg.n_embd, cfg.block_size
    mlp = 16 * h * h
    block = 8 * h * h + 4 * s * h + mlp
    return block, mlp, cfg.n_layer * block + 2 * h * vocab


def recomputed_share(setting: Recompute, cfg: ModelConfig, vocab: int) -> float:
    """The share of the forward's FLOPs that backward does again under `setting`."""
    block, mlp, total = forward_flops_per_token(cfg, vocab)
    per_block = {"none": 0, "mlp": mlp, "full": block}[setting.mode]
    return setting.blocks * per_block / total


def step_slowdown(share: float) -> float:
    """A step's extra compute for recomputing `share` of the forward (forward + backward = 3)."""
    return share / 3


def cost_text(setting: Recompute, cfg: ModelConfig, vocab: int) -> str:
    """'48% of the forward again, about +16% per step'."""
    share = recomputed_share(setting, cfg, vocab)
    return f"{share:.0%} of the forward again, about +{step_slowdown(share):.0%} per step"
