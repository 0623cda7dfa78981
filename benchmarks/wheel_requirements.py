"""What a wheel folder must hold: the project's requirements (its dependencies, the FFCV extra and the test
tools) less the groups a target already has (``GROUPS``: a GPU image's torch stack, or FFCV), and everything those
groups need as installed here. Read by benchmarks/wheelhouse.py and benchmarks/gpu_kit.py beside it.
"""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import PackageNotFoundError, distribution, requires

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from lightning_lars.config.paths import PROJECT_ROOT, is_checkout
from lightning_lars.core.errors import UserError

GROUPS = {
    # what a GPU machine's image already has (torch 2.11, lightning 2.6, timm, torchmetrics, torchvision)
    "torch": ("torch", "torchvision", "lightning", "timm", "torchmetrics"),
    "ffcv": ("ffcv", "numba", "opencv-python"),
}
TEST_TOOLS = ("pytest>=8",)  # so `make test-gpu` runs on the node; ruff (a 10+ MB binary) is not needed there


def project_requirements(without: set[str]) -> list[str]:
    """The project's dependencies plus its FFCV extra and the test tools, less the groups in ``without``."""
    if is_checkout():
        project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]
        requirements = [*project["dependencies"], *project["optional-dependencies"]["ffcv"]]
    else:
        try:
            declared = requires("lightning-lars") or []
        except PackageNotFoundError:
            raise UserError("run this from a clone of lightning-lars or with the package installed") from None
        requirements = [
            r.split(";")[0] for r in declared if "extra ==" not in r or "'ffcv'" in r or '"ffcv"' in r
        ]
    left_out = {name for group in without for name in GROUPS[group]}
    kept = [r for r in requirements if re.split(r"[<>=!~\[ ]", r, maxsplit=1)[0].lower() not in left_out]
    return kept + list(TEST_TOOLS)


def installed_closure(names: tuple[str, ...]) -> set[str]:
    """``names`` and everything they need, as installed in this environment (the locked set under make)."""

    seen: set[tuple[str, str]] = set()  # (name, extra): torch needs cuda-toolkit[cublas,cudart,...]
    todo = [(canonicalize_name(n), "") for n in names]
    while todo:
        name, extra = todo.pop()
        if (name, extra) in seen:
            continue
        seen.add((name, extra))
        try:
            requires = distribution(name).requires or []
        except PackageNotFoundError:
            continue
        for line in requires:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": extra}):
                name_needed = canonicalize_name(requirement.name)
                todo += [(name_needed, "")] + [(name_needed, e) for e in requirement.extras]
    return {name for name, _extra in seen}


def left_out_by(without: set[str], requirements: list[str]) -> set[str]:
    """Names the target already has: each group left out with all it needs (a GPU image with torch has the
    nvidia-* wheels, triton, sympy, ...), except the project's own direct requirements (numpy, pyyaml, ...),
    kept so that an older copy on the node can be upgraded offline."""

    direct = {canonicalize_name(Requirement(r).name) for r in requirements}
    closure = installed_closure(tuple(name for group in without for name in GROUPS[group]))
    return closure - direct | {canonicalize_name(n) for group in without for n in GROUPS[group]}
