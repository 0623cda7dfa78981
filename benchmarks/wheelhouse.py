"""Every wheel the project needs, for a target Python and platform, in one folder: installs on offline nodes.

    python benchmarks/wheelhouse.py --out wheelhouse [--python 3.12] [--platform manylinux_2_28_x86_64]
                                        [--without torch,ffcv]
    # on the node:  pip install --no-index --find-links wheelhouse 'lightning-lars[ffcv]'

Run on a machine with internet (``make wheelhouse`` does). Binary wheels come from PyPI through ``pip download
--only-binary=:all:`` for the target's tags, at the versions of lightning_lars/requirements/lock-newest.txt
where the lock
has them (the newest tested set). Packages that PyPI has only as source are built into wheels here: a
pure-Python one serves any target; one with compiled code (FFCV) only a target like this machine (same
Python, same OS libraries: FFCV links Debian's libturbojpeg and OpenCV), which is said, and it is left out.

``--without torch`` leaves out what a GPU image already provides (torch, torchvision, lightning, timm,
torchmetrics and what only they need, e.g. the nvidia-* CUDA wheels): the folder then stays small.
``--without ffcv`` leaves out the optional FFCV extra.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from wheel_requirements import GROUPS, left_out_by, project_requirements  # beside this script

from lightning_lars.config.paths import PACKAGE_DIR, PROJECT_ROOT, is_checkout
from lightning_lars.core.errors import UserError

LOCK = PACKAGE_DIR / "requirements" / "lock-newest.txt"
MISSING = re.compile(r"No matching distribution found for (\S+)")


class CannotBuild(UserError):
    """A package with compiled code and no wheel on PyPI, for a target unlike this machine."""

    def __init__(self, requirement: str, wheel_name: str):
        self.requirement = requirement
        super().__init__(
            f"{requirement} has no wheel on PyPI and compiles ({wheel_name}): it builds only on a"
            " machine like the target (same Python, same OS libraries); there run `pip wheel --no-deps"
            f" '{requirement}'` and add the wheel to the folder"
        )


def this_machine() -> tuple[str, str]:
    """(Python version "3.11", platform tag "linux_x86_64") of the interpreter running this."""
    return f"{sys.version_info.major}.{sys.version_info.minor}", sysconfig.get_platform().replace("-", "_")


def build_wheel(requirement: str, out: Path, same_as_here: bool) -> Path:
    """Build ``requirement`` (no binary on PyPI) into ``out``; refuse a compiled wheel for another machine."""
    with tempfile.TemporaryDirectory() as tmp:
        run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", tmp, requirement])
        (wheel,) = Path(tmp).glob("*.whl")
        if not wheel.name.endswith("-none-any.whl") and not same_as_here:
            raise CannotBuild(requirement, wheel.name)
        return Path(wheel.replace(out / wheel.name))


def run(command: list[str]) -> subprocess.CompletedProcess:
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0 and not MISSING.search(result.stdout + result.stderr):
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise UserError(f"{' '.join(command[:4])} ... failed: {tail[0]}")
    return result


def compatible_platforms(platform_tag: str | None) -> list[str]:
    """pip takes ``--platform`` literally: manylinux_2_28 also runs the older manylinux wheels (2_27 ... 2_5,
    2014, 2010, 1), which many packages ship (e.g. pydantic-core's manylinux_2_17 only), so name them all."""
    match = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", platform_tag or "")
    if match is None:
        return [platform_tag] if platform_tag else []
    glibc_minor, arch = int(match.group(1)), match.group(2)
    legacy = [f"manylinux{name}_{arch}" for name in ("2014", "2010", "1")]
    return [f"manylinux_2_{minor}_{arch}" for minor in range(glibc_minor, 4, -1)] + legacy


def find_interpreter(python: str) -> str | None:
    """A working ``python3.X`` on PATH or under pyenv (whose shims fail for a version not selected), or None."""
    pyenv = Path.home().glob(f".pyenv/versions/{python}.*/bin/python{python}")
    candidates = [shutil.which(f"python{python}"), *map(str, pyenv)]
    for candidate in filter(None, candidates):
        if subprocess.run([candidate, "-c", "import pip"], capture_output=True, check=False).returncode == 0:
            return candidate
    return None


def resolve(requirements: list[str], python: str) -> list[tuple[str, bool]]:
    """``[(name==version, has a wheel), ...]``: pip's resolution for ``python`` (an interpreter of that version
    from PATH when there is one, so markers are the target's), at the lock's versions where it pins them."""
    interpreter = sys.executable if python == this_machine()[0] else find_interpreter(python)
    if interpreter is None:
        print(
            f"  note: no python{python} here: resolving with Python {this_machine()[0]}'s markers", flush=True
        )
        interpreter = sys.executable
    constraints = ["-c", str(LOCK)] if LOCK.is_file() else []
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        run(
            [
                interpreter,
                "-m",
                "pip",
                "install",
                "-q",
                "--dry-run",
                "--ignore-installed",
                "--report",
                str(report),
                *constraints,
                *requirements,
            ]
        )
        resolved = json.loads(report.read_text())["install"]
    return [
        (
            f"{item['metadata']['name']}=={item['metadata']['version']}",
            item["download_info"]["url"].split("#")[0].endswith(".whl"),
        )
        for item in resolved
    ]


def canonicalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def download(
    requirements: list[str], out: Path, python: str, platform_tag: str | None, without: set[str]
) -> list[str]:
    """Fill ``out`` with the target's wheels; build those PyPI has only as source. Returns what was built."""
    here_python, here_platform = this_machine()
    same_as_here = python == here_python and platform_tag in (here_platform, None)
    resolved = resolve(requirements, python)
    present = left_out_by(without, requirements)
    resolved = [(r, has_wheel) for r, has_wheel in resolved if canonicalize(r.split("==")[0]) not in present]
    built = []
    for requirement, has_wheel in resolved:
        if not has_wheel:
            print(f"  {requirement}: no wheel on PyPI; building it here", flush=True)
            build_wheel(requirement, out, same_as_here)
            built.append(requirement)
    target = [
        "--python-version",
        python,
        "--implementation",
        "cp",
        *(arg for tag in compatible_platforms(platform_tag) for arg in ("--platform", tag)),
    ]
    result = run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "--only-binary=:all:",
            "-d",
            str(out),
            *target,
            *(r for r, has_wheel in resolved if has_wheel),
        ]
    )
    missing = MISSING.search(result.stdout + result.stderr)
    if missing:
        raise UserError(
            f"PyPI has no wheel of {missing.group(1)} for Python {python} on"
            f" {platform_tag or here_platform}: choose another --python or --platform"
        )
    return built


# What the wheel is built from (the package, the folders it links to, the metadata files)
WHEEL_SOURCES = ("pyproject.toml", "README.md", "lightning_lars", "callbacks", "conf", "recipes")


def project_wheel(out: Path) -> Path:
    """The project's own wheel (pure Python), built from a copy of the clone: setuptools builds in the source
    folder (build/, *.egg-info), where a build of the clone running at the same time (CI runs this beside the
    tests) would mix its files into ours."""
    if not is_checkout():
        raise UserError("the project's own wheel is built from a clone: run make wheelhouse there")
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "source"
        source.mkdir()
        for name in WHEEL_SOURCES:
            path = PROJECT_ROOT / name
            # callbacks/, conf/ and recipes/ go inside the package by pyproject's package-dir
            if path.is_dir():
                shutil.copytree(
                    path,
                    source / name,
                    symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"),
                )
            else:
                shutil.copy2(path, source / name)
        run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "-q",
                "--no-deps",
                "--no-build-isolation",
                "-w",
                tmp,
                str(source),
            ]
        )
        (wheel,) = Path(tmp).glob("lightning_lars-*.whl")
        return Path(wheel.replace(out / wheel.name))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python benchmarks/wheelhouse.py", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--out", default="wheelhouse", help="folder to fill (default: wheelhouse)")
    parser.add_argument("--python", default=None, help="target Python, e.g. 3.12 (default: this one)")
    parser.add_argument(
        "--platform",
        default=None,
        help="target platform tag, e.g. manylinux_2_28_x86_64 (default: this machine)",
    )
    parser.add_argument(
        "--without", default="", help=f"comma-separated groups to leave out: {', '.join(GROUPS)}"
    )
    args = parser.parse_args(argv)
    try:
        without = {w for w in args.without.split(",") if w}
        if without - set(GROUPS):
            raise UserError(
                f"--without takes {', '.join(GROUPS)}; got {', '.join(sorted(without - set(GROUPS)))}"
            )
        python = args.python or this_machine()[0]
        if not re.fullmatch(r"3\.\d+", python):
            raise UserError(f"--python takes a version like 3.12, got {python}")
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        print(
            f"wheelhouse {out}: Python {python}, platform {args.platform or this_machine()[1]}"
            f"{', without ' + ', '.join(sorted(without)) if without else ''}",
            flush=True,
        )
        if "ffcv" not in without and (python, args.platform) not in (
            (this_machine()[0], None),
            this_machine(),
        ):
            # FFCV compiles and links this machine's libturbojpeg/OpenCV: no wheel for others
            without.add("ffcv")
            print(
                f"note: FFCV left out. {CannotBuild('ffcv', 'C extension')}. Without it the project runs with"
                " data=imagefolder or data=synthetic, and FFCV recipes say how to install it.",
                flush=True,
            )
        built = download(project_requirements(without), out, python, args.platform, without)
        wheel = project_wheel(out)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    wheels = sorted(out.glob("*.whl"))
    size_mib = sum(w.stat().st_size for w in wheels) / 2**20
    print(
        f"{len(wheels)} wheels, {size_mib:.1f} MiB in {out} (built here: {', '.join(built) or 'none'};"
        f" project: {wheel.name}; machine {platform.machine()})"
    )
    extra = "" if "ffcv" in without else "[ffcv]"
    print(f"install offline: pip install --no-index --find-links {out} 'lightning-lars{extra}'")
    return 0


if __name__ == "__main__":
    sys.exit(main())
