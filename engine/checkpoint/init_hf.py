"""A Hugging Face GPT-2 directory as a source of weights: config.json checked for what cockpit's
GPT computes exactly, the tensors (model.safetensors or pytorch_model.bin) under cockpit's names
(engine.export.hf's mapping, inverted), and the tokenizer its ids are.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.checkpoint.init_files import load_safetensors, load_torch_file
from engine.checkpoint.init_source import InitFromError, refusal
from engine.checkpoint.init_weights import GPT2_VOCAB, WeightsSource, gpt2_shape
from engine.config.user_files import UserFileError, read_small_text
from engine.export.hf import CHARS_FILE  # a char run's characters, beside its HF export
from engine.export.nanogpt import SAME_AS_GPT2 as GPT2_BPE  # tiktoken's names for GPT-2's BPE

if TYPE_CHECKING:
    import torch

HF_WEIGHTS = ("model.safetensors", "pytorch_model.bin")
# transformers' names for the activations cockpit computes exactly
HF_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh"}


def hf_directory(
    given: str, where: Path, folder: Path, weights: Path | None = None
) -> WeightsSource:
    try:
        config = json.loads(read_small_text(folder / "config.json", "a model config"))
    except UserFileError as e:  # a FIFO, a device, far too large: refused unread
        raise refusal(given, str(e)) from None
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise refusal(given, f"{folder / 'config.json'} does not read as JSON ({type(e).__name__})") from None
    if not isinstance(config, dict):
        raise refusal(given, f"{folder / 'config.json'} is not a model config (not a JSON object)")
    model_type = config.get("model_type")
    if model_type != "gpt2":
        raise refusal(
            given,
            f"a Hugging Face {model_type or 'unnamed'} model (config.json model_type); cockpit "
            "starts from GPT-2's architecture only (model_type gpt2)",
        )

    def unsupported(key: str, value: Any, gpt2: str) -> InitFromError:
        return refusal(given, f"config.json {key} = {value!r}: cockpit's GPT {gpt2}, so its logits would differ")

    activation = config.get("activation_function", "gelu_new")
    if activation not in HF_ACTIVATIONS:
        raise unsupported("activation_function", activation, f"computes {', '.join(HF_ACTIVATIONS)} only")
    n_embd, n_layer, n_head = config.get("n_embd"), config.get("n_layer"), config.get("n_head")
    block, vocab = config.get("n_positions"), config.get("vocab_size")
    for key, value in (("n_embd", n_embd), ("n_layer", n_layer), ("n_head", n_head),
                       ("n_positions", block), ("vocab_size", vocab)):  # fmt: skip
        if type(value) is not int or value < 1:
            raise refusal(given, f"config.json {key} = {value!r}: expected a whole number >= 1")
    if n_embd % n_head:
        raise refusal(given, f"config.json n_embd {n_embd} is not divisible by n_head {n_head}")
    if config.get("n_inner") not in (None, 4 * n_embd):
        raise unsupported("n_inner", config["n_inner"], f"has an MLP 4 x n_embd = {4 * n_embd} wide")
    eps = config.get("layer_norm_epsilon", 1e-5)
    if not isinstance(eps, (int, float)) or not math.isclose(eps, 1e-5, rel_tol=1e-6):
        raise unsupported("layer_norm_epsilon", eps, "normalises with epsilon 1e-05")
    if config.get("scale_attn_weights", True) is not True:
        raise unsupported("scale_attn_weights", config["scale_attn_weights"], "scales attention by 1/sqrt(head size)")
    if config.get("scale_attn_by_inverse_layer_idx", False):
        raise unsupported("scale_attn_by_inverse_layer_idx", True, "scales every layer's attention alike")
    if config.get("add_cross_attention", False):
        raise unsupported("add_cross_attention", True, "has no cross-attention")
    tied = config.get("tie_word_embeddings", True) is not False
    if weights is None:
        weights = next((folder / n for n in HF_WEIGHTS if (folder / n).is_file()), None)
        if weights is None:
            sharded = [n for n in os.listdir(folder) if n.endswith(".index.json")]
            what = "its weights are sharded (" + sharded[0] + "), which cockpit does not read" if sharded else "no weights beside config.json"
            raise refusal(given, f"{folder}: {what}; it needs model.safetensors or pytorch_model.bin")
    tokenizer = _hf_tokenizer(given, folder, config, vocab)

    def read(lazy: bool = False) -> dict[str, torch.Tensor]:
        from engine.export.hf import cockpit_tensors

        if weights.suffix == ".safetensors":
            state = load_safetensors(given, weights, lazy)
        else:
            state = load_torch_file(given, weights)
            if not isinstance(state, dict) or not all(isinstance(k, str) for k in state):
                raise refusal(given, f"{weights.name} is not a state dict (names to tensors)")
        return cockpit_tensors(state)

    return WeightsSource(
        given=given,
        path=where,
        file=weights,
        kind="Hugging Face GPT-2",
        shape=gpt2_shape(
            n_layer=n_layer, n_head=n_head, n_embd=n_embd, block_size=block, bias=True,
            mlp=HF_ACTIVATIONS[activation], tie_embeddings=tied,
        ),  # fmt: skip
        tokenizer=tokenizer,
        step=None,
        read=read,
    )


def _hf_tokenizer(given: str, folder: Path, config: dict[str, Any], vocab: int) -> dict[str, Any]:
    """The tokenizer a HF GPT-2 directory's ids are: a cockpit char export's characters, the BPE
    a cockpit export names, or GPT-2's own BPE for GPT-2's vocabulary."""
    chars_file = folder / CHARS_FILE
    if chars_file.is_file():
        try:
            chars = "".join(json.loads(read_small_text(chars_file, "a list of characters")))
        except UserFileError as e:
            raise refusal(given, str(e)) from None
        except (OSError, ValueError, TypeError):
            raise refusal(given, f"{chars_file} does not read as a list of characters") from None
        if len(chars) != vocab:
            raise refusal(given, f"{CHARS_FILE} has {len(chars)} characters but vocab_size is {vocab}")
        return {"name": "char", "chars": chars, "vocab_size": vocab}
    named = config.get("cockpit_tokenizer")
    if isinstance(named, str) and named != "char":
        return {"name": named, "vocab_size": vocab}
    if vocab == GPT2_VOCAB:
        return {"name": GPT2_BPE[0], "vocab_size": vocab}
    raise refusal(
        given,
        f"vocab_size {vocab} is not GPT-2's BPE ({GPT2_VOCAB}) and no {CHARS_FILE} names its "
        "characters, so cockpit cannot tell which tokenizer its ids belong to",
    )
