from pathlib import Path

import pytest

from engine.config.loading import parse_override
from engine.config.presets import discover, load_preset
from engine.config.run_config import ConfigError


def write(tmp_path: Path, text: str, name: str = "p.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_every_shipped_preset_loads_with_a_description():
    presets = discover()
    assert {"default", "nanogpt-cpu", "shakespeare-char"} <= set(presets)
    for name, info in presets.items():
        cfg = load_preset(name)
        assert cfg.name == name
        assert info.description and not info.description.startswith("(invalid")


def test_nanogpt_cpu_is_nanogpts_recipe():
    cfg = load_preset("nanogpt-cpu")
    m, o, s, t = cfg.model, cfg.optim, cfg.schedule, cfg.train
    assert (m.n_layer, m.n_head, m.n_embd, m.block_size, m.dropout) == (4, 4, 128, 64, 0.0)
    assert (t.batch_size, t.max_steps, s.decay_steps, s.warmup_steps) == (12, 2000, 2000, 100)
    assert (o.lr, s.min_lr, o.beta2) == (1e-3, 1e-4, 0.99)
    assert (cfg.eval.interval, cfg.eval.batches) == (250, 20)


@pytest.mark.parametrize(
    "body, expected",
    [
        ("[model]\nn_layers = 3\n", "unknown key 'n_layers' (did you mean 'n_layer'?)"),
        ("[model]\nn_layer = 'four'\n", "model.n_layer: expected an integer, got 'four'"),
        ("[optim]\nlr = -1\n", "optim.lr: expected a value > 0.0"),
        ("[optim]\nlr = 0\n", "optim.lr: expected a value > 0.0"),
        ("[model]\nblock_size = 0\n", "model.block_size: expected a value >= 1"),
        ("[model]\nn_embd = 100\nn_head = 3\n", "must be divisible by model.n_head"),
        ("[model]\ndropout = 1.0\n", "model.dropout: expected a value < 1.0"),
        (
            "[optim]\nname = 'rmsprop'\n",
            "optim.name: expected one of 'adamw', 'muon', 'lion', 'adafactor', 'sgd'",
        ),
        ("[modle]\n", "unknown key 'modle' (did you mean 'model'?)"),
        ("model = 3\n", "expected a table"),
        ("[model\n", "malformed TOML"),
        ("[optim]\nlr = nan\n", "expected a finite number"),
        ("[model]\nbias = 1\n", "model.bias: expected true or false"),
    ],
)
def test_bad_presets_name_file_key_and_expectation(tmp_path, body, expected):
    path = write(tmp_path, body)
    with pytest.raises(ConfigError) as err:
        load_preset(str(path))
    message = str(err.value)
    assert expected in message
    assert str(path) in message
    assert "\n" not in message


def test_overrides_parse_toml_values_and_bare_words():
    assert parse_override("optim.lr=3e-4") == ("optim", "lr", 3e-4)
    assert parse_override("n_layer=6") == ("model", "n_layer", 6)
    assert parse_override("data.source=tinyshakespeare") == ("data", "source", "tinyshakespeare")
    assert parse_override('sample.prompts=["a", "b"]') == ("sample", "prompts", ["a", "b"])
    cfg = load_preset("default", ["optim.lr=3e-4", "train.max_steps=10"])
    assert cfg.optim.lr == 3e-4 and cfg.train.max_steps == 10


@pytest.mark.parametrize(
    "text, expected",
    [
        ("optim.lr", "expected KEY=VALUE"),
        ("bogus=1", "unknown key 'bogus'"),
        ("model.n_layer", "expected KEY=VALUE"),
        ("modle.n_layer=1", "unknown key 'modle'"),
        ("model.layers=1", "unknown key 'layers'"),
    ],
)
def test_bad_overrides(text, expected):
    with pytest.raises(ConfigError, match=expected):
        parse_override(text)


def test_ambiguous_override_names_both_sections():
    with pytest.raises(ConfigError, match="ambiguous key, write eval.interval or sample.interval"):
        parse_override("interval=5")


def test_extends_merges_parent_and_child(tmp_path):
    write(
        tmp_path,
        'description = "base"\n[model]\nn_layer = 2\nn_embd = 64\n[optim]\nlr = 2e-3\n',
        "base.toml",
    )
    write(tmp_path, 'extends = "base"\ndescription = "child"\n[model]\nn_layer = 3\n', "child.toml")
    cfg = load_preset("child", [], [tmp_path])
    assert (cfg.model.n_layer, cfg.model.n_embd, cfg.optim.lr) == (3, 64, 2e-3)
    assert cfg.description == "child"
    # --set beats both
    assert load_preset("child", ["model.n_layer=5"], [tmp_path]).model.n_layer == 5


def test_extends_cycle_is_an_error(tmp_path):
    write(tmp_path, 'extends = "b"\n', "a.toml")
    write(tmp_path, 'extends = "a"\n', "b.toml")
    with pytest.raises(ConfigError, match="cycle"):
        load_preset("a", [], [tmp_path])


def test_later_directories_win_name_clashes(tmp_path, monkeypatch):
    user = tmp_path / "user"
    user.mkdir()
    write(user, 'description = "mine"\n[train]\nmax_steps = 7\n', "default.toml")
    monkeypatch.setenv("COCKPIT_PRESETS_DIR", str(user))
    assert discover()["default"].origin == "user"
    assert load_preset("default").train.max_steps == 7
    extra = tmp_path / "extra"
    extra.mkdir()
    write(extra, 'description = "cli"\n[train]\nmax_steps = 9\n', "default.toml")
    assert discover([extra])["default"].origin == "--presets-dir"
    assert load_preset("default", [], [extra]).train.max_steps == 9


def test_unknown_preset_lists_known_ones():
    with pytest.raises(ConfigError, match="unknown preset 'nope' \\(known: .*nanogpt-cpu"):
        load_preset("nope")
