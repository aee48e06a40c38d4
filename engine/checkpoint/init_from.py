"""Starting a run from weights that already exist (`model.init_from`, `--init-from SOURCE`).

A source is a Hugging Face GPT-2 directory (config.json with model.safetensors or
pytorch_model.bin), a nanoGPT ckpt.pt (its `model_args` and `model`), a cockpit run directory
(its best checkpoint, else its latest, as `cockpit sample` picks), a cockpit checkpoint, or a
cockpit .safetensors export. A bare name such as `gpt2` is looked up in the Hugging Face cache
already on disk; nothing is ever downloaded.

The weights fix the model's shape (`SHAPE_KEYS`) and its tokenizer; everything else is the
run's own. The run starts at step 0 with a fresh optimizer. This module reads each kind of
source into a `WeightsSource`: its kind, shape, tokenizer and a reader of its tensors. The names and layouts are the
exporters' own mappings, inverted beside them (engine.export.hf, engine.export.nanogpt), so
that a model exported and read back is the same model. Every file is read with
`weights_only` (torch) or as safetensors: a source's pickle code never runs. Each problem is
one line (an InitFromError, a ConfigError: the CLI's exit 2).
"""

from __future__ import annotations

import json
import math
import os
import pickle
import struct
import warnings
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.checkpoint import names
from engine.checkpoint.init_source import (
    REQUIRED,
    WHAT_IT_MAY_BE,
    InitFromError,
    refusal,
    required_refusal,
    source_path,
)
from engine.config.loading import recorded_config
from engine.config.run_config import SECTIONS, ConfigError, ModelConfig
from engine.export.hf import CHARS_FILE  # a char run's characters, beside its HF export
from engine.export.nanogpt import SAME_AS_GPT2 as GPT2_BPE  # tiktoken's names for GPT-2's BPE

if TYPE_CHECKING:
    import torch

GPT2_VOCAB = 50257
NANOGPT_PADDED_VOCAB = 50304  # nanoGPT's GPT-2 vocabulary padded for speed when trained from scratch
# The ModelConfig fields the weights decide: their change would make them another model.
SHAPE_KEYS = (
    "n_layer", "n_head", "n_embd", "block_size", "bias", "pos_emb", "norm", "qk_norm", "mlp",
    "tie_embeddings", "logit_softcap", "value_embeds", "unet_skips",
)  # fmt: skip
HF_WEIGHTS = ("model.safetensors", "pytorch_model.bin")
NANOGPT_CKPT = "ckpt.pt"
NANOGPT_META = "meta.pkl"
# transformers' names for the activations cockpit computes exactly
HF_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh"}


@dataclass
class WeightsSource:
    """Weights found on disk, with what they fix: read by `open_source`, loaded by `load_into`."""

    given: str  # as the config or the command line gave it
    path: Path  # absolute: what the run records as model.init_from
    file: Path  # the file the tensors are read from
    kind: str  # "Hugging Face GPT-2", "nanoGPT", "cockpit checkpoint", "cockpit safetensors"
    shape: dict[str, Any]  # SHAPE_KEYS -> the weights' values
    tokenizer: dict[str, Any]  # a tokenizer's to_meta(): {"name", "vocab_size"(, "chars")}
    step: int | None  # the step the source was saved at, when it says
    # the tensors under cockpit's names; lazy=True: what shows their shapes at the least cost
    # (a safetensors header's, a memory-mapped file's), for a check before the run starts
    read: Callable[..., dict[str, torch.Tensor]]

    @property
    def vocab_size(self) -> int:
        return int(self.tokenizer["vocab_size"])

    def refuse(self, why: str) -> InitFromError:
        return InitFromError(f"--init-from {self.given}: {why}")

    def note(self) -> str:
        """One line for the run's start: where its weights come from."""
        at = f" at step {self.step}" if self.step else ""
        s = self.shape
        return (
            f"weights from {self.kind} {self.file}{at} ({s['n_layer']} layers, {s['n_embd']} "
            f"wide, {self.tokenizer['name']} vocab {self.vocab_size}); step 0, a fresh optimizer"
        )



def open_source(given: str) -> WeightsSource:
    """What `given` holds: its kind, shape and tokenizer, its tensors read only when asked for."""
    if given == REQUIRED:
        raise required_refusal()
    path = source_path(given)
    if path.is_dir() and path.suffix == names.SHARDED:  # a sharded run's ckpt-N.dcp or best.dcp
        return _cockpit_checkpoint(given, path, path)
    if path.is_dir():
        if (path / "metrics.jsonl").is_file() or _holds_checkpoints(path):
            return _cockpit_checkpoint(given, path, _run_checkpoint(given, path))
        if (path / "config.json").is_file():
            return _hf_directory(given, path, path)
        if (path / NANOGPT_CKPT).is_file():
            return _torch_file(given, path, path / NANOGPT_CKPT)
        raise refusal(
            given,
            "a directory with no config.json (not a Hugging Face model), no ckpt.pt (nanoGPT) and "
            f"no checkpoint (not a cockpit run); give {WHAT_IT_MAY_BE}",
        )
    if path.suffix == ".safetensors" or _sniffs_safetensors(path):  # an export named otherwise too
        if (path.parent / "config.json").is_file() and not _is_cockpit_export(path):
            return _hf_directory(given, path, path.parent, path)
        return _safetensors_export(given, path)
    if path.name in HF_WEIGHTS and (path.parent / "config.json").is_file():
        return _hf_directory(given, path, path.parent, path)
    return _torch_file(given, path, path)


def _holds_checkpoints(path: Path) -> bool:
    return bool(names.list_checkpoints(path)) or any(
        (path / n).exists() for n in (names.BEST_NAME, names.BEST_SHARDED)
    )


def _run_checkpoint(given: str, run_dir: Path) -> Path:
    from engine.checkpoint.errors import CheckpointError
    from engine.checkpoint.trained import resolve_checkpoint

    try:
        return resolve_checkpoint(run_dir)
    except CheckpointError as e:
        raise refusal(given, str(e)) from None


# ------------------------------------------------------------------ reading files


def _torch_load(given: str, file: Path) -> Any:
    import torch

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Detected pickle protocol")
        try:
            return torch.load(file, map_location="cpu", weights_only=True, mmap=True)
        except pickle.UnpicklingError:
            raise refusal(
                given,
                f"{file.name} holds objects a checkpoint never holds and cockpit will not run "
                f"its code; give {WHAT_IT_MAY_BE}",
            ) from None
        except Exception as e:  # torch raises many types for a file that is not its own
            try:  # a file torch cannot map (an old serialisation format): read it whole
                return torch.load(file, map_location="cpu", weights_only=True)
            except Exception:
                raise refusal(
                    given,
                    f"{file.name} is not a checkpoint torch can read ({type(e).__name__}); give "
                    f"{WHAT_IT_MAY_BE}",
                ) from None


def _safetensors_header(given: str, file: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """A .safetensors file's tensors {name: {"dtype", "shape"}} and metadata, from its header."""
    try:
        with file.open("rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            if size > 100_000_000:
                raise ValueError("header too large")
            header = json.loads(f.read(size))
        if not isinstance(header, dict):
            raise ValueError("header is not a table")
    except (OSError, ValueError, struct.error, UnicodeDecodeError):
        raise refusal(given, f"{file.name} is not a safetensors file (its header does not read)") from None
    metadata = header.pop("__metadata__", None) or {}
    try:
        needed = 8 + size + max((int(entry["data_offsets"][1]) for entry in header.values()), default=0)
    except (KeyError, TypeError, ValueError, IndexError):
        raise refusal(given, f"{file.name}: its header's tensor offsets do not read") from None
    if file.stat().st_size < needed:  # checked here, so a cut copy is refused before the run starts
        raise refusal(
            given,
            f"{file.name} is cut short ({file.stat().st_size:,} of the {needed:,} bytes its header "
            "describes): a copy or download that did not finish; copy it again",
        )
    return header, metadata if isinstance(metadata, dict) else {}


def _load_safetensors(given: str, file: Path, lazy: bool = False) -> dict[str, torch.Tensor]:
    """A safetensors file's tensors; lazy: shapes only, as tensors on the meta device."""
    if lazy:
        import torch

        header, _ = _safetensors_header(given, file)
        try:
            return {
                name: torch.empty([int(n) for n in entry["shape"]], device="meta")
                for name, entry in header.items()
            }
        except (KeyError, TypeError, ValueError):
            raise refusal(given, f"{file.name}: its header's tensor shapes do not read") from None
    from safetensors.torch import load_file

    try:
        return load_file(str(file))
    except Exception as e:
        raise refusal(given, f"{file.name} does not read as safetensors ({type(e).__name__})") from None


def _sniffs_safetensors(file: Path) -> bool:
    """A file that starts as safetensors does (an 8-byte header size, then its JSON table),
    whatever its name: `cockpit export --out NAME` writes one under any name."""
    try:
        with file.open("rb") as f:
            start = f.read(9)
    except OSError:
        return False
    return len(start) == 9 and start[8:9] == b"{" and struct.unpack("<Q", start[:8])[0] < 100_000_000


def _is_cockpit_export(file: Path) -> bool:
    try:
        _, metadata = _safetensors_header(str(file), file)
    except InitFromError:
        return False
    return metadata.get("producer") == "cockpit"


def _gpt2_shape(**given: Any) -> dict[str, Any]:
    """GPT-2's switches (learned positions, LayerNorm, no QK-norm, no soft-cap, none of the
    speedrun's parts) and the shape."""
    off = {"qk_norm": False, "logit_softcap": 0.0, "value_embeds": 0, "unet_skips": False}
    return {"pos_emb": "learned", "norm": "layernorm", **off, **given}


def _hf_directory(
    given: str, where: Path, folder: Path, weights: Path | None = None
) -> WeightsSource:
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
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
            state = _load_safetensors(given, weights, lazy)
        else:
            state = _torch_load(given, weights)
            if not isinstance(state, dict) or not all(isinstance(k, str) for k in state):
                raise refusal(given, f"{weights.name} is not a state dict (names to tensors)")
        return cockpit_tensors(state)

    return WeightsSource(
        given=given,
        path=where,
        file=weights,
        kind="Hugging Face GPT-2",
        shape=_gpt2_shape(
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
            chars = "".join(json.loads(chars_file.read_text(encoding="utf-8")))
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


def _torch_file(given: str, folder_or_file: Path, file: Path) -> WeightsSource:
    state = _torch_load(given, file)
    if isinstance(state, dict) and "model_args" in state and "model" in state:
        return _nanogpt(given, folder_or_file, file, state)
    if isinstance(state, dict) and "config" in state and "model" in state and "tokenizer" in state:
        return _cockpit_checkpoint(given, folder_or_file, file)
    raise refusal(
        given,
        f"{file.name} is not a checkpoint cockpit can start from (no model_args and model, as "
        f"nanoGPT saves; no config and model, as cockpit does); give {WHAT_IT_MAY_BE}",
    )


class _PlainData(pickle.Unpickler):
    """An unpickler for meta.pkl (dicts of ints and strings): any object with code is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"{module}.{name} is not plain data")


def _nanogpt(given: str, where: Path, file: Path, state: dict[str, Any]) -> WeightsSource:
    args = state["model_args"]
    if not isinstance(args, dict) or not isinstance(state["model"], dict):
        raise refusal(given, f"{file.name}: model_args and model are not nanoGPT's dicts")
    shape: dict[str, Any] = {}
    for key in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size"):
        value = args.get(key)
        if type(value) is not int or value < 1:
            raise refusal(given, f"{file.name}: model_args {key} = {value!r}: expected a whole number >= 1")
        shape[key] = value
    vocab = shape.pop("vocab_size")
    config = state.get("config") if isinstance(state.get("config"), dict) else {}
    tokenizer = _nanogpt_tokenizer(given, file, config, vocab)
    model = state["model"]
    return WeightsSource(
        given=given,
        path=where,
        file=file,
        kind="nanoGPT",
        shape=_gpt2_shape(**shape, bias=bool(args.get("bias", False)), mlp="gelu", tie_embeddings=True),
        tokenizer=tokenizer,
        step=state["iter_num"] if type(state.get("iter_num")) is int else None,
        read=lambda lazy=False: _cockpit_state_of_nanogpt(model),  # memory-mapped already
    )


def _cockpit_state_of_nanogpt(model: dict[str, Any]) -> dict[str, torch.Tensor]:
    from engine.export.nanogpt import cockpit_state

    return cockpit_state(model)


def _nanogpt_tokenizer(given: str, file: Path, config: dict[str, Any], vocab: int) -> dict[str, Any]:
    """GPT-2's BPE for GPT-2's vocabulary (nanoGPT pads it to 50304 from scratch); characters from
    the meta.pkl beside the file (cockpit's export writes one there; nanoGPT keeps it in
    data/DATASET/)."""
    named = config.get("cockpit_tokenizer")
    meta = file.parent / NANOGPT_META
    if meta.is_file() and named in (None, "char"):
        try:
            with meta.open("rb") as f:
                loaded = _PlainData(f).load()
            itos = loaded["itos"]
            chars = "".join(itos[i] for i in range(len(itos)))
        except Exception as e:
            raise refusal(given, f"{meta} is not nanoGPT's meta.pkl of characters ({type(e).__name__})") from None
        if len(chars) > vocab:
            raise refusal(given, f"{meta} has {len(chars)} characters, more than the model's {vocab} rows")
        return {"name": "char", "chars": chars, "vocab_size": len(chars)}
    if isinstance(named, str) and named != "char":
        return {"name": named, "vocab_size": _tiktoken_vocab(given, named, vocab)}
    if vocab in (GPT2_VOCAB, NANOGPT_PADDED_VOCAB):
        return {"name": GPT2_BPE[0], "vocab_size": GPT2_VOCAB}
    raise refusal(
        given,
        f"a vocabulary of {vocab} is not GPT-2's BPE and no {NANOGPT_META} beside {file.name} names "
        f"its characters: copy the dataset's {NANOGPT_META} (nanoGPT's data/DATASET/) there",
    )


def _tiktoken_vocab(given: str, name: str, rows: int) -> int:
    """A tiktoken encoding's vocabulary (GPT-2's without loading it)."""
    if name in GPT2_BPE:
        return GPT2_VOCAB
    from engine.data import DataError
    from engine.data.tokenizers import TiktokenTokenizer

    try:
        return TiktokenTokenizer(name).vocab_size
    except DataError as e:
        raise refusal(given, str(e)) from None


def _model_config(given: str, raw: Any, where: str) -> ModelConfig:
    """A source's recorded [model] table as this cockpit's ModelConfig."""
    from engine.config.loading import config_from_dict

    table = recorded_config({"model": raw if isinstance(raw, dict) else {}})["model"]
    known = {f.name for f in fields(SECTIONS["model"])}
    try:
        return config_from_dict({"model": {k: v for k, v in table.items() if k in known}}, where).model
    except ConfigError as e:
        raise refusal(given, str(e)) from None


def _cockpit_checkpoint(given: str, where: Path, file: Path) -> WeightsSource:
    from engine.checkpoint.errors import CheckpointError
    from engine.checkpoint.store import load_checkpoint

    try:
        state = load_checkpoint(file, mmap=True)
    except CheckpointError as e:
        raise refusal(given, str(e)) from None
    model = _model_config(given, state["config"].get("model"), str(file))
    tokenizer = state.get("tokenizer")
    if not isinstance(tokenizer, dict) or not isinstance(tokenizer.get("vocab_size"), int):
        raise refusal(given, f"{file}: the checkpoint records no tokenizer to check the corpus against")

    def read(lazy: bool = False) -> dict[str, torch.Tensor]:
        if state.get("_sharded"):
            from engine.distributed.sharded import dcp_model_state

            return dcp_model_state(file)
        return state["model"]

    return WeightsSource(
        given=given,
        path=where,
        file=file,
        kind="cockpit checkpoint",
        shape={key: getattr(model, key) for key in SHAPE_KEYS},
        tokenizer=dict(tokenizer),
        step=int(state.get("step", 0)),
        read=read,
    )


def _safetensors_export(given: str, file: Path) -> WeightsSource:
    _, metadata = _safetensors_header(given, file)
    if metadata.get("producer") != "cockpit" or "model_config" not in metadata:
        raise refusal(
            given,
            f"{file.name} is a safetensors file cockpit did not export (no model config in its "
            "metadata); for a Hugging Face model give its directory, with config.json",
        )
    try:
        model_raw = json.loads(metadata["model_config"])
        tokenizer = json.loads(metadata["tokenizer_meta"])
        tied = json.loads(metadata.get("tied_weights", "{}"))
        step = int(metadata.get("step", "0"))
    except (KeyError, ValueError, TypeError):
        raise refusal(given, f"{file.name}: its cockpit metadata does not read") from None
    model = _model_config(given, model_raw, str(file))
    if not isinstance(tokenizer, dict) or not isinstance(tokenizer.get("vocab_size"), int):
        raise refusal(given, f"{file.name}: its metadata records no tokenizer")

    def read(lazy: bool = False) -> dict[str, torch.Tensor]:
        tensors = _load_safetensors(given, file, lazy)
        for dropped, kept in (tied.items() if isinstance(tied, dict) else ()):
            if kept in tensors:
                tensors[dropped] = tensors[kept]
        return tensors

    return WeightsSource(
        given=given,
        path=file,
        file=file,
        kind="cockpit safetensors",
        shape={key: getattr(model, key) for key in SHAPE_KEYS},
        tokenizer=tokenizer,
        step=step,
        read=read,
    )
