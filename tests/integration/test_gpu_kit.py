"""The GPU kit's install-and-run path on this CPU machine: `python -m lightning_lars.gpu_kit` builds the kit for this
interpreter, benchmarks/gpu_kit.py installs it with ``pip install --no-index`` into a fresh venv that borrows this
environment's torch (a .pth, as a GPU image has torch already), skips each GPU part with one line and writes the
results file. Downloads the kit's wheels from PyPI (about 40 MiB)."""

import importlib.util
import json
import os
import site
import subprocess
import sys
from pathlib import Path

import pytest

from lightning_lars.recipe.plan import check_command_line

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
GPU_PARTS = 4  # make test-gpu, make bench-gpu, the recipe eager and compiled


def run(command, cwd, timeout=900, offline=False):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "OUT")}
    if offline:  # as on the node: no index or wheel folder from this machine's pip config, only the kit
        env = {k: v for k, v in env.items() if not k.startswith("PIP_")} | {"PIP_CONFIG_FILE": os.devnull}
    return subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def test_the_kit_installs_offline_and_its_script_skips_each_gpu_part(tmp_path):
    kit = tmp_path / "kit"
    built = run([sys.executable, "-m", "lightning_lars.gpu_kit", "--out", str(kit)], cwd=ROOT)
    assert built.returncode == 0, built.stderr[-3000:]
    manifest = json.loads((kit / "kit.json").read_text())
    assert (kit / manifest["project_wheel"]).is_file()
    assert sum(w.stat().st_size for w in kit.glob("*.whl")) <= 64 * 2**20

    venv = tmp_path / "venv"
    assert run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path).returncode == 0
    python = str(venv / "bin" / "python")
    purelib = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=tmp_path)
    # this environment's site folders after the venv's own: torch & co. are "already on the node"
    borrowed = [p for p in sys.path if p.endswith("site-packages")] + site.getsitepackages()
    Path(purelib.stdout.strip(), "node.pth").write_text("\n".join(dict.fromkeys(borrowed)) + "\n")

    out = tmp_path / "out"
    done = run(
        [python, str(ROOT / "benchmarks" / "gpu_kit.py"), "--kit", str(kit), "--out", str(out)],
        tmp_path,
        offline=True,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    skips = [line for line in done.stdout.splitlines() if line.startswith("skip:")]
    assert len(skips) == GPU_PARTS, done.stdout
    results = json.loads((out / "gpu_kit.json").read_text())
    assert results["device"].startswith("cpu") and results["torch"] and results["lightning"]
    runs = results["training"]["runs"]
    assert [r["compile"] for r in runs] == [False, "default"] and {r["status"] for r in runs} == {"skipped"}
    where = run([python, "-c", "import lightning_lars; print(lightning_lars.__file__)"], cwd=tmp_path)
    assert where.stdout.startswith(str(venv)), where.stdout  # the kit's wheel, not this clone's code


def test_the_kits_training_runs_compose(tmp_path):
    """The GPU runs' command lines pass every check a run makes before it builds (schema, rules, the plan)."""
    spec = importlib.util.spec_from_file_location("gpu_kit_script", ROOT / "benchmarks" / "gpu_kit.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    for mode in script.COMPILE_MODES:
        cfg, _ = check_command_line(script.train_overrides(mode, 200, tmp_path))
        assert cfg.model.compile == mode and cfg.batch.global_size == cfg.batch.max_per_device == 408
        assert cfg.data.resolution == 224 and cfg.trainer.max_steps == 200
