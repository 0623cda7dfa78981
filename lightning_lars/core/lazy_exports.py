"""A package's public names loaded on first use (PEP 562): the package can be imported before torch and
Lightning are, and a name pulls in its module only when a user reaches for it."""

import importlib
from collections.abc import Callable


def lazy_exports(package: str, exports: dict[str, str], names: dict) -> tuple[Callable, Callable]:
    """``__getattr__`` and ``__dir__`` for ``package``: ``exports`` maps each public name to the submodule that
    defines it; ``names`` is the package's ``globals()``, listed beside the exports."""

    def __getattr__(name: str):
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{exports[name]}"), name)

    def __dir__() -> list[str]:
        return sorted([*names, *exports])

    return __getattr__, __dir__
