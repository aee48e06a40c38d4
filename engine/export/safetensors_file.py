"""`cockpit export --format safetensors`: the weights as one .safetensors file under cockpit's own
names, with the model config in its metadata: `GPT(ModelConfig(**json.loads(meta["model_config"])),
int(meta["vocab_size"]))` rebuilds any shape, once the tied names in meta["tied_weights"] point at
the tensor they share. Padded vocabulary rows are cut, so model_config says vocab_multiple = 1.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from engine.checkpoint.trained import TrainedModel
from engine.export import ExportResult
from engine.export.place import file_place
from engine.export.weights_source import (
    cockpit_version,
    distinct_tensors,
    load_for_export,
    source_note,
    true_vocab_state,
    val_loss_of,
)
from engine.files import atomic_write_by_name

DEFAULT_NAME = "model.safetensors"


def metadata_of(trained: TrainedModel) -> dict[str, str]:
    """The file's metadata: every value a string."""
    loss = val_loss_of(trained)
    return {
        "format": "pt",
        "producer": "cockpit",
        "cockpit_version": cockpit_version(),
        # the tensors are cut to the tokenizer's rows: rebuilt with no padding, they fit
        "model_config": json.dumps({**dataclasses.asdict(trained.cfg.model), "vocab_multiple": 1}),
        "vocab_size": str(trained.tokenizer.vocab_size),
        "tokenizer": trained.tokenizer.name,
        "tokenizer_meta": json.dumps(trained.tokenizer.to_meta()),
        "step": str(trained.step),
        "val_loss": "" if loss is None else repr(loss),
    }


def export(target: Path, out: Path) -> ExportResult:
    from safetensors.torch import save_file

    trained = load_for_export(target)
    tensors, tied = distinct_tensors(true_vocab_state(trained))
    metadata = metadata_of(trained)
    metadata["tied_weights"] = json.dumps(tied)
    contiguous = {k: v.detach().contiguous() for k, v in tensors.items()}
    # written in a private folder beside `out`, then renamed over it: never through a link,
    # with FILE_MODE, never half-written; the folders made for it go again if it fails
    with file_place(out):
        atomic_write_by_name(out, lambda tmp: save_file(contiguous, str(tmp), metadata))
    notes = [source_note(trained)]
    if tied:
        pairs = ", ".join(f"{name} is {kept}" for name, kept in tied.items())
        notes.append(f"tied weights stored once: {pairs} (metadata 'tied_weights')")
    return ExportResult(written=[out], notes=notes)
