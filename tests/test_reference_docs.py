"""The reference pages under docs/reference say what the code does: the generated ones (the
command line, the config keys, the metrics file) are what docs/gen_reference.py writes from the
code now, and name every option, key and field; the wire protocol's page lists the commands and
limits the server enforces."""

from __future__ import annotations

import argparse
import dataclasses
import html
import importlib.util
import re
import sys
import typing
from pathlib import Path
from types import ModuleType

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "docs" / "reference"


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_reference", REPO / "docs" / "gen_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    return load_generator()


def section(text: str, heading: str) -> str:
    """The text under `heading` (a whole line), up to the next heading of its level or above."""
    level = len(heading) - len(heading.lstrip("#"))
    start = text.index(f"\n{heading}\n") + len(heading) + 2
    end = re.search(rf"\n#{{1,{level}}} ", text[start:])
    return text[start : start + end.start()] if end else text[start:]


def plain(text: str) -> str:
    """An HTML page fragment as the words a reader sees (tags dropped, entities read)."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", text)).split())


@pytest.mark.parametrize("name", ["cli.md", "config.md", "metrics.md"])
def test_the_generated_page_is_what_the_code_makes_now(gen: ModuleType, name: str) -> None:
    committed = (REFERENCE / name).read_text(encoding="utf-8")
    assert committed == gen.PAGES[name](), (
        f"docs/reference/{name} is out of date: run python docs/gen_reference.py"
    )


def test_the_check_mode_names_a_stale_page(
    gen: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(gen, "REFERENCE", tmp_path)
    for name, page in gen.PAGES.items():
        (tmp_path / name).write_text(page(), encoding="utf-8")
    assert gen.main(["--check"]) == 0
    (tmp_path / "config.md").write_text("# an old page\n", encoding="utf-8")
    assert gen.main(["--check"]) == 1
    assert "config.md; run python docs/gen_reference.py" in capsys.readouterr().err
    assert (tmp_path / "config.md").read_text() == "# an old page\n"  # --check writes nothing


def walk(parser: argparse.ArgumentParser) -> typing.Iterator[argparse.ArgumentParser]:
    """`parser` and every subcommand's parser below it."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from walk(sub)


def test_every_command_and_option_of_the_parser_is_in_the_cli_page(gen: ModuleType) -> None:
    page = (REFERENCE / "cli.md").read_text(encoding="utf-8")
    parsers = list(walk(gen._cockpit_parser()))
    assert len(parsers) > 15  # cockpit, train, start, ..., presets show, data prepare/ls/rm
    for parser in parsers:
        level = "#" * max(2, 1 + parser.prog.count(" "))  # `cockpit data ls` under `cockpit data`
        text = section(page, f"{level} `{parser.prog}`")
        assert parser.prog in text.split("```text\n", 1)[1], f"{parser.prog}: no usage"
        for action in parser._actions:
            if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
                continue
            if isinstance(action, argparse._SubParsersAction):
                continue
            name = action.option_strings[-1] if action.option_strings else action.metavar
            if name is None:  # a positional without a metavar shows its choices, or its name
                name = "{" + ",".join(action.choices) + "}" if action.choices else action.dest
            assert f"<code>{html.escape(str(name), quote=False)}" in text, f"{parser.prog} {name}"
            if action.help:
                words = " ".join(str(action.help).replace("`", "").split()).split(" (default")[0]
                assert words[:40] in plain(text), (parser.prog, name)


def test_a_new_option_appears_in_the_cli_page(gen: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    build = gen._cockpit_parser

    def with_a_new_flag() -> argparse.ArgumentParser:
        parser = build()
        ps = next(p for p in walk(parser) if p.prog == "cockpit ps")
        ps.add_argument("--colour", choices=("auto", "never"), help="colour the table (default: auto)")
        return parser

    monkeypatch.setattr(gen, "_cockpit_parser", with_a_new_flag)
    page = gen.cli_page()
    assert page != (REFERENCE / "cli.md").read_text(encoding="utf-8")
    ps = section(page, "## `cockpit ps`")
    assert "[--colour {auto,never}]" in ps
    row = re.search(r'<tr id="cockpit-ps-colour">(.*?)</tr>', ps, re.S)
    assert row and plain(row.group(1)) == "--colour {auto,never} colour the table (default: auto)"


def test_every_config_key_is_in_the_config_page_with_its_type_default_and_help() -> None:
    """Against what a preset with nothing set resolves to (`presets show` writes every key)."""
    from engine.config import RunConfig, config_to_toml

    defaults = {k: v for k, v in tomllib.loads(config_to_toml(RunConfig())).items() if isinstance(v, dict)}
    assert len(defaults) >= 9  # data, model, optim, schedule, train, eval, sample, checkpoint, log
    page = (REFERENCE / "config.md").read_text(encoding="utf-8")
    for name, values in defaults.items():
        text = section(page, f"## `[{name}]`")
        cls = typing.get_type_hints(RunConfig)[name]
        hints = typing.get_type_hints(cls)
        by_name = {f.name: f for f in dataclasses.fields(cls)}
        assert set(values) == set(by_name)
        for key, value in values.items():
            meta = by_name[key].metadata
            row = re.search(rf'<tr id="{name}\.{key}">(.*?)</tr>', text, re.S)
            assert row, f"{name}.{key} is not in docs/reference/config.md"
            cells = [plain(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row.group(1), re.S)]
            shown_key, kind, default, allowed, meaning = cells
            assert shown_key == key
            assert kind == {int: "integer", float: "number", bool: "boolean", str: "string"}.get(
                hints[key], "list of strings"
            )
            assert tomllib.loads(f"v = {default}")["v"] == value, f"{name}.{key}: default {default}"
            assert meaning == " ".join(meta["help"].split()), f"{name}.{key}"
            for choice in meta.get("choices", ()):
                assert f'"{choice}"' in allowed, f"{name}.{key}: choice {choice}"
            def bound(v: float) -> str:  # a whole number whole: 4294967295, not 4.29497e+09
                return str(v) if isinstance(v, int) else f"{v:g}"

            if "min" in meta:
                assert f"≥ {bound(meta['min'])}" in allowed, f"{name}.{key}: min"
            if "max" in meta:
                assert f"≤ {bound(meta['max'])}" in allowed, f"{name}.{key}: max"


def test_the_metrics_page_has_every_record_kind_and_field() -> None:
    from engine.events import EVENT_TYPES

    page = (REFERENCE / "metrics.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## `(\w+)`$", page, re.M)
    assert sorted(headings) == sorted(EVENT_TYPES), "a record kind is missing or extra"
    for kind, cls in EVENT_TYPES.items():
        text = section(page, f"## `{kind}`")
        listed = re.findall(r"<tr><td[^>]*><code>(\w+)</code></td>", text)
        assert listed == [f.name for f in dataclasses.fields(cls) if f.name != "time"], kind


def test_a_field_nobody_described_stops_the_generator(
    gen: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    fields = dict(gen.METRICS_FIELDS)
    del fields[("step", "grad_norm")]
    monkeypatch.setattr(gen, "METRICS_FIELDS", fields)
    with pytest.raises(SystemExit, match="Step.grad_norm"):
        gen.metrics_page()


def test_the_wire_page_lists_every_command_with_its_arguments() -> None:
    from engine.control import wire

    page = (REFERENCE / "wire.md").read_text(encoding="utf-8")
    table = page.split("| command | arguments |", 1)[1].split("\n\n", 1)[0]
    listed: dict[str, set[str]] = {}
    for row in table.splitlines()[2:]:
        names, arguments = row.split(" | ")[0:2]
        for name in re.findall(r"`(\w+)`", names):
            listed[name] = set(re.findall(r"`(\w+)`", arguments))
    assert listed == {name: set(args) for name, args in wire.COMMANDS.items()}
    for name, required in wire.REQUIRED.items():
        row = next(r for r in table.splitlines() if r.startswith(f"| `{name}`"))
        assert all(re.search(rf"`{arg}` \((number|object), required\)", row) for arg in required), name


def test_the_wire_page_states_the_limits_the_server_enforces() -> None:
    from engine.control import catch_up, server, viewer, wire
    from engine.rundir import metrics_log

    page = " ".join((REFERENCE / "wire.md").read_text(encoding="utf-8").split())
    assert wire.MAX_LINE_BYTES == 1 << 20 and "a line is at most 1 MiB" in page
    assert f"at most {wire.MAX_DEPTH} arrays or objects deep" in page
    assert f"`protocol` ({wire.PROTOCOL})" in page
    assert f"passes {viewer.VIEWER_QUEUE:,} has it cleared" in page
    assert f"At most {server.MAX_VIEWERS} viewers at once (`MAX_VIEWERS`)" in page
    assert viewer.REPLY_BACKLOG_BYTES == 1 << 20 and "once 1 MiB of its lines wait" in page
    assert server.SEND_CHUNK_BYTES == 256 * 1024 and "one 256 KiB piece" in page
    assert f"thinned evenly to at most {metrics_log.REPLAY_STEPS:,}" in page
    assert f"the newest {catch_up.REPLAY_JOURNAL} `viewer` and `command` records" in page
    assert f"`RUN_DIR/{wire.SOCKET_NAME}`" in page
