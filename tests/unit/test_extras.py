"""The optional FFCV dependency: a missing package and a package that is present but fails to import each stop
with one line that names the install command, taken from the project's own metadata (pyproject's ``ffcv``
extra, the Makefile's Debian packages); the real environment's answer matches a fresh interpreter's."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from lightning_lars.core.errors import UserError
from lightning_lars.core.extras import ffcv_available, ffcv_import_error, needs_ffcv, require_ffcv

REPO = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
INSTALL = f"pip install '{PROJECT['name']}[ffcv]'"
APT_PACKAGES = re.search(r"^APT_PACKAGES := (.+)$", (REPO / "Makefile").read_text(), re.MULTILINE).group(1)


def fake_ffcv(monkeypatch, tmp_path: Path, init_source: str) -> None:
    """A real package named ``ffcv`` first on ``sys.path``, whose ``__init__`` runs ``init_source``; the real
    one (if this process imported it) is taken out of ``sys.modules`` for the test and put back after."""
    (tmp_path / "ffcv").mkdir()
    (tmp_path / "ffcv" / "__init__.py").write_text(init_source)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(sys.modules, "ffcv", sys.modules.get("ffcv"))  # so that undo also removes the fake
    monkeypatch.delitem(sys.modules, "ffcv")


def user_error(what: str, alternative: str = "") -> str:
    with pytest.raises(UserError) as caught:
        require_ffcv(what, alternative)
    message = str(caught.value)
    assert "\n" not in message  # the entry points print it as one line
    return message


def test_the_install_command_is_the_projects_ffcv_extra_and_the_makefiles_debian_packages():
    assert "ffcv" in PROJECT["optional-dependencies"]
    assert any(dep.startswith("ffcv") for dep in PROJECT["optional-dependencies"]["ffcv"])
    # Python's own import machinery: a None entry in sys.modules makes `import ffcv` fail as not found
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setitem(sys.modules, "ffcv", None)
        message = user_error("the FFCV DataModule")
    assert INSTALL in message
    assert f"sudo apt-get install {APT_PACKAGES}" in message


def test_a_missing_package_says_not_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "ffcv", None)
    assert isinstance(ffcv_import_error(), ModuleNotFoundError)
    assert not ffcv_available()
    message = user_error("the FFCV DataModule", "use data=imagefolder")
    assert message.startswith("the FFCV DataModule needs FFCV, which is not installed: ")
    assert INSTALL in message
    assert message.endswith("; or use data=imagefolder")
    assert "does not import" not in message


def test_a_package_whose_shared_library_is_missing_is_installed_but_broken(monkeypatch, tmp_path):
    reason = "libturbojpeg.so.0: cannot open shared object file: No such file or directory"
    fake_ffcv(monkeypatch, tmp_path, f"raise ImportError({reason!r} + '\\nsecond line of detail')\n")
    error = ffcv_import_error()
    assert type(error) is ImportError and str(error).startswith(reason)
    assert not ffcv_available()
    message = user_error("converting /data to FFCV files")
    assert f"which is installed but does not import ({reason}): reinstall it with {INSTALL}" in message
    assert "second line of detail" not in message
    assert "not installed" not in message


def test_a_package_whose_own_dependency_is_missing_is_broken_not_missing(monkeypatch, tmp_path):
    """ModuleNotFoundError for another name (numba, cv2 ...) raised inside ffcv: ffcv itself is there."""
    absent = "no_such_module_under_ffcv"
    fake_ffcv(monkeypatch, tmp_path, f"import {absent}\n")
    error = ffcv_import_error()
    assert isinstance(error, ModuleNotFoundError) and error.name == absent
    message = user_error("the FFCV DataModule")
    assert f"installed but does not import (No module named '{absent}')" in message


def test_a_package_that_imports_passes(monkeypatch, tmp_path):
    fake_ffcv(monkeypatch, tmp_path, "VERSION = 'stand-in'\n")
    assert ffcv_import_error() is None
    assert ffcv_available()
    require_ffcv("the FFCV DataModule")  # returns without raising
    assert sys.modules["ffcv"].VERSION == "stand-in"  # the package on the path is the one imported


DATA_TARGETS = sorted(
    {yaml.safe_load(path.read_text())["_target_"] for path in (REPO / "conf" / "data").glob("*.yaml")}
)
PROBE = """
import importlib, json, sys, traceback
seen = {}
for module in sys.argv[1:]:
    try:
        importlib.import_module(module)
        seen[module] = "ffcv" in sys.modules
    except ImportError as error:  # FFCV missing or broken here: did the failure come from importing it?
        frames = traceback.extract_tb(error.__traceback__)
        seen[module] = error.name == "ffcv" or any("/ffcv/" in frame.filename for frame in frames)
try:
    import ffcv
    seen["import ffcv"] = True
except ImportError:
    seen["import ffcv"] = False
print(json.dumps(seen))
"""


@pytest.fixture(scope="module")
def fresh_interpreter() -> dict[str, bool]:
    """One fresh interpreter (seconds: torch, numba) imports the ``_target_`` module of every ``conf/data``
    config, those that need no FFCV by our account first, and says after each whether ``ffcv`` is in
    ``sys.modules``; last, whether ``import ffcv`` works. Exact while only one module needs FFCV
    (asserted)."""
    modules = sorted({t.rsplit(".", 1)[0] for t in DATA_TARGETS}, key=lambda m: needs_ffcv(m + "."))
    assert sum(needs_ffcv(m + ".") for m in modules) == 1
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *modules], capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_the_environments_answer_is_a_fresh_interpreters(fresh_interpreter):
    assert ffcv_available() == fresh_interpreter["import ffcv"]


@pytest.mark.parametrize("target", DATA_TARGETS)
def test_a_data_config_needs_ffcv_when_its_class_imports_ffcv(target, fresh_interpreter):
    assert needs_ffcv(target) == fresh_interpreter[target.rsplit(".", 1)[0]]


@pytest.mark.parametrize("target", [None, 3, {"_target_": "x"}, ""])
def test_a_target_that_is_not_a_string_needs_nothing(target):
    assert needs_ffcv(target) is False
