"""The package's layers, read from the code: no import circle, no import from a lower layer to a higher one,
and every import written inside a function says why it is there; no comment left behind a bracket that the
formatter split open for it.

The order is written once, here (the README's architecture section draws it). A module may import its own
layer and the layers below it; ``callbacks`` is the top-level callbacks/ folder, installed as
``lightning_lars.callbacks``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAYERS = [
    "core",
    "config",
    "schedules",
    "optim",
    "models",
    "data",
    "parallel",
    "recipe",
    "runtime",
    "report",
    "callbacks",
    "training",
    "entry",
]
ENTRY_POINTS = {
    "train",
    "command_line",
    "check",
    "recipe_card",
}  # lightning_lars/<name>.py: the commands (and train's command-line checks), above every layer


def module_files() -> dict[str, Path]:
    """Dotted module name -> file, for the package and the callbacks folder."""
    found = {}
    for base, prefix in (
        (ROOT / "lightning_lars", "lightning_lars"),
        (ROOT / "callbacks", "lightning_lars.callbacks"),
    ):
        for path in base.rglob("*.py"):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([prefix, *parts])] = path
    return found


MODULES = module_files()


def layer_of(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1:
        return -1  # lightning_lars/__init__.py: a docstring and the version
    name = parts[1]
    if name in ENTRY_POINTS and len(parts) == 2:
        return LAYERS.index("entry")
    assert name in LAYERS, f"{module}: a package of no declared layer; add it to LAYERS in {__file__}"
    return LAYERS.index(name)


def imports(module: str) -> list[tuple[str, int, bool]]:
    """(imported module of ours, line, written inside a function) for every import in ``module``'s file."""
    path = MODULES[module]
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    inside = {
        id(n)
        for f in ast.walk(tree)
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
        for n in ast.walk(f)
        if n is not f
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    [*package.split(".")[: len(package.split(".")) - node.level + 1], *filter(None, [base])]
                )
            names = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names
            ]
        else:
            continue
        for name in names:
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name and name != module and not module.startswith(f"{name}."):
                found.append((name, node.lineno, id(node) in inside))
    return found


GRAPH = {module: imports(module) for module in MODULES}


def test_every_module_belongs_to_a_layer():
    for module in MODULES:
        layer_of(module)


def test_no_import_runs_from_a_lower_layer_to_a_higher_one():
    upward = [
        f"{MODULES[m].relative_to(ROOT)}:{line} ({LAYERS[layer_of(m)]}) imports {target}"
        f" ({LAYERS[layer_of(target)]})"
        for m, targets in GRAPH.items()
        for target, line, _ in targets
        if layer_of(target) > layer_of(m) >= 0
    ]
    assert not upward, "\n".join(upward)


def test_no_import_circle():
    edges = {m: sorted({t for t, _, _ in targets}) for m, targets in GRAPH.items()}
    state: dict[str, int] = {}
    circles = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in edges[node]:
            if state.get(nxt) == 1:
                circles.append(" -> ".join([*path[path.index(nxt) :], nxt]))
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])
    assert not circles, "\n".join(circles)


def said_why(lines: list[str], node: ast.stmt) -> bool:
    """A comment on the import's lines, or on the import block it belongs to, or on the line above that block."""
    if any("#" in line for line in lines[node.lineno - 1 : node.end_lineno]):
        return True
    index = node.lineno - 2
    while index >= 0:
        text = lines[index].strip()
        if text.startswith("#") or (text.startswith(("import ", "from ")) and "#" in text):
            return True
        if text and not text.startswith(("import ", "from ", ")")) and not text.endswith((",", "(")):
            return False
        index -= 1
    return False


def test_every_import_inside_a_function_says_why():
    """Imports inside functions only keep start-up fast (a heavy or optional library); each says so on its line
    or the line above."""
    silent = []
    for path in MODULES.values():
        lines = path.read_text().splitlines()
        tree = ast.parse("\n".join(lines))
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if isinstance(node, (ast.Import, ast.ImportFrom)) and not said_why(lines, node):
                    silent.append(f"{path.relative_to(ROOT)}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    assert not silent, "in-function imports without a reason:\n" + "\n".join(sorted(set(silent)))


# ruff format's mark on a comment that made a statement too long: the statement split open around one line and
# the comment pushed behind the closing bracket, where it reads as a remark on the bracket
WRAPPED_COMMENT = re.compile(r"[(\[]\n[^\n]*[^,\n]\n[ \t]*[)\]]+[:,]?[ \t]+#(?! fmt: skip| noqa)")


@pytest.mark.parametrize("folder", ["lightning_lars", "callbacks", "benchmarks", "tests"])
def test_no_comment_is_left_behind_a_bracket_the_formatter_split_open(folder):
    wrapped = [
        f"{path.relative_to(ROOT)}:{path.read_text()[: found.start()].count(chr(10)) + 1}"
        for path in sorted((ROOT / folder).rglob("*.py"))
        for found in WRAPPED_COMMENT.finditer(path.read_text())
    ]
    assert not wrapped, "put these comments on a line of their own above the statement:\n" + "\n".join(
        wrapped
    )


@pytest.mark.parametrize("folder", ["lightning_lars", "callbacks", "conf", "recipes", "tests"])
def test_no_symlinks(folder):
    links = [str(p.relative_to(ROOT)) for p in (ROOT / folder).rglob("*") if p.is_symlink()]
    assert not links, links


def test_every_package_says_what_it_holds_and_may_import():
    for module, path in MODULES.items():
        if path.name == "__init__.py" and module != "lightning_lars":
            doc = ast.get_docstring(ast.parse(path.read_text())) or ""
            assert doc, f"{path.relative_to(ROOT)} has no docstring"


def declared_imports(package: str) -> tuple[set[str], bool]:
    """The layers a package's docstring says it imports (its sentence starting "Imports"), and whether that
    sentence lists them one by one (else it names a range: every layer below it, or up to one)."""
    doc = ast.get_docstring(ast.parse(MODULES[package].read_text())) or ""
    sentence = " ".join(doc.split()).partition("Imports ")[2].partition(".")[0]
    assert sentence, f"{package}: its docstring says nothing of what it imports (a sentence 'Imports ...')"
    layer = layer_of(package)
    if sentence.startswith("nothing of ours"):
        return set(), True
    if sentence.startswith("every layer below"):
        return set(LAYERS[:layer]), False
    if sentence.startswith("every layer up to"):
        last = re.findall(r"``(\w+)``", sentence)[0]
        return set(LAYERS[: LAYERS.index(last) + 1]), False
    return set(re.findall(r"``(\w+)``", sentence.partition(";")[0])), True


def test_each_packages_docstring_names_the_layers_it_imports():
    """The "Imports ..." line of each package's __init__ docstring is true: the package imports no layer it
    does not name, and names none it does not import."""
    wrong = []
    for package in (m for m in MODULES if MODULES[m].name == "__init__.py" and m.count(".") == 1):
        declared, exact = declared_imports(package)
        own = [m for m in MODULES if m == package or m.startswith(f"{package}.")]
        actual = {
            LAYERS[layer_of(target)]
            for m in own
            for target, _, _ in GRAPH[m]
            if layer_of(target) >= 0 and LAYERS[layer_of(target)] != LAYERS[layer_of(package)]
        }
        if not actual <= declared or (exact and actual != declared):
            wrong.append(f"{package}: says {sorted(declared)}, imports {sorted(actual)}")
    assert not wrong, "\n".join(wrong)
