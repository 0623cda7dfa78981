"""A user's own recipe file needs no ``# @package _global_`` line.

Our recipes sit in Hydra's ConfigStore with package ``_global_`` (`lightning_lars.config.compose`). A user's
recipe is a file in the ``recipe/`` folder of their ``hydra.searchpath``, and Hydra puts a file's keys under its
group (``recipe.optimizer...``) unless the file's first line says otherwise: a header that a delta over our
recipes must always carry. Hydra reads files through the config source registered for the path's scheme
(``file://``, ``pkg://``); these subclasses give a ``recipe/`` file without a package line the package
``_global_``, and leave every other file, and any package a file names itself, as Hydra reads them.
"""

from __future__ import annotations

import yaml
from hydra._internal.core_plugins.file_config_source import FileConfigSource
from hydra._internal.core_plugins.importlib_resources_config_source import (
    ImportlibResourcesConfigSource,
)
from hydra._internal.sources_registry import SourcesRegistry
from hydra.core.plugins import Plugins
from hydra.plugins.config_source import ConfigResult

GROUP = "recipe/"


def _global_when_unset(config_path: str, result: ConfigResult) -> ConfigResult:
    if config_path.lstrip("/").startswith(GROUP) and result.header.get("package") is None:
        result.header["package"] = "_global_"
    return result


class RecipeFileSource(FileConfigSource):
    def load_config(self, config_path: str) -> ConfigResult:
        return _global_when_unset(config_path, super().load_config(config_path))


class RecipePackageSource(ImportlibResourcesConfigSource):
    def load_config(self, config_path: str) -> ConfigResult:
        return _global_when_unset(config_path, super().load_config(config_path))


# Hydra's registry refuses a second class for a scheme unless the two share __name__ ("file is already registered
# with a different class"), and a submitit job re-scans Hydra's plugins over the registry restored from the
# submitting process: with the same __name__ Hydra keeps ours. __qualname__ stays ours, so pickling still finds them.
RecipeFileSource.__name__ = FileConfigSource.__name__
RecipePackageSource.__name__ = ImportlibResourcesConfigSource.__name__


def install() -> None:
    """Make Hydra read ``file://`` and ``pkg://`` folders through the sources above, in this process."""
    Plugins.instance()  # Hydra registers its own sources when its plugins are first scanned: ours replace them
    registry = SourcesRegistry.instance()
    for source in (RecipeFileSource, RecipePackageSource):
        registry.types[source.scheme()] = source


def yaml_error_line(err: yaml.MarkedYAMLError) -> str:
    """``<file>:<line>:<column>: <yaml's message>`` (1-based, as editors count), with where the construct
    yaml was reading began when yaml names it."""
    mark = err.problem_mark or err.context_mark
    where = f"{mark.name}:{mark.line + 1}:{mark.column + 1}: " if mark is not None else ""
    context = ""
    if err.context and err.problem:
        started = err.context_mark
        at = f" at line {started.line + 1}, column {started.column + 1}" if started is not None else ""
        context = f" ({err.context}{at})"
    return f"{where}{err.problem or err.context}{context}"
