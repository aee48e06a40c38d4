"""The architecture, checked from the source (pure `ast`: nothing is imported).

- no import cycles in engine/ or cockpit/;
- the cockpit uses the engine through the names its packages export (`__all__`) and the
  engine's face (engine.contract, engine.events, engine.files), never a module inside a package;
- no private member (`x._name`) used outside the module that defines it;
- engine/ and cockpit/ stay small at the top, and every package says what it is for.

Each check is a function over {path: source}, so that the tests below can also show it failing
on a few lines written here. That the engine never imports textual is tests/engine/test_layering.py's.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ROOTS = ("engine", "cockpit")
# the engine's modules outside its packages that the cockpit may import from directly
ENGINE_FACE = ("engine.contract", "engine.events", "engine.files")
# engine/: __init__.py, contract.py, events.py and the 13 packages DESIGN.md lays out (config, data,
# files, model, optim, train, checkpoint, rundir, control, distributed, telemetry, plan, export)
MAX_TOP_LEVEL_ENTRIES = 16

# Private members of other projects' code that a module cannot do without: (path, attribute)
# -> why; "*" for every module.
PRIVATE_ALLOWED: dict[tuple[str, str], str] = {
    ("*", "_exit"): "os._exit: the documented way to leave a process without cleanup",
    **{
        ("cockpit/cli/completion.py", name): "argparse has no public way to walk a parser's options"
        for name in ("_actions", "_SubParsersAction", "_choices_actions")
    },
    **{
        ("cockpit/widgets/plotext_frame.py", name): "plotext: drawing at a size without printing"
        for name in ("_set_size", "_set_sizes", "_build_matrix")
    },
    ("engine/checkpoint/store.py", "_core"): "numpy 2's module of the array-rebuilding global",
    ("engine/checkpoint/store.py", "_reconstruct"): "the global a format-1 checkpoint's array names",
    **{
        ("engine/export/gpt2_tokenizer.py", name): "tiktoken: no public merges, pattern, specials"
        for name in ("_mergeable_ranks", "_pat_str", "_special_tokens")
    },
    ("engine/export/hf.py", "_special_tokens"): "tiktoken: no public view of the special tokens",
    ("engine/optim/muon.py", "_foreach_lerp_"): "torch's fused lerp over a list of tensors",
    **{
        ("engine/optim/adafactor.py", name): "torch's list ops: one call for a group's tensors"
        for name in (
            "_foreach_add_",
            "_foreach_addcmul_",
            "_foreach_div",
            "_foreach_div_",
            "_foreach_lerp_",
            "_foreach_mul_",
            "_foreach_norm",
            "_foreach_sqrt_",
            "_foreach_sub",
        )
    },
}


def read_sources(repo: Path = REPO) -> dict[str, str]:
    """{"engine/x/y.py": source} for every module of engine/ and cockpit/."""
    return {
        path.relative_to(repo).as_posix(): path.read_text(encoding="utf-8")
        for root in ROOTS
        for path in sorted((repo / root).rglob("*.py"))
        if "__pycache__" not in path.parts
    }


@dataclass
class Module:
    name: str  # dotted: engine.rundir.history; a package is named by its __init__'s module
    path: str
    tree: ast.Module

    @property
    def is_package(self) -> bool:
        return self.path.endswith("/__init__.py")

    @property
    def package(self) -> str:
        """The package its relative imports start from."""
        return self.name if self.is_package else self.name.rpartition(".")[0]


def parse(sources: dict[str, str]) -> dict[str, Module]:
    modules = {}
    for path, source in sources.items():
        name = path.removesuffix(".py").replace("/", ".").removesuffix(".__init__")
        modules[name] = Module(name, path, ast.parse(source, filename=path))
    return modules


def nodes_in_order(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node, in source order."""
    yield tree
    for child in ast.iter_child_nodes(tree):
        yield from nodes_in_order(child)


def literal(tree: ast.Module, name: str) -> object | None:
    """The value of a top-level `name = <literal>`, or None."""
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign) and node.value is not None:
            targets = [node.target]
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            try:
                return ast.literal_eval(node.value)  # type: ignore[union-attr]
            except ValueError:
                return None
    return None


def lazy_exports(package: Module) -> dict[str, str]:
    """{public name: the module defining it} of a package whose __init__ imports its names on
    first use: `_EXPORTS = {"engine.x.y": ("name", ...)}`."""
    exports = literal(package.tree, "_EXPORTS")
    if not isinstance(exports, dict):
        return {}
    return {name: module for module, names in exports.items() for name in names}


def public_names(package: Module) -> set[str]:
    """A package's `__all__`: a literal list, else the names of its `_EXPORTS`."""
    names = literal(package.tree, "__all__")
    if isinstance(names, (list, tuple)):
        return set(names)
    return set(lazy_exports(package))


def top_level_names(tree: ast.Module) -> set[str]:
    """What a module defines or imports at its top level (under if/try/with too)."""
    names: set[str] = set()
    body = list(tree.body)
    while body:
        node = body.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            body += node.body + getattr(node, "orelse", []) + getattr(node, "finalbody", [])
            body += [n for h in getattr(node, "handlers", []) for n in h.body]
    return names


# --- the import graph ---------------------------------------------------------------------------


def resolve(module: Module, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.package.split(".")
    base = base[: len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def imports(module: Module, modules: dict[str, Module]) -> Iterator[tuple[str, int]]:
    """(module it imports, line) for every import statement: at the top, in a function, or for
    type checkers alone (`if TYPE_CHECKING:`, a dependency all the same). `from pkg import sub`
    imports pkg.sub; `from pkg import name` the module that pkg's `_EXPORTS` says defines it
    (pkg imports it on first use)."""
    for node in nodes_in_order(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            source = resolve(module, node)
            yield source, node.lineno
            package = modules.get(source)
            exports = lazy_exports(package) if package is not None else {}
            for alias in node.names:
                if f"{source}.{alias.name}" in modules:
                    yield f"{source}.{alias.name}", node.lineno
                elif alias.name in exports:
                    yield exports[alias.name], node.lineno


def import_graph(modules: dict[str, Module]) -> dict[str, dict[str, int]]:
    """module -> {module it makes Python run: line}. Importing a.b.c first runs a's and a.b's
    __init__ (an edge to each, unless the importer lies inside that package: its __init__ has
    then already started)."""
    graph: dict[str, dict[str, int]] = {name: {} for name in modules}
    for module in modules.values():
        inside = {module.name.rsplit(".", i)[0] for i in range(module.name.count(".") + 1)}
        for target, line in imports(module, modules):
            parts = target.split(".")
            for i in range(1, len(parts) + 1):
                step = ".".join(parts[:i])
                if step in modules and step not in inside and step != module.name:
                    graph[module.name].setdefault(step, line)
    return graph


def import_cycles(modules: dict[str, Module]) -> list[list[str]]:
    """The groups of modules that import each other (strongly connected, Tarjan's), sorted."""
    graph = import_graph(modules)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:  # recursive: the graph is a few hundred modules deep at most
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def describe_group(group: list[str], modules: dict[str, Module]) -> str:
    """The modules that import each other, and one cycle among them with the lines."""
    graph = import_graph(modules)
    cycle = shortest_cycle(graph, set(group))
    hops = [f"{a} ({modules[a].path}:{graph[a][b]})" for a, b in zip(cycle, cycle[1:], strict=False)]
    return f"{len(group)} modules import each other ({', '.join(group)}); for example " + (
        " -> ".join(hops + [cycle[-1]])
    )


def shortest_cycle(graph: dict[str, dict[str, int]], group: set[str]) -> list[str]:
    """A shortest cycle through the first module of a strongly connected group."""
    start = min(group)
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for target in sorted(graph[node]):
            if target == start:
                return paths[node] + [start]
            if target in group and target not in paths:
                paths[target] = paths[node] + [target]
                queue.append(target)
    raise AssertionError(f"{sorted(group)} is not a cycle")


# --- the cockpit's use of the engine -----------------------------------------------------------


def engine_imports_outside_its_api(modules: dict[str, Module]) -> list[str]:
    """Each import in cockpit/ of an engine module that is not a package or the engine's face,
    or of a name that package does not export."""
    packages = {name for name, m in modules.items() if m.is_package and name.startswith("engine.")}
    problems = []
    for module in sorted(modules.values(), key=lambda m: m.name):
        if not module.name.startswith("cockpit"):
            continue
        for node in nodes_in_order(module.tree):
            where = f"{module.path}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("engine"):
                        problems.append(f"{where}: import {alias.name} (import names from a package)")
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("engine"):
                source = node.module or ""
                names = [a.name for a in node.names]
                if source == "engine":
                    bad = [n for n in names if f"engine.{n}" not in (*ENGINE_FACE, *packages)]
                    if bad:
                        problems.append(f"{where}: from engine import {', '.join(bad)}")
                elif source in packages:
                    exported = public_names(modules[source])
                    bad = [n for n in names if n not in exported]
                    if bad:
                        problems.append(
                            f"{where}: from {source} import {', '.join(bad)}: not in its __all__"
                        )
                elif source in ENGINE_FACE:
                    exported = public_names(modules[source]) or {
                        n for n in top_level_names(modules[source].tree) if not n.startswith("_")
                    }
                    bad = [n for n in names if n not in exported]
                    if bad:
                        problems.append(f"{where}: from {source} import {', '.join(bad)}: private")
                else:
                    package = next((p for p in sorted(packages) if source.startswith(p + ".")), "")
                    problems.append(
                        f"{where}: from {source} import {', '.join(names)}"
                        f" (import from {package or 'a package'})"
                    )
    return problems


# --- private members ----------------------------------------------------------------------------


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def defined_here(tree: ast.Module) -> set[str]:
    """Every private name a module defines: functions, classes, assigned names, its own
    attributes (`self._x = ...`; setting `other._x` from outside defines nothing), arguments,
    imports under an alias, a class's `__slots__`."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            if owner_is_self(node.value):
                names.add(node.attr)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets
        ):
            names |= {c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant)}
    return {n for n in names if isinstance(n, str) and is_private(n)}


def owner_is_self(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return node.id in ("self", "cls")
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "super"
    )


def private_uses(modules: dict[str, Module]) -> list[str]:
    """Each use of another module's private member: `x._name` (x not self, cls or super()),
    `getattr(x, "_name")` and `from m import _name`, where `_name` is not defined in the module
    using it."""
    problems = []
    for module in sorted(modules.values(), key=lambda m: m.path):
        own = defined_here(module.tree)

        def allowed(attr: str, own: set[str] = own, path: str = module.path) -> bool:
            return attr in own or (path, attr) in PRIVATE_ALLOWED or ("*", attr) in PRIVATE_ALLOWED

        for node in nodes_in_order(module.tree):
            line = f"{module.path}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Attribute) and is_private(node.attr):
                if not owner_is_self(node.value) and not allowed(node.attr):
                    problems.append(f"{line}: {ast.unparse(node)}")
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
                and is_private(node.args[1].value)
                and not allowed(node.args[1].value)
            ):
                problems.append(f"{line}: {ast.unparse(node)}")
            elif isinstance(node, ast.ImportFrom) and resolve(module, node).split(".")[0] in ROOTS:
                for alias in node.names:
                    if is_private(alias.name):
                        problems.append(f"{line}: from {resolve(module, node)} import {alias.name}")
    return problems


# --- the tests ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def modules() -> dict[str, Module]:
    return parse(read_sources())


def test_no_import_cycles(modules: dict[str, Module]) -> None:
    groups = import_cycles(modules)
    assert not groups, "import cycles (module (file:line of its import) -> ...):\n" + "\n".join(
        describe_group(group, modules) for group in groups
    )


def test_the_cockpit_imports_only_what_the_engine_packages_export(
    modules: dict[str, Module],
) -> None:
    problems = engine_imports_outside_its_api(modules)
    assert not problems, "\n".join(problems)


def test_every_exported_name_is_defined_where_its_package_says(
    modules: dict[str, Module],
) -> None:
    missing = [
        f"{package.path}: {name} is not defined in {source}"
        for package in modules.values()
        if package.is_package
        for name, source in lazy_exports(package).items()
        if source not in modules or name not in top_level_names(modules[source].tree)
    ]
    assert not missing, "\n".join(missing)


def test_no_private_member_is_used_outside_its_module(modules: dict[str, Module]) -> None:
    problems = private_uses(modules)
    assert not problems, f"{len(problems)} uses of another module's private members:\n" + "\n".join(
        problems
    )


def test_every_allowed_private_member_is_still_used(modules: dict[str, Module]) -> None:
    # an allowance the code no longer needs would let that module start using it unseen
    by_path = {module.path: module for module in modules.values()}
    unused = [
        f"{path}: {name}"
        for path, name in PRIVATE_ALLOWED
        if not any(
            (isinstance(node, ast.Attribute) and node.attr == name)
            or (isinstance(node, ast.Constant) and node.value == name)
            for module in (by_path.values() if path == "*" else [by_path.get(path)])
            if module is not None
            for node in ast.walk(module.tree)
        )
    ]
    assert not unused, "allowed in PRIVATE_ALLOWED but no longer used:\n" + "\n".join(unused)


# the cockpit's packages, lowest first: a module imports nothing from a package above its own
# (the CLI launches the app, the app opens screens, screens hold widgets, widgets draw figures)
COCKPIT_LAYERS = ("cockpit.figures", "cockpit.widgets", "cockpit.screens", "cockpit.app", "cockpit.cli")


def layer_violations(modules: dict[str, Module]) -> list[str]:
    def layer(name: str) -> int | None:
        for i, package in enumerate(COCKPIT_LAYERS):
            if name == package or name.startswith(package + "."):
                return i
        return None

    problems = []
    for module in modules.values():
        own = layer(module.name)
        if own is None:
            continue
        for target, line in imports(module, modules):
            other = layer(target)
            if other is not None and other > own:
                problems.append(f"{module.path}:{line}: {COCKPIT_LAYERS[own]} imports {target}")
    return problems


def test_the_cockpit_layers_import_only_downwards(modules: dict[str, Module]) -> None:
    problems = layer_violations(modules)
    assert not problems, "\n".join(problems)


def test_an_upward_import_of_the_cockpit_is_found() -> None:
    sources = {
        "cockpit/app/__init__.py": '"""app"""',
        "cockpit/app/x.py": "from cockpit.cli.runs import table\n",
        "cockpit/cli/__init__.py": '"""cli"""',
        "cockpit/cli/runs.py": "table = 1\n",
    }
    assert layer_violations(parse(sources)) == [
        "cockpit/app/x.py:1: cockpit.app imports cockpit.cli.runs"
    ]


@pytest.mark.parametrize("root", ROOTS)
def test_the_top_level_stays_small(root: str) -> None:
    entries = sorted(p.name for p in (REPO / root).iterdir() if p.name != "__pycache__")
    assert len(entries) <= MAX_TOP_LEVEL_ENTRIES, f"{root}/ has {len(entries)}: {entries}"


def shared_basenames(paths: list[str]) -> dict[str, list[str]]:
    """Module file names (other than __init__.py) that more than one of `paths` has."""
    by_name: dict[str, list[str]] = {}
    for path in sorted(paths):
        name = path.rsplit("/", 1)[-1]
        if name != "__init__.py":
            by_name.setdefault(name, []).append(path)
    return {name: where for name, where in by_name.items() if len(where) > 1}


@pytest.mark.parametrize("root", ROOTS)
def test_every_module_basename_is_unique_in_its_package_tree(root: str) -> None:
    # a name met in a traceback, an import or a search leads to one module, not to three
    paths = [p.relative_to(REPO).as_posix() for p in (REPO / root).rglob("*.py")]
    assert not shared_basenames(paths), f"rename one of each: {shared_basenames(paths)}"


def test_a_shared_basename_is_found() -> None:
    paths = ["engine/__init__.py", "engine/a/__init__.py", "engine/a/live.py", "engine/b/live.py"]
    assert shared_basenames(paths) == {"live.py": ["engine/a/live.py", "engine/b/live.py"]}


def test_every_package_has_an_init_with_a_docstring() -> None:
    problems = []
    for root in ROOTS:
        for folder in sorted([REPO / root, *(REPO / root).rglob("*")]):
            if not folder.is_dir() or folder.name == "__pycache__":
                continue
            if not any(folder.glob("*.py")):
                continue  # data only (stylesheets, snapshots)
            init = folder / "__init__.py"
            where = init.relative_to(REPO)
            if not init.is_file():
                problems.append(f"{where}: missing")
            elif not ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))):
                problems.append(f"{where}: no docstring (what the package is for)")
    assert not problems, "\n".join(problems)


# --- each check fails where it should -----------------------------------------------------------


def test_a_cycle_through_a_package_init_is_found() -> None:
    # b.y needs a.w; importing a.w runs a's __init__, which imports a.x, which needs b.y
    modules = parse(
        {
            "pkg/__init__.py": "",
            "pkg/a/__init__.py": "from pkg.a.x import f\n",
            "pkg/a/x.py": "def f(): from pkg.b.y import g\n",
            "pkg/a/w.py": "",
            "pkg/b/__init__.py": "",
            "pkg/b/y.py": "from pkg.a.w import *\n",
        }
    )
    (group,) = import_cycles(modules)
    assert group == ["pkg.a", "pkg.a.x", "pkg.b.y"]
    assert describe_group(group, modules).endswith(
        "pkg.a (pkg/a/__init__.py:1) -> pkg.a.x (pkg/a/x.py:1) -> pkg.b.y (pkg/b/y.py:1) -> pkg.a"
    )


def test_a_package_importing_its_own_modules_is_no_cycle() -> None:
    modules = parse(
        {
            "pkg/__init__.py": "from pkg.x import f\nfrom pkg import y\n",
            "pkg/x.py": "from pkg.y import g\n",
            "pkg/y.py": "import pkg.z\n",
            "pkg/z.py": "",
        }
    )
    assert import_cycles(modules) == []
    assert set(import_graph(modules)["pkg"]) == {"pkg.x", "pkg.y"}


def test_a_name_a_package_exports_on_first_use_leads_to_its_module() -> None:
    modules = parse(
        {
            "pkg/__init__.py": "",
            "pkg/a/__init__.py": "_EXPORTS = {'pkg.a.x': ('f',)}\n",
            "pkg/a/x.py": "from pkg.b import g\ndef f(): pass\n",
            "pkg/b.py": "def g(): from pkg.a import f\n",
        }
    )
    assert import_cycles(modules) == [["pkg.a.x", "pkg.b"]]


def test_the_cockpit_reaching_into_an_engine_package_is_found() -> None:
    modules = parse(
        {
            "engine/__init__.py": '"""."""',
            "engine/events.py": "class Step: pass\n_hidden = 1\n",
            "engine/rundir/__init__.py": "_EXPORTS = {'engine.rundir.history': ('read_curves',)}\n",
            "engine/rundir/history.py": "def read_curves(): pass\ndef _helper(): pass\n",
            "cockpit/__init__.py": "",
            "cockpit/ok.py": "from engine.rundir import read_curves\nfrom engine.events import Step\n",
            "cockpit/bad.py": (
                "from engine.rundir.history import read_curves\n"
                "def f():\n    from engine.rundir import _helper\n"
                "import engine.rundir.history\n"
                "from engine.events import _hidden\n"
            ),
        }
    )
    assert engine_imports_outside_its_api(modules) == [
        "cockpit/bad.py:1: from engine.rundir.history import read_curves (import from engine.rundir)",
        "cockpit/bad.py:3: from engine.rundir import _helper: not in its __all__",
        "cockpit/bad.py:4: import engine.rundir.history (import names from a package)",
        "cockpit/bad.py:5: from engine.events import _hidden: private",
    ]


def test_a_private_member_of_another_module_is_found() -> None:
    modules = parse(
        {
            "engine/run.py": (
                "class Run:\n    def __init__(self):\n        self._stop = False\n"
                "    def same(self, other):\n        return other._stop\n"
            ),
            "engine/part.py": (
                "from engine.run import _helper\n"
                "def stop(run):\n    run._stop = True\n    return run._pending\n"
                "def look(run):\n    return getattr(run, '_failure', None), run.__dict__, os._exit\n"
            ),
        }
    )
    assert private_uses(modules) == [
        "engine/part.py:1: from engine.run import _helper",
        "engine/part.py:3: run._stop",
        "engine/part.py:4: run._pending",
        "engine/part.py:6: getattr(run, '_failure', None)",
    ]
