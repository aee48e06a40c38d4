"""QA of issue 25's --init-from: a safetensors export under any name, and a cut-short file
refused before the run starts (when the source is opened and checked, not when it is loaded)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from engine.checkpoint.init_from import open_source
from engine.checkpoint.init_source import InitFromError
from engine.checkpoint.source_fit import check_fits, load_into
from engine.config.run_config import ModelConfig
from engine.model.gpt import GPT

CHARS = "abcdefgh \n"


def cockpit_export(path: Path) -> GPT:
    """A safetensors file as `cockpit export --format safetensors --out PATH` writes one."""
    torch.manual_seed(0)
    cfg = ModelConfig(n_layer=1, n_head=2, n_embd=16, block_size=16, tie_embeddings=False)
    model = GPT(cfg, len(CHARS))
    metadata = {
        "producer": "cockpit",
        "model_config": json.dumps(asdict(cfg)),
        "tokenizer_meta": json.dumps({"name": "char", "vocab_size": len(CHARS), "chars": CHARS}),
        "step": "6",
    }
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path), metadata=metadata)
    return model


def test_an_export_named_without_its_suffix_is_still_read_as_safetensors(tmp_path):
    written = cockpit_export(tmp_path / "model_export")  # `--out model_export` names it so
    source = open_source(str(tmp_path / "model_export"))
    assert source.kind == "cockpit safetensors" and source.step == 6
    model = GPT(ModelConfig(n_layer=1, n_head=2, n_embd=16, block_size=16, tie_embeddings=False), len(CHARS))
    load_into(model, source)
    rows = len(CHARS)  # the padded rows are a fresh model's
    assert torch.equal(model.state_dict()["wte.weight"][:rows], written.state_dict()["wte.weight"][:rows])


def test_a_cut_short_safetensors_is_refused_when_checked_before_the_run(tmp_path):
    cockpit_export(tmp_path / "full.safetensors")
    data = (tmp_path / "full.safetensors").read_bytes()
    (tmp_path / "cut.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(InitFromError) as error:
        source = open_source(str(tmp_path / "cut.safetensors"))
        check_fits(source, ModelConfig(n_layer=1, n_head=2, n_embd=16, block_size=16, tie_embeddings=False))
    text = str(error.value)
    assert "\n" not in text
    assert f"cut.safetensors is cut short ({len(data) // 2:,} of the {len(data):,} bytes" in text
    assert text.endswith("copy it again")


def test_a_hugging_face_directory_with_a_cut_short_model_is_refused_before_the_run(tmp_path):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, n_positions=16, vocab_size=len(CHARS))
    folder = tmp_path / "gpt2"
    transformers.GPT2LMHeadModel(config).save_pretrained(folder)
    (folder / "cockpit_chars.json").write_text(json.dumps(list(CHARS)))
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])
    source = open_source(str(folder))  # the config reads; the tensors are checked next
    cfg = ModelConfig(**{k: v for k, v in source.shape.items()})
    with pytest.raises(InitFromError, match=r"model.safetensors is cut short .*copy it again$"):
        check_fits(source, cfg)


def _checkpoint(folder: Path, init_from: str) -> Path:
    from engine.config.run_config import RunConfig

    config = RunConfig().to_dict()
    config["model"]["init_from"] = init_from
    folder.mkdir()
    path = folder / "ckpt-00000002.pt"
    torch.save({"config": config, "step": 2, "model": {}}, path)
    return path


@pytest.mark.parametrize(
    "recorded, started",
    [("", "it started from fresh weights"), ("/models/gpt2", "it started from /models/gpt2")],
)
def test_init_from_with_resume_says_which_to_drop(tmp_path, recorded, started):
    from cockpit.cli.preflight import check_resume_init_from
    from engine.config.run_config import ConfigError

    ckpt = _checkpoint(tmp_path / "run", recorded)
    other = str(tmp_path / "other")
    with pytest.raises(ConfigError) as error:
        check_resume_init_from(str(ckpt), other)
    assert str(error.value) == (
        f"--init-from {other} with --resume {ckpt}: a resumed run's weights come from its own "
        f"checkpoint ({started}); drop --init-from to resume it, or drop --resume to start a new "
        f"run from {other}"
    )


def test_init_from_naming_the_runs_own_source_resumes(tmp_path):
    from cockpit.cli.preflight import check_resume_init_from

    source = tmp_path / "gpt2"
    source.mkdir()
    ckpt = _checkpoint(tmp_path / "run", str(source))
    check_resume_init_from(str(ckpt), str(source))  # the same source again: no refusal
