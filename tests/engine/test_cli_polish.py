"""The command line people expect: --version, --help, help on every option, `presets show`,
and shell completion scripts that really complete (bash run for real; fish and zsh where
installed). Generic over the parser, so a subcommand added later is held to the same rules."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import tomllib

from cockpit.cli import build_parser
from engine.config.presets import discover, load_preset


def cockpit(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cockpit", *args],
        capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})},
    )  # fmt: skip


def parsers(parser: argparse.ArgumentParser, path: str = "cockpit"):
    """(command path, parser) for the parser and every subcommand's parser below it."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from parsers(sub, f"{path} {name}")


def test_version_and_help_from_python_dash_m():
    version = cockpit("--version")
    assert version.returncode == 0
    assert version.stdout.startswith("cockpit ") and len(version.stdout.split()) >= 2
    helped = cockpit("--help")
    assert helped.returncode == 0 and helped.stderr == ""
    for name in ("train", "plan", "presets", "completion"):
        assert f"\n    {name}" in helped.stdout


def test_every_option_of_every_subcommand_has_help():
    missing = []
    for path, parser in parsers(build_parser()):
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            # argparse.SUPPRESS is a deliberate choice: an option hidden from --help
            if not (action.help or "").strip():
                missing.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
            if isinstance(action, argparse._SubParsersAction):
                missing += [f"{path} {c.dest}" for c in action._choices_actions if not c.help]
    assert missing == [], f"no help= on: {missing}"


def test_every_subcommand_help_renders():
    for path, parser in parsers(build_parser()):
        assert parser.format_help().startswith(f"usage: {path}"), path


# ---------------------------------------------------------------------------------------------
# cockpit presets


@pytest.fixture
def user_presets(tmp_path: Path) -> Path:
    """A user preset folder with a preset that extends a built-in one."""
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "tinier.toml").write_text(
        'extends = "tiny"\ndescription = "tiny, narrower"\n[model]\nn_embd = 16\n'
    )
    return folder


def test_presets_show_prints_a_preset_that_loads_to_the_same_config(tmp_path, user_presets):
    args = ["tinier", "--set", "optim.lr=2e-3", "--presets-dir", str(user_presets)]
    shown = cockpit("presets", "show", *args)
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    header = [line for line in text.splitlines() if line.startswith("# ")][:4]
    assert str(user_presets / "tinier.toml") in header[0]
    assert "extends:" in header[1] and "tiny.toml" in header[1]
    assert "--set optim.lr=2e-3" in text
    assert "# transformer blocks\nn_layer = 2\n" in text  # each key's help above it
    assert "n_embd = 16\n" in text and "lr = 0.002\n" in text

    saved = tmp_path / "saved.toml"
    saved.write_text(text)
    tomllib.loads(text)  # valid TOML as printed
    expected = load_preset("tinier", ["optim.lr=2e-3"], [user_presets])
    assert load_preset(str(saved)) == expected
    # and the command line takes the saved file as a preset
    again = cockpit("presets", "show", str(saved))
    assert again.returncode == 0, again.stderr
    assert load_preset(str(saved)).to_dict() == expected.to_dict()


def test_presets_show_unknown_name_is_one_line_naming_the_known_ones():
    result = cockpit("presets", "show", "nope")
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cockpit: unknown preset 'nope'")
    assert "tiny" in lines[0] and "default" in lines[0]


def test_presets_show_bad_override_is_one_line():
    result = cockpit("presets", "show", "tiny", "--set", "model.n_layers=2")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "cockpit: --set model: unknown key 'n_layers' (did you mean 'n_layer'?)"
    )


def test_presets_names_prints_only_the_names(user_presets):
    result = cockpit("presets", "--names", "--presets-dir", str(user_presets))
    assert result.returncode == 0
    assert result.stdout.splitlines() == sorted(discover([user_presets]))
    assert "tinier" in result.stdout.splitlines()


# ---------------------------------------------------------------------------------------------
# cockpit completion


@pytest.fixture(scope="module")
def scripts() -> dict[str, str]:
    out = {}
    for shell in ("bash", "zsh", "fish"):
        result = cockpit("completion", shell)
        assert result.returncode == 0, result.stderr
        assert "cockpit" in result.stdout and result.stderr == ""
        out[shell] = result.stdout
    return out


@pytest.fixture
def path_with_cockpit(tmp_path: Path) -> str:
    """PATH with a `cockpit` that is this checkout, for the scripts' `cockpit presets --names`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "cockpit"
    repo = Path(__file__).resolve().parents[2]
    shim.write_text(f'#!/bin/sh\nPYTHONPATH="{repo}" exec "{sys.executable}" -m cockpit "$@"\n')
    shim.chmod(0o755)
    return f"{bin_dir}{os.pathsep}{os.environ['PATH']}"


def test_completion_does_not_import_shtab_for_other_commands():
    code = "import sys, cockpit.cli as c; c.build_parser(); print('shtab' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "False", result.stderr


def test_completion_help_has_the_install_lines():
    result = cockpit("completion", "--help")
    assert "cockpit completion bash > ~/.local/share/bash-completion/completions/cockpit" in (
        result.stdout
    )
    assert "cockpit completion fish > ~/.config/fish/completions/cockpit.fish" in result.stdout


def test_bash_script_is_valid_bash(scripts, tmp_path):
    script = tmp_path / "cockpit.bash"
    script.write_text(scripts["bash"])
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def bash_complete(script: Path, words: list[str], path: str, cwd: Path) -> list[str]:
    """COMPREPLY of the generated function for the command line `words` (the last one is
    being typed), run in a real bash."""
    quoted = " ".join(f"'{w}'" for w in words)
    program = textwrap.dedent(
        f"""\
        source '{script}'
        COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}
        _shtab_cockpit
        printf '%s\\n' "${{COMPREPLY[@]}}"
        """
    )
    result = subprocess.run(
        ["bash", "-c", program], capture_output=True, text=True, timeout=60, cwd=cwd,
        env={**os.environ, "PATH": path},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return [line for line in result.stdout.splitlines() if line]


def test_bash_completes_subcommands_options_presets_and_paths(
    scripts, tmp_path, path_with_cockpit, user_presets
):
    script = tmp_path / "cockpit.bash"
    script.write_text(scripts["bash"])
    (tmp_path / "runs").mkdir()

    def complete(*words: str) -> list[str]:
        return bash_complete(script, ["cockpit", *words], path_with_cockpit, tmp_path)

    assert "train" in complete("tr")
    every = set(complete(""))
    assert {"train", "plan", "presets", "completion"} <= every
    for path, _ in parsers(build_parser()):  # every subcommand, whoever added it
        words = path.split()[1:]
        if words:
            assert words[-1] in complete(*words[:-1], ""), path
    assert {"--preset", "--presets-dir"} <= set(complete("train", "--pre"))
    names = set(discover())
    assert names <= set(complete("train", "--preset", ""))
    assert complete("train", "--preset", "ti") == ["tiny"]
    assert names <= set(complete("plan", "--preset", ""))
    assert names <= set(complete("presets", "show", ""))
    assert complete("completion", "") == ["bash", "zsh", "fish"]
    assert complete("train", "--run-dir", "ru") == ["runs"]
    assert "--version" in complete("--ver")


def test_bash_completion_offers_user_presets_via_env(scripts, tmp_path, path_with_cockpit):
    folder = tmp_path / "env-presets"
    folder.mkdir()
    (folder / "zz-mine.toml").write_text('extends = "tiny"\n')
    script = tmp_path / "cockpit.bash"
    script.write_text(scripts["bash"])
    quoted = "source '%s'; COMP_WORDS=(cockpit train --preset zz); COMP_CWORD=3; _shtab_cockpit;"
    result = subprocess.run(
        ["bash", "-c", quoted % script + ' printf "%s\\n" "${COMPREPLY[@]}"'],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, "PATH": path_with_cockpit, "COCKPIT_PRESETS_DIR": str(folder)},
    )  # fmt: skip
    assert result.stdout.split() == ["zz-mine"], result.stderr


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_script_is_valid_zsh(scripts, tmp_path):
    script = tmp_path / "_cockpit"
    script.write_text(scripts["zsh"])
    result = subprocess.run(["zsh", "-n", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "_cockpit_presets" in scripts["zsh"]


def test_fish_script_lists_every_subcommand_and_option(scripts):
    fish = scripts["fish"]
    for path, parser in parsers(build_parser()):
        if path != "cockpit":
            assert f"-a '{path.split()[-1]}'" in fish, path
        for action in parser._actions:
            long = [o for o in action.option_strings if o.startswith("--")]
            if long and action.help != argparse.SUPPRESS:
                assert f"-l {long[0][2:]}" in fish, (path, long[0])
    assert "-l preset -r -F -a '(cockpit presets --names 2>/dev/null)'" in fish


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed")
def test_fish_script_is_valid_fish_and_completes(scripts, tmp_path, path_with_cockpit):
    script = tmp_path / "cockpit.fish"
    script.write_text(scripts["fish"])
    checked = subprocess.run(["fish", "-n", str(script)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr

    def complete(line: str) -> list[str]:
        result = subprocess.run(
            ["fish", "--no-config", "-c", f"source {script}; complete -C '{line}'"],
            capture_output=True, text=True, timeout=60, cwd=tmp_path,
            env={**os.environ, "PATH": path_with_cockpit},
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        return [line.split("\t")[0] for line in result.stdout.splitlines()]

    assert "train" in complete("cockpit tr")
    assert {"--preset", "--presets-dir"} <= set(complete("cockpit train --pre"))
    assert set(discover()) <= set(complete("cockpit train --preset "))
    assert complete("cockpit completion ") == ["bash", "fish", "zsh"]
