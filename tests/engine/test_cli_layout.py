"""The CLI package's shape: subcommands use the launch helpers, never the command line module
that imports them, and the launch helpers' defaults are `cockpit train`'s own."""

from __future__ import annotations

import ast
from pathlib import Path

import cockpit.cli
from cockpit.cli.command_line import parse_args, subcommands
from cockpit.cli.launch import train_arguments

CLI = Path(cockpit.cli.__file__).parent


def imported_names(path: Path) -> list[tuple[str, str]]:
    """(module, name) for every `from M import N` and (M, "") for every `import M`, at any depth."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found += [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(alias.name, "") for alias in node.names]
    return found


def test_no_module_of_the_cli_imports_the_command_line_back():
    submodules = {p.stem for p in CLI.glob("*.py")}
    back = []
    for path in CLI.glob("*.py"):
        if path.stem in ("__init__", "command_line"):
            continue
        for module, name in imported_names(path):
            if module == "cockpit.cli.command_line" or module.startswith("cockpit.cli.command_line."):
                back.append(f"{path.name}: {module}")
            elif module == "cockpit.cli" and name not in submodules:
                back.append(f"{path.name}: from cockpit.cli import {name}")
    assert back == []


def test_every_subcommand_module_has_the_four_parts_and_is_listed_once():
    table = subcommands()
    for name, module in table.items():
        assert module.NAME == name
        assert isinstance(module.HELP, str) and module.HELP
        assert callable(module.add_arguments) and callable(module.run)
    helpers = {"__init__", "command_line", "launch", "preflight", "branch", "options", "headless",
               "stop_signals", "preset_fit", "one_line_parser", "terminal", "sample_compare",
               "series_driver", "approval_prompt"}  # fmt: skip
    modules = {p.stem for p in CLI.glob("*.py")} - helpers
    assert modules == {m.__name__.rpartition(".")[2] for m in table.values()}


def test_train_arguments_are_what_cockpit_train_parses():
    parsed = vars(parse_args(["train"]))
    parsed.pop("parser")  # the whole parser, for `cockpit completion`
    assert vars(train_arguments()) == parsed
    changed = train_arguments(resume="runs/x", headless=True)
    assert (changed.resume, changed.headless, changed.subcommand) == ("runs/x", True, "train")
    assert vars(train_arguments())["resume"] is None  # nothing kept from one call to the next


def test_completion_is_given_the_parser_that_parsed_its_command_line():
    args = parse_args(["completion", "bash"])
    names = set()
    for action in args.parser._actions:
        names |= set(getattr(action, "choices", None) or ())
    assert {"train", *subcommands()} <= names
