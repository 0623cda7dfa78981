"""The GPU job's install-and-run path on this CPU machine, as a node user runs it: ``make gpu-kit`` builds the kit
for this interpreter; ``make gpu-check GPU_PY=<venv>`` installs it with ``pip install --no-index`` into a fresh
venv that borrows this environment's torch (a .pth, as a GPU image has torch already), installs the clone
editable, skips each GPU part with one line and writes its JSON and markdown. Downloads the kit's wheels from
PyPI (about 40 MiB)."""

import json
import os
import site
import sys
from pathlib import Path

import pytest
from helpers import ROOT, benchmark_script, entry_point_env, run

from lightning_lars.recipe.plan import check_command_line

pytestmark = pytest.mark.slow
GPU_PARTS = (
    11  # the recipe eager and compiled, on JPEGs, bench_gpu, the gpu tests, bf16, profile x 2, 3 levers
)
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

    venv = tmp_path / "venv"
    assert run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path, env=KIT_ENV).returncode == 0
    python = str(venv / "bin" / "python")
    purelib = run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=tmp_path, env=KIT_ENV
    )
    # this environment's site folders after the venv's own: torch & co. are "already on the node"
    borrowed = [p for p in sys.path if p.endswith("site-packages")] + site.getsitepackages()
    Path(purelib.stdout.strip(), "node.pth").write_text("\n".join(dict.fromkeys(borrowed)) + "\n")

    out = tmp_path / "out"
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
        ],
        cwd=tmp_path,
        env=NODE_ENV,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    skips = [line for line in done.stdout.splitlines() if line.startswith("skip:")]
    assert len(skips) == GPU_PARTS, done.stdout
    results = json.loads((out / "gpu_check.json").read_text())
    assert results["device"].startswith("cpu") and results["torch"] and results["lightning"]
    assert len(results["parts"]) == GPU_PARTS and {p["status"] for p in results["parts"].values()} == {
        "skipped"
    }
    table = (out / "gpu_check.md").read_text()
    assert all(f"| {name} | skipped |" in table for name in results["parts"])
    assert len([f for f in out.rglob("*") if f.is_file()]) <= MAX_FILES
    # the clone itself runs there (editable), with its callbacks, not a copy of it
    code = "import lightning_lars.callbacks as c; print(c.__file__)"
    where = run([python, "-c", code], cwd=tmp_path, env=KIT_ENV)
    assert where.stdout.strip() == str(ROOT / "callbacks" / "__init__.py"), where.stdout + where.stderr


def test_the_jobs_training_runs_compose(tmp_path):
    """The GPU runs' command lines pass every check a run makes before it builds (schema, rules, the plan)."""
    script = benchmark_script("gpu_check")
    jpegs = ["data=imagefolder", f"data.root={tmp_path}", "data.num_classes=10"]
    for mode, data in ((False, script.SYNTHETIC), ("default", script.SYNTHETIC), (False, jpegs)):
        cfg, _ = check_command_line(script.train_overrides(mode, 200, tmp_path, data))
        assert cfg.model.compile == mode and cfg.batch.global_size == cfg.batch.max_per_device == 408
        assert cfg.trainer.max_steps == 200 and cfg.trainer.precision == script.PRECISION
    for mode, batch in script.LEVERS:  # reduce-overhead is refused on a CPU only when the run is built
        cfg, _ = check_command_line(script.train_overrides(mode, 200, tmp_path, batch=batch))
        assert cfg.model.compile == mode and cfg.batch.global_size == cfg.batch.max_per_device == batch


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
    job, profile = benchmark_script("gpu_check"), benchmark_script("profile_steps")
    steps = job.PROFILE_AFTER + job.PROFILED_STEPS + 1
    for mode in (False, "default"):
        overrides = job.train_overrides(mode, steps, tmp_path)
        cfg = profile.compose_profiled(overrides, job.PROFILE_AFTER, job.PROFILED_STEPS, str(tmp_path))
        assert cfg.trainer.max_steps == steps and cfg.model.compile == mode
        assert cfg.trainer.profiler._target_ == "lightning.pytorch.profilers.PyTorchProfiler"
        assert cfg.trainer.profiler.schedule.active == job.PROFILED_STEPS
