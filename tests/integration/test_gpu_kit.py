"""The GPU job's install-and-run path on this CPU machine, as a node user runs it: ``make gpu-kit`` builds the kit
for this interpreter (FFCV's wheel built here, its libraries inside); ``make gpu-check GPU_PY=<venv>`` installs it
with ``pip install --no-index`` into a fresh venv that borrows this environment's torch (a .pth, as a GPU image has
torch already), installs the clone editable, records why each GPU part skipped and packs its files. Downloads the
kit's wheels from PyPI (about 40 MiB) and builds FFCV (about 20 s)."""

import json
import os
import platform
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from helpers import ROOT, benchmark_script, entry_point_env, run

from lightning_lars.recipe.plan import check_command_line

pytestmark = pytest.mark.slow
MAX_FILES = 8  # what a GPU job may bring back


# this machine's settings that the GPU node does not share: the clone on PYTHONPATH (the node's venv installs
# it), the $OUT of a caller, a parent make's flags
KIT_ENV = entry_point_env(unset=("PYTHONPATH", "OUT", "MAKEFLAGS", "MAKELEVEL"))
# as on the node: no index or wheel folder from this machine's pip config, only the kit
NODE_ENV = {
    **entry_point_env(unset=("PYTHONPATH", "OUT", "MAKEFLAGS", "MAKELEVEL", "PIP_*")),
    "PIP_CONFIG_FILE": os.devnull,
}


def test_make_gpu_check_installs_the_kit_offline_and_skips_each_gpu_part(tmp_path):
    kit = tmp_path / "kit"
    built = run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_kit.py"), "--out", str(kit)], cwd=ROOT, env=KIT_ENV
    )
    assert built.returncode == 0, built.stderr[-3000:]
    manifest = json.loads((kit / "kit.json").read_text())
    assert (kit / manifest["project_wheel"]).is_file()
    assert sum(w.stat().st_size for w in kit.glob("*.whl")) <= 64 * 2**20
    assert list(kit.glob("setuptools-*.whl")), "the editable install's build backend must travel in the kit"
    # FFCV's wheel carries the libraries its extension links: the node has no libturbojpeg or OpenCV objects
    assert manifest["ffcv_wheel"], manifest["ffcv_missing"]
    # the glibc its tag asks for, built against this machine's: no newer than the C library here
    needs = manifest["ffcv_needs_glibc"]
    assert f"-manylinux_{needs.replace('.', '_')}_" in manifest["ffcv_wheel"]
    here = platform.libc_ver()[1]
    assert tuple(map(int, needs.split("."))) <= tuple(map(int, here.split("."))), (needs, here)
    with zipfile.ZipFile(kit / manifest["ffcv_wheel"]) as wheel:
        bundled = [name for name in wheel.namelist() if name.startswith("ffcv.libs/")]
        wheel.extractall(tmp_path / "ffcv-unpacked")
    assert any("libturbojpeg" in name for name in bundled) and any("opencv_core" in name for name in bundled)
    (extension,) = (tmp_path / "ffcv-unpacked" / "ffcv").glob("_libffcv*.so")
    linked = subprocess.run(["ldd", str(extension)], capture_output=True, text=True, check=True).stdout
    turbojpeg = [line for line in linked.splitlines() if "libturbojpeg" in line]
    assert turbojpeg and all("ffcv.libs/" in line for line in turbojpeg), linked

    venv = tmp_path / "venv"
    assert run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path, env=KIT_ENV).returncode == 0
    python = str(venv / "bin" / "python")
    purelib = run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=tmp_path, env=KIT_ENV
    )
    # this environment's site folders after the venv's own: torch & co. are "already on the node"
    borrowed = [p for p in sys.path if p.endswith("site-packages")] + site.getsitepackages()
    Path(purelib.stdout.strip(), "node.pth").write_text("\n".join(dict.fromkeys(borrowed)) + "\n")

    out, results = tmp_path / "out", tmp_path / "results"
    done = run(
        [
            "make",
            "--no-print-directory",
            "-C",
            str(ROOT),
            "gpu-check",
            f"GPU_PY={python}",
            f"kit={kit}",
            f"out={out}",
            f"results={results}",
        ],
        cwd=tmp_path,
        env=NODE_ENV,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    summary = json.loads((results / "summary.json").read_text())
    assert summary["device"].startswith("cpu") and summary["torch"] and summary["lightning"]
    assert summary["parts"]["install"]["status"] == "passed"
    assert summary["kit"]["ffcv_wheel"] == manifest["ffcv_wheel"]
    statuses = {name: part["status"] for name, part in summary["parts"].items() if name != "install"}
    assert set(statuses.values()) <= {"skipped", "not available"}, statuses
    assert sorted(f.name for f in out.iterdir()) == ["results.tar.gz", "summary.json", "summary.md"]
    assert len(list(out.iterdir())) <= MAX_FILES
    # the kit's offline install is in the results, as pip wrote it
    assert "Successfully installed" in (results / "logs" / "install.log").read_text()
    # the clone itself runs there (editable), with its callbacks, not a copy of it
    code = "import lightning_lars.callbacks as c; print(c.__file__)"
    where = run([python, "-c", code], cwd=tmp_path, env=KIT_ENV)
    assert where.stdout.strip() == str(ROOT / "callbacks" / "__init__.py"), where.stdout + where.stderr


def test_the_jobs_training_runs_compose(tmp_path):
    """The GPU runs' command lines pass every check a run makes before it builds (schema, rules, the plan)."""
    script = benchmark_script("gpu_job_settings")
    jpegs = ["data=imagefolder", f"data.root={tmp_path}", "data.num_classes=10"]
    runs = [("default", script.SYNTHETIC, 408), ("default", jpegs, 408), ("default", script.SYNTHETIC, 816)]
    for mode, data, batch in runs:  # reduce-overhead is refused on a CPU only when the run is built
        cfg = check_command_line(script.train_overrides(mode, 120, tmp_path, data, batch))
        assert cfg.model.compile == mode and cfg.batch.global_size == cfg.batch.max_per_device == batch
        assert cfg.trainer.max_steps == 120 and cfg.trainer.precision == script.PRECISION
        # the bare loop beside it takes the recipe's LARS form and label smoothing
        assert cfg.optimizer.form == script.LARS_FORM and cfg.model.label_smoothing == script.LABEL_SMOOTHING
        assert cfg.trainer.benchmark is True  # cuDNN's autotuner, as bench_gpu.py sets it


def test_the_step_profile_splits_whole_steps_into_parts_that_add_up(tmp_path):
    """benchmarks/profile_steps.py on a CPU at toy scale: Lightning's own profiler events, summed per part."""
    table = tmp_path / "profile.json"
    overrides = [
        "recipe=goyal_8k",
        "debug=toy",
        "data=synthetic",
        "data.num_classes=10",
        "data.resolution=32",
        "data.num_train_images=1024",
        "batch.global_size=32",
        "model.arch=test_resnet",
        "~logger",
        f"paths.log_dir={tmp_path}",
    ]
    script = [sys.executable, str(ROOT / "benchmarks" / "profile_steps.py"), "--steps", "4", "--skip", "3"]
    done = run([*script, "--json", str(table), "--", *overrides], cwd=tmp_path, env=KIT_ENV, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| 4 whole steps recorded after 3 |" in done.stdout, done.stdout[-2000:]
    parts = json.loads(table.read_text())
    assert {"forward", "backward", "optimizer", "data", "our callbacks", "idle", "wall"} <= set(parts)
    assert all(parts[p]["host_ms"] > 0 for p in ("forward", "backward", "optimizer", "our callbacks"))
    # nested ranges counted once: the parts fit in the steps' wall time (the optimizer's closure runs forward
    # and backward, callback hooks run inside the step; counted twice they would exceed it, by more on a busy
    # machine); 1 ns of rounding allowed
    busy = sum(ms["host_ms"] for part, ms in parts.items() if part not in ("wall", "idle"))
    assert busy <= parts["wall"]["host_ms"] + 1e-6 and parts["forward"]["host_ms"] < busy


def test_the_jobs_profile_runs_compose(tmp_path):
    """profile_steps.py composes the profile parts' command lines as the entry point does: the MLPerf recipe sets no
    ``trainer.max_steps``, and a bare Hydra compose refused the job's ``trainer.max_steps=41`` on the H200."""
    job, profile = benchmark_script("gpu_job_settings"), benchmark_script("profile_steps")
    steps = job.PROFILE_AFTER + job.PROFILED_STEPS + 1
    for mode in (False, "default"):
        overrides = job.train_overrides(mode, steps, tmp_path)
        cfg = profile.compose_profiled(overrides, job.PROFILE_AFTER, job.PROFILED_STEPS, str(tmp_path))
        assert cfg.trainer.max_steps == steps and cfg.model.compile == mode
        assert cfg.trainer.profiler._target_ == "lightning.pytorch.profilers.PyTorchProfiler"
        assert cfg.trainer.profiler.schedule.active == job.PROFILED_STEPS
