"""A trained model taken out of its run: the checkpoint `cockpit sample` and `cockpit export`
read, rebuilt as a GPT with its config and tokenizer.

A run directory stands for its best checkpoint (best.pt, the lowest val loss), else its latest
`ckpt-N.pt`; a file stands for itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.checkpoint import store as ckpt
from engine.config.loading import config_from_dict
from engine.config.run_config import ConfigError, RunConfig
from engine.data.preparation import DataError
from engine.data.tokenizers import Tokenizer, tokenizer_from_meta


def resolve_checkpoint(path: str | Path) -> Path:
    """The checkpoint file a RUN_DIR or CKPT argument means; a CheckpointError says why none."""
    path = Path(path).expanduser()
    if path.is_dir() and not ckpt.is_sharded(path):
        for name in (ckpt.BEST_NAME, ckpt.BEST_SHARDED):
            best = path / name
            if best.exists():
                return best
        latest = ckpt.latest_checkpoint(path)
        if latest is None:
            raise ckpt.CheckpointError(
                f"{path}: no checkpoint in this directory (best.pt or ckpt-*.pt); give a run "
                "directory under runs/ or a checkpoint file"
            )
        return latest
    if not path.exists():
        raise ckpt.CheckpointError(f"{path}: no such run directory or checkpoint file")
    return path



@dataclass
class TrainedModel:
    model: Any  # the GPT (imported only when one is loaded), in eval mode
    cfg: RunConfig
    tokenizer: Tokenizer
    state: dict[str, Any]  # the checkpoint (weights included)
    path: Path  # the checkpoint file read

    @property
    def step(self) -> int:
        return int(self.state.get("step", 0))


def load_trained(path: str | Path, device: str = "cpu") -> TrainedModel:
    """Load the model a RUN_DIR or CKPT holds onto `device`, ready for inference. Problems
    (a damaged file, a config or tokenizer that no longer loads) are one-line CheckpointErrors."""
    from engine.model.gpt import GPT

    file = resolve_checkpoint(path)
    state = ckpt.load_checkpoint(file)
    try:
        cfg = config_from_dict(state["config"], source=str(file))
        tokenizer = tokenizer_from_meta(state["tokenizer"])
    except (ConfigError, DataError, KeyError) as e:
        raise ckpt.CheckpointError(f"{file}: cannot rebuild the model ({e})") from None
    model = GPT(cfg.model, tokenizer.vocab_size)
    if state.get("_sharded"):  # a sharded run's checkpoint: its shards read into one model
        from engine.distributed.sharded import dcp_model_state

        state["model"] = dcp_model_state(file)
    ckpt.load_model_state(model, state)
    model.to(device).eval()
    return TrainedModel(model=model, cfg=cfg, tokenizer=tokenizer, state=state, path=file)
