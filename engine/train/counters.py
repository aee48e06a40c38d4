"""What a run has counted so far: steps, tokens, the LR multiplier, training time, best val.

One small object the loop, the checkpointer, the fault rules and the commands share. The part
a checkpoint keeps (`state_dict`) is five plain values, under the keys checkpoints have always
had; `rollbacks` and `current_lr` belong to this process's run and are not saved.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass
class Counters:
    step: int = 0  # steps trained (the next step is step + 1)
    tokens: int = 0  # tokens trained on, over every rank
    lr_scale: float = 1.0  # the user's multiplier of the LR schedule (set_lr, scale_lr, rollback)
    train_time_s: float = 0.0  # time spent training: not paused, evaluating or saving
    best_val: float = math.inf  # val loss of the best checkpoint (best.pt), not of any eval
    rollbacks: int = 0  # rollbacks in this process (the fault rules' limit)
    current_lr: float = 0.0  # the LR the last step applied, or the next one after an LR change

    def state_dict(self) -> dict[str, Any]:
        """The counters a checkpoint keeps, in the order it has always kept them."""
        return {
            "step": self.step,
            "lr_scale": self.lr_scale,
            "train_time_s": self.train_time_s,
            "tokens": self.tokens,
            "best_val": self.best_val,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Take the saved counters of a checkpoint (a whole checkpoint state will do)."""
        self.step = state["step"]
        self.lr_scale = state["lr_scale"]
        self.train_time_s = state["train_time_s"]
        self.tokens = state["tokens"]
        self.best_val = state["best_val"]
