"""The keyword names a config ``_target_`` takes, read from its source file without importing it.

Telling a misspelt key (``trainer.max_step=1``: an error) from a Trainer argument the config does not set yet
(``trainer.max_steps=1``: accepted without ``+``) needs the target's signature. Importing the Trainer for it costs
~7 s on 2 cores (Lightning, torch), which is most of the time a one-line error would take. Python's own import
machinery finds the file (``PathFinder``, no package ``__init__`` runs) and ``ast`` reads the definition,
following ``from x import y`` re-exports and, for a class whose ``__init__`` passes ``**kwargs`` on, its base.

Anything this reading cannot follow (a decorated class such as a dataclass, several bases, a name bound by an
assignment, a compiled module) gives None, and the caller imports the target instead. A unit test holds the
result equal to ``config.accepted_arguments`` of the imported object for every ``_target_`` in ``conf/``.
"""

from __future__ import annotations

import ast
import importlib.machinery
import sys
from functools import cache
from pathlib import Path

MAX_HOPS = 12  # re-exports and bases followed before giving up (Trainer: 2 re-exports)


def static_arguments(target: str) -> set[str] | None:
    """Keyword names ``target`` ("package.module.Name") takes, as `config.accepted_arguments` would read them
    from the imported object; None when the source cannot be read that far."""
    module, _, name = target.rpartition(".")
    found = _definition(module, name, MAX_HOPS)
    if found is None:
        return None
    module, node = found
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return _names(node.args)
    return _class_arguments(module, node, MAX_HOPS)


def _class_arguments(module: str, node: ast.ClassDef, hops: int) -> set[str] | None:
    """Along single inheritance: each ``__init__``'s names, continuing to the base while it takes ``**kwargs``."""
    names: set[str] = set()
    while hops > 0:
        if node.decorator_list or node.keywords:  # dataclass, metaclass: the __init__ is not the one written
            return None
        init = next((s for s in node.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None)
        if init is not None:
            names |= _names(init.args)
            if init.args.kwarg is None:
                return names
        bases = [b for b in node.bases if not (isinstance(b, ast.Name) and b.id == "object")]
        if not bases:  # object.__init__ takes nothing by keyword
            return names
        if len(bases) > 1:
            return None
        found = _base(module, bases[0], hops - 1)
        if found is None or not isinstance(found[1], ast.ClassDef):
            return None
        (module, node), hops = found, hops - 1
    return None


def _names(args: ast.arguments) -> set[str]:
    """Parameter names that can be passed by keyword (no *args, **kwargs, or ``self``)."""
    return {a.arg for a in [*args.args, *args.kwonlyargs]} - {"self"}


def _base(module: str, expr: ast.expr, hops: int):
    """The definition a base-class expression names: ``Name`` or ``alias.Name`` (``L.Callback``)."""
    if isinstance(expr, ast.Name):
        return _definition(module, expr.id, hops)
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
        imported = _imported_modules(module).get(expr.value.id)
        return _definition(imported, expr.attr, hops) if imported else None
    return None


def _definition(module: str, name: str, hops: int):
    """(module, ClassDef or FunctionDef) that ``module.name`` is, following ``from x import name``; or None."""
    if hops <= 0:
        return None
    tree = _tree(module)
    if tree is None:
        return None
    found = None
    for statement in tree.body:  # the last binding at module level wins, as at import
        if isinstance(statement, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and statement.name == name:
            found = ("def", statement)
        elif isinstance(statement, ast.ImportFrom):
            for alias in statement.names:
                if (alias.asname or alias.name) == name:
                    found = ("import", (_absolute(module, statement), alias.name))
        elif isinstance(statement, (ast.Assign, ast.AnnAssign)) and name in _assigned(statement):
            found = None  # bound by an assignment: not readable here
    if found is None:
        return None
    kind, value = found
    if kind == "def":
        return module, value
    source, original = value
    return _definition(source, original, hops - 1) if source else None


def _assigned(statement) -> set[str]:
    targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
    return {t.id for t in targets if isinstance(t, ast.Name)}


def _imported_modules(module: str) -> dict[str, str]:
    """``import a.b as x`` -> {"x": "a.b"}; ``from a import b as x`` -> {"x": "a.b"} (b may be a module)."""
    tree = _tree(module)
    aliases: dict[str, str] = {}
    for statement in tree.body if tree else []:
        if isinstance(statement, ast.Import):
            for alias in statement.names:
                aliases[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else alias.name.split(".")[0]
        elif isinstance(statement, ast.ImportFrom):
            source = _absolute(module, statement)
            for alias in statement.names:
                if source:
                    aliases[alias.asname or alias.name] = f"{source}.{alias.name}"
    return aliases


def _absolute(module: str, statement: ast.ImportFrom) -> str | None:
    """The absolute module name of a (possibly relative) ``from ... import``."""
    if not statement.level:
        return statement.module
    package = module if _is_package(module) else module.rpartition(".")[0]
    for _ in range(statement.level - 1):
        package = package.rpartition(".")[0]
    if not package:
        return None
    return f"{package}.{statement.module}" if statement.module else package


def _is_package(module: str) -> bool:
    path = _source(module)
    return path is not None and path.name == "__init__.py"


@cache
def _tree(module: str) -> ast.Module | None:
    path = _source(module)
    if path is None:
        return None
    try:
        return ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None


@cache
def _source(module: str) -> Path | None:
    """The ``.py`` file of ``module``, found level by level without running any package ``__init__``."""
    search = None
    spec = None
    parts = module.split(".")
    for depth in range(1, len(parts) + 1):
        name = ".".join(parts[:depth])
        loaded = sys.modules.get(name)
        spec = getattr(loaded, "__spec__", None) if loaded is not None else None
        if spec is None:
            try:
                spec = importlib.machinery.PathFinder.find_spec(name, search)
            except (ImportError, ValueError):
                return None
        if spec is None:
            return None
        search = spec.submodule_search_locations
    origin = getattr(spec, "origin", None)
    return Path(origin) if origin and origin.endswith(".py") else None
