"""Imports flow one way: utilities -> model -> stack -> plan -> compose -> fn/CLI, with no cycle.

Every module under ``function/`` (the generated stacks aside: data, imported
by name at run time) is read with ``ast``: imports at the top, inside
functions and under ``TYPE_CHECKING`` all count, since each one ties the
importing module to the imported one. A module may import from its own layer
or a lower one, never from a higher one, and no set of modules may import
each other in a circle. The generator must be free of cycles too.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.support.repo import REPO

# Lowest first. Each module's one job is in the layer map of docs/design.md.
LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    (
        "utilities",
        frozenset(
            {
                "function",
                "function.__version__",
                "function.cache",
                "function.errors",
                "function.goyaml",
                "function.paths",
                "function.requestlog",
                "function.strictmodel",
                "function.tree",
                "function.values",
                "function.encode",
            }
        ),
    ),
    ("model", frozenset({"function.model", "function.inputs", "function.xr", "function.legacy", "function.tenancy"})),
    ("stack", frozenset({"function.stack", "function.bodies", "function.helm", "function.generated"})),
    (
        "plan",
        frozenset(
            {
                "function.overrides",
                "function.overrides.added",
                "function.overrides.apply",
                "function.overrides.build",
                "function.overrides.collect",
                "function.overrides.document",
                "function.overrides.drivers",
                "function.overrides.explain",
                "function.overrides.images",
                "function.overrides.memory",
                "function.overrides.planned",
                "function.overrides.pulls",
                "function.overrides.registry",
                "function.overrides.schema",
                "function.overrides.strict",
            }
        ),
    ),
    ("compose", frozenset({"function.compose", "function.status", "function.events", "function.transforms"})),
    (
        "fn/CLI",
        frozenset(
            {
                "function.fn",
                "function.server",
                "function.main",
                "function.manifests",
                "function.files",
                "function.validate",
                "function.library",
                "function.offline",
                "function.render_output",
            }
        ),
    ),
)


def _layer_of(module: str) -> int:
    for index, (_name, members) in enumerate(LAYERS):
        if module in members or (module.startswith("function.generated.") and "function.generated" in members):
            return index
    raise AssertionError(f"{module} is in no layer: add it to LAYERS in tests/test_layers.py (and docs/design.md)")


def _modules(package: str) -> dict[str, Path]:
    """Every module of ``package`` by dotted name (a package by its own name), generated stacks aside."""
    root = REPO / package
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        if parts[:2] == ("function", "generated"):
            continue
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imports(module: str, path: Path, known: dict[str, Path]) -> Iterator[tuple[str, tuple[str, ...], int]]:
    """(imported module, names taken from it, line) for every import in the file that names a module of ``known``."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, (), node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                # `from pkg import mod` imports the module; `from mod import name` takes a name from it.
                if sub in known or sub.startswith("function.generated"):
                    yield sub, (), node.lineno
                else:
                    yield source, (alias.name,), node.lineno


def _graph(package: str) -> tuple[dict[str, Path], dict[str, dict[str, list[tuple[tuple[str, ...], int]]]]]:
    known = _modules(package)
    edges: dict[str, dict[str, list[tuple[tuple[str, ...], int]]]] = {m: {} for m in known}
    for module, path in known.items():
        for target, names, line in _imports(module, path, known):
            if target.split(".")[0] == package and target != module:
                edges[module].setdefault(target, []).append((names, line))
    return known, edges


def _cycles(edges: dict[str, dict[str, list[tuple[tuple[str, ...], int]]]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in edges.get(node, {}):
            if succ not in edges:
                continue
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return out


def test_every_function_module_has_a_layer_and_every_listed_module_exists() -> None:
    known, _ = _graph("function")
    unplaced = sorted(m for m in known if not any(m in members for _n, members in LAYERS))
    assert not unplaced, f"modules in no layer (add them to LAYERS): {unplaced}"
    listed = {m for _n, members in LAYERS for m in members} - {"function.generated"}
    assert listed <= set(known), f"listed but gone (take them out of LAYERS): {sorted(listed - set(known))}"


def test_no_upward_import() -> None:
    known, edges = _graph("function")
    upward = []
    for module, targets in edges.items():
        for target, uses in targets.items():
            if _layer_of(target) > _layer_of(module):
                lines = ", ".join(str(line) for line in sorted({line for _names, line in uses}))
                upward.append(
                    f"{known[module].relative_to(REPO)}:{lines}: {module} ({LAYERS[_layer_of(module)][0]}) "
                    f"imports {target} ({LAYERS[_layer_of(target)][0]})"
                )
    assert not upward, "upward imports:\n" + "\n".join(upward)


def test_no_import_cycle_in_function() -> None:
    _, edges = _graph("function")
    assert not _cycles(edges), f"import cycles: {_cycles(edges)}"


def test_no_import_cycle_in_generator() -> None:
    _, edges = _graph("generator")
    assert not _cycles(edges), f"import cycles: {_cycles(edges)}"


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def test_no_private_name_taken_from_another_module() -> None:
    """A leading underscore is a module's own business; the gRPC runner gives out its runner and ``run`` only."""
    known, edges = _graph("function")
    taken = [
        f"{known[module].relative_to(REPO)}:{line}: {name} from {target}"
        for module, targets in edges.items()
        for target, uses in targets.items()
        for names, line in uses
        for name in names
        if (name.startswith("_") and not name.startswith("__"))
        or (target == "function.fn" and name not in ("FunctionRunner", "run"))
    ]
    assert not taken, "private names taken across modules:\n" + "\n".join(taken)


def test_the_checks_see_what_they_must(tmp_path: Path) -> None:
    """The reader finds imports inside functions and under TYPE_CHECKING, and resolves relative ones."""
    known, edges = _graph("function")
    assert "function.overrides.apply" in known and "function.generated" not in known
    assert "function.stack" in edges["function.compose"]
    assert "function.overrides.collect" in edges["function.overrides"]  # `from .collect import ...` in __init__
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from typing import TYPE_CHECKING\n"
        "def f() -> None:\n    from function.fn import FunctionRunner\n"
        "if TYPE_CHECKING:\n    import function.main\n"
        "from . import stack\n"
    )
    found = {(target, names) for target, names, _line in _imports("function.probe", probe, known)}
    assert found >= {("function.fn", ("FunctionRunner",)), ("function.main", ()), ("function.stack", ())}
    # A cycle of two is found, and one through three; a chain is none.
    assert _cycles({"a": {"b": []}, "b": {"a": []}}) == [["a", "b"]]
    assert _cycles({"a": {"b": []}, "b": {"c": []}, "c": {"a": []}, "d": {"a": []}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b": []}, "b": {}}) == []
