"""The README is a front page and the docs site builds: `mkdocs build --strict` (no broken link or
anchor, no page left out of the nav), the README under 10 KB with links that resolve, no line of
prose over 120 characters, the paths and tests the pages name exist, the architecture tree lists
every package, and the pictures are the snapshots they say they are."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = REPO / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
MAX_LINE = 120
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
# A repository path in a page: a file with its extension, or a folder ending in "/" alone in backquotes.
FILE_PATH = re.compile(
    r"(?<![\w/.$~-])((?:engine|cockpit|tests|bench|examples|presets|docs|\.ci)/[\w./-]*\w\.(?:py|toml|md|svg|sbatch|tcss))"
    r"(?:::(\w+))?"
)
# Paths that are examples of a user's files (in a message the page quotes), not files of the repository.
EXAMPLES = {"presets/mine.toml"}
FOLDER_PATH = re.compile(r"`((?:engine|cockpit|tests|bench|examples|presets|docs)/(?:[\w.-]+/)*)`")


def prose_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(number, line) of each line outside code fences and tables."""
    fence = ""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        stripped = line.lstrip()
        if fence:
            if stripped.startswith(fence):
                fence = ""
            continue
        if stripped.startswith(("```", "~~~")):
            fence = stripped[:3]
            continue
        if stripped.startswith("|"):
            continue
        yield number, line


def test_the_docs_build_strictly(tmp_path: Path) -> None:
    for module in ("mkdocs", "material"):
        if importlib.util.find_spec(module) is None:
            # CI installs .[dev], so there the build must run, not skip
            assert not os.environ.get("CI"), f"{module} is missing in CI: .[dev] should install it"
            pytest.skip(f"{module} is not installed (pip install -e '.[dev]' installs mkdocs-material)")
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(REPO / "mkdocs.yml"), "-d", str(site)],
        capture_output=True, text=True, timeout=300, cwd=REPO,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert (site / "index.html").is_file()
    built = {p.relative_to(DOCS).with_suffix("") for p in PAGES}
    for page in built:  # every page became a page of the site (the nav leaves none out: strict)
        target = site / ("index.html" if page.name == "index" else page / "index.html")
        if page.name == "index" and page.parent != Path("."):
            target = site / page.parent / "index.html"
        assert target.is_file(), f"docs/{page}.md was not built"


def test_the_readme_is_a_front_page() -> None:
    size = len(README.read_bytes())
    assert size < 10_000, f"README.md is {size:,} bytes: move text to docs/ (the front page stays under 10 KB)"


def test_the_readme_starts_with_the_two_commands_ci_runs() -> None:
    text = README.read_text(encoding="utf-8")
    first_block = text.split("```sh\n", 1)[1].split("\n```", 1)[0]
    assert first_block.splitlines() == [
        'pip install "torch==2.13.0" -e . && cockpit',
        'pip install "torch==2.13.0" -e ".[dev]" && python -m pytest -n 2 --dist loadfile',
    ]
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert first_block.splitlines()[1] in ci.splitlines(), ".ci/run runs the README's test command"


@pytest.mark.parametrize("path", [README, *PAGES], ids=lambda p: str(p.relative_to(REPO)))
def test_no_line_of_prose_is_longer_than_120_characters(path: Path) -> None:
    long = [f"{path.name}:{n}: {len(line)} characters" for n, line in prose_lines(path) if len(line) > MAX_LINE]
    assert not long, "wrap these lines (code blocks and tables excepted):\n" + "\n".join(long)


def _headings(path: Path) -> set[str]:
    from markdown.extensions.toc import slugify

    return {slugify(line.lstrip("#").strip().replace("`", ""), "-")
            for _, line in prose_lines(path) if line.startswith("#")}  # fmt: skip


def test_every_relative_link_of_the_readme_resolves() -> None:
    links = [m.group(1) for _, line in prose_lines(README) for m in LINK.finditer(line)]
    relative = [link for link in links if not re.match(r"[a-z]+:", link)]
    assert any(link.startswith("docs/") for link in relative), "the README links to the docs"
    for link in relative:
        target, _, anchor = link.partition("#")
        path = README.parent / target if target else README
        assert path.exists(), f"README.md links to {link}, which does not exist"
        if anchor and path.suffix == ".md" and importlib.util.find_spec("markdown") is not None:
            assert anchor in _headings(path), f"README.md links to {link}: no such heading"


def test_the_paths_and_tests_the_pages_name_exist() -> None:
    missing = []
    for page in [README, *PAGES]:
        for n, line in prose_lines(page):
            for m in FILE_PATH.finditer(line):
                path, test = REPO / m.group(1), m.group(2)
                if m.group(1) in EXAMPLES:
                    continue
                if not path.is_file():
                    missing.append(f"{page.relative_to(REPO)}:{n}: {m.group(1)}")
                elif test and not re.search(rf"^\s*(async )?def {test}\(", path.read_text(), re.M):
                    missing.append(f"{page.relative_to(REPO)}:{n}: {m.group(0)} (no such test)")
            for m in FOLDER_PATH.finditer(line):
                if not (REPO / m.group(1)).is_dir():
                    missing.append(f"{page.relative_to(REPO)}:{n}: {m.group(1)}")
    assert not missing, "the docs name files that are not there:\n" + "\n".join(missing)


def test_the_architecture_tree_lists_every_package() -> None:
    page = (DOCS / "architecture.md").read_text(encoding="utf-8")
    tree = page.split("## The tree", 1)[1].split("```text\n", 1)[1].split("\n```", 1)[0]
    listed, top = set(), ""
    for line in tree.splitlines():
        name = line.split()[0]
        if not line.startswith(" "):
            top = name
            listed.add(name)
        else:
            listed.add(top + name)
    packages = {f"{p.parent.relative_to(REPO).as_posix()}/" for top in ("engine", "cockpit")
                for p in (REPO / top).glob("*/__init__.py")}  # fmt: skip
    modules = {p.relative_to(REPO).as_posix() for top in ("engine", "cockpit")
               for p in (REPO / top).glob("*.py") if not p.name.startswith("__")}  # fmt: skip
    unlisted = sorted(({"engine/", "cockpit/"} | packages | modules) - listed)
    assert not unlisted, f"add these to docs/architecture.md's tree: {unlisted}"
    gone = sorted(name for name in listed if not (REPO / name).exists())
    assert not gone, f"docs/architecture.md's tree lists what is not there: {gone}"


@pytest.mark.parametrize(
    ("picture", "snapshot"),
    [
        ("cockpit.svg", "test_snapshots/test_running[160x48].svg"),
        ("compare.svg", "test_run_views/test_live_run_compared_with_two_others.svg"),
    ],
)
def test_the_pictures_are_the_snapshots_they_show(picture: str, snapshot: str) -> None:
    stored = REPO / "tests" / "cockpit" / "__snapshots__" / snapshot
    assert (DOCS / picture).read_bytes() == stored.read_bytes(), (
        f"docs/{picture} is not {stored.name}: copy the snapshot over after --snapshot-update"
    )
