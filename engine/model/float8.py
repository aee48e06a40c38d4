"""Float8 training of the MLP and head matmuls (train.float8), through torchao's Float8Linear.

Each converted Linear casts its input, weight and output gradient to float8 (tensorwise dynamic
scales, e4m3 forward, e5m2 gradients) for its three matmuls; the weights, their gradients and
the optimizer stay in float32, so the state dict's names and tensors are a plain model's: a
float8 run's checkpoint resumes and exports as any other. Attention's projections stay in the
compute dtype, as the speedrun record keeps them.

'on' needs float8 tensor cores (CUDA compute capability 8.9: Ada, Hopper and later); 'emulate'
runs the same casts with ordinary matmuls on any device: for checking the numerics, no faster.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import nn

from engine.config.run_config import ConfigError

# float8 matmuls (torch._scaled_mm) need both outer dimensions a multiple of 16; the token
# dimension, the inner one of the weight-gradient matmul, torchao pads (pad_inner_dim)
FLOAT8_MULTIPLE = 16
MIN_CAPABILITY = (8, 9)
EXTRA = "pip install 'cockpit[float8]'"


def float8_layer_names(model: nn.Module) -> list[str]:
    """The Linear layers float8 converts: each block's MLP (c_fc, c_proj) and the head."""
    return [
        name
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear) and (".mlp." in name or name == "lm_head")
    ]


def float8_refusal(
    mode: str,
    device_type: str,
    capability: tuple[int, int] | None,
    n_embd: int,
    padded_vocab: int,
) -> str | None:
    """Why train.float8 = `mode` cannot run here, in one line; None when it can (or is off).
    `capability`: the CUDA device's (None elsewhere). The converted matmuls' outer dimensions
    are n_embd, 4 * n_embd (a multiple of 16 when n_embd is) and the head's padded vocabulary."""
    if mode == "off":
        return None
    if mode == "on":
        if device_type != "cuda":
            return (
                f"train.float8 = on needs a CUDA GPU of compute capability 8.9 or higher (this "
                f"run is on {device_type}); train.float8 = emulate runs its numerics, no faster"
            )
        if capability is not None and capability < MIN_CAPABILITY:
            return (
                f"train.float8 = on needs compute capability 8.9 or higher (Ada, Hopper or later); "
                f"this GPU's is {capability[0]}.{capability[1]}: set train.float8 = off"
            )
    if n_embd % FLOAT8_MULTIPLE:
        return (
            f"train.float8: float8 matmuls need model.n_embd a multiple of {FLOAT8_MULTIPLE} "
            f"(it is {n_embd})"
        )
    if padded_vocab % FLOAT8_MULTIPLE:
        return (
            f"train.float8: float8 matmuls need the head's rows a multiple of {FLOAT8_MULTIPLE} "
            f"(the vocabulary padded to model.vocab_multiple is {padded_vocab}): set "
            f"model.vocab_multiple to a multiple of {FLOAT8_MULTIPLE}"
        )
    return None


def _torchao_float8() -> Any:
    """torchao.float8, imported quietly (torchao logs each GPU kernel library it cannot load on a
    machine without one); a one-line refusal naming the extra when torchao is not installed."""
    quiet = [logging.getLogger(name) for name in ("torchao", "torch.utils._pytree")]
    levels = [log.level for log in quiet]
    for log in quiet:
        log.setLevel(logging.ERROR)
    try:
        import torchao.float8 as float8
    except ImportError as err:
        raise ConfigError(f"train.float8 needs torchao, which is not installed: {EXTRA}") from err
    finally:
        for log, level in zip(quiet, levels, strict=True):
            log.setLevel(level)
    return float8


def check_float8(mode: str, device: torch.device, n_embd: int) -> None:
    """The refusals of `convert_to_float8` that need no corpus (the vocabulary sets the head's
    rows), before anything starts: the device, model.n_embd, torchao installed. One line."""
    if mode == "off":
        return
    capability = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
    why = float8_refusal(mode, device.type, capability, n_embd, FLOAT8_MULTIPLE)
    if why is not None:
        raise ConfigError(why)
    _torchao_float8()


def convert_to_float8(model: nn.Module, mode: str, device: torch.device) -> list[str]:
    """Convert `model`'s MLP and head Linear layers to torchao's Float8Linear in place (before the
    optimizer is built: the parameters stay the same tensors); returns the names converted.
    A one-line ConfigError where train.float8 = `mode` cannot run on `device`."""
    if mode == "off":
        return []
    capability = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
    head = model.get_submodule("lm_head")
    why = float8_refusal(mode, device.type, capability, head.in_features, head.out_features)
    if why is not None:
        raise ConfigError(why)
    float8 = _torchao_float8()
    names = set(float8_layer_names(model))
    config = float8.Float8LinearConfig(emulate=mode == "emulate", pad_inner_dim=True)
    float8.convert_to_float8_training(
        model, config=config, module_filter_fn=lambda module, name: name in names
    )
    model.whole_head = "lm_head" in names  # its matmul through the module: float8
    return sorted(names)
