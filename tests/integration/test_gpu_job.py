"""The whole GPU job on this CPU, as ``make gpu-check kit=none`` runs it in an environment that has the project:
every GPU part records why it did not run, and the job leaves its files (results folder and the pack for $OUT)."""

import json
import re
import subprocess
import sys
import tarfile
import time

import pytest
from helpers import ROOT, benchmark_script, entry_point_env, run

from lightning_lars.core.errors import UserError
from lightning_lars.recipe.plan import check_command_line

pytestmark = pytest.mark.slow
MAX_FILES = 8  # what the device tool brings back from $OUT
NO_CUDA = "no CUDA here (torch.cuda.is_available() is False)"


def test_make_gpu_check_runs_the_whole_job_and_says_why_each_gpu_part_skipped(tmp_path):
    job = benchmark_script("gpu_job_settings")
    out, results = tmp_path / "out", tmp_path / "2026-11-28-cpu"
    command = ["make", "--no-print-directory", "-C", str(ROOT), "gpu-check", f"GPU_PY={sys.executable}"]
    command += ["kit=none", f"out={out}", f"results={results}"]
    env = entry_point_env(unset=("OUT", "MAKEFLAGS", "MAKELEVEL"))
    done = run(command, cwd=tmp_path, env=env, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]

    summary = json.loads((results / "summary.json").read_text())
    parts = summary["parts"]
    assert list(parts) == list(job.LIMITS)  # every part, in order of value
    assert parts["install"] == {
        **parts["install"],
        "status": "not run",
        "why": "--kit none: this environment as is",
    }
    # the GPU-decode loader: "not available" while the config refuses its key, else skipped like the others
    decode = job.train_overrides(
        "default", 60, tmp_path, ["data=imagefolder", f"data.root={tmp_path}", "data.decode=device"]
    )
    try:
        check_command_line(decode)
        refused = None
    except UserError as error:
        refused = str(error)
    for name, part in parts.items():
        if name == "install":
            continue
        if name == "jpeg gpu decode" and refused:
            assert part["status"] == "not available" and refused in part["why"], part
        else:
            assert (part["status"], part["why"]) == ("skipped", NO_CUDA), (name, part)
        assert part["limit_s"] == job.LIMITS[name]
    table = (results / "summary.md").read_text()
    assert all(f"| {name} | {part['status']} |" in table for name, part in parts.items())
    assert "torch==" in (results / "pip-freeze.txt").read_text()
    assert (results / "nvidia-smi.txt").read_text()

    # the pack: at most 8 files, and the one-liner puts the results folder back under its own name
    packed = sorted(f.name for f in out.iterdir())
    assert packed == ["results.tar.gz", "summary.json", "summary.md"] and len(packed) <= MAX_FILES
    assert "tar -xzf results.tar.gz -C benchmarks/results" in done.stdout
    unpacked = tmp_path / "clone" / "benchmarks" / "results"
    unpacked.mkdir(parents=True)
    subprocess.run(["tar", "-xzf", str(out / "results.tar.gz"), "-C", str(unpacked)], check=True)
    assert json.loads((unpacked / results.name / "summary.json").read_text()) == summary
    with tarfile.open(out / "results.tar.gz") as tar:
        assert all(m.name.startswith(results.name) for m in tar.getmembers())


def test_the_jobs_jpegs_fill_one_tree_from_every_process_and_convert_to_ffcv(tmp_path):
    """The node's JPEGs: processes with their own seeds number their files apart (none overwrites another), and
    FFCV's files hold every one of them."""
    job = benchmark_script("gpu_job_settings")
    done = run([sys.executable, "-c", job.MAKE_JPEGS, str(tmp_path), "30", "3"], cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    train = sorted((tmp_path / "jpeg" / "train").rglob("*.jpg"))
    assert len(train) == 30 and len({p.name for p in train}) == 30
    assert len(list((tmp_path / "jpeg" / "val").rglob("*.jpg"))) == 3 * 10  # each process: one a class
    manifest = json.loads((tmp_path / "ffcv" / "manifest.json").read_text())
    assert manifest["splits"]["train"]["num_images"] == 30 and manifest["writer"]["max_resolution"] == 512
    assert (tmp_path / "ffcv" / "train.beton").stat().st_size > 0


def test_a_timed_run_reads_its_images_per_s_from_the_runs_own_results_and_sets_it_beside_another(tmp_path):
    """Parts.train as on the GPU (CUDA taken as present), on this CPU at toy scale: the entry point's results.json
    gives images/s, the batch gives ms/step, and the ratio to the part it is set beside is theirs."""
    job_module, parts_module, results = (
        benchmark_script(name) for name in ("gpu_job_settings", "gpu_check_parts", "gpu_results")
    )
    job = results.Job(tmp_path / "results", 600, {}, time.monotonic())
    parts = parts_module.Parts(job, set(job_module.LIMITS), True, tmp_path)
    data = ["data=synthetic", "data.resolution=32", "data.num_classes=10", "data.num_train_images=640"]
    overrides = job_module.train_overrides(False, 6, tmp_path / "run", data, batch=8)
    toy = ["trainer.accelerator=cpu", "model.arch=test_resnet", "batch.bn_group=null"]
    overrides = [o for o in overrides if not o.startswith("trainer.accelerator=")] + toy
    job.results["parts"]["bare loop compiled"] = {"status": "passed", "images_per_s": 2.0}
    result = parts.beside(parts.train("recipe compiled", overrides, 8), "bare loop compiled")
    assert result["status"] == "passed", job.log("recipe compiled").read_text()[-3000:]
    (found,) = (tmp_path / "run").rglob("results.json")
    images_per_s = json.loads(found.read_text())["metrics"]["perf/images_per_sec"]
    assert result["images_per_s"] == round(images_per_s, 1) > 0
    assert result["ms_per_step"] == round(8 / images_per_s * 1e3, 2)
    assert result["ratio"] == round(result["images_per_s"] / 2.0, 3)
    assert result["peak_gib"] == 0  # no CUDA memory on a CPU


def test_the_jobs_gpu_tests_are_every_gpu_test_and_their_outcomes_are_read_off_pytests_lines(tmp_path):
    """(g) names its tests one by one (most telling first): pytest's own collection of those names is its
    collection of ``-m gpu tests/gpu``, no test left out or unknown. The counts the job records from ``-v``'s
    line per test are those of pytest's own summary line."""
    job, results = benchmark_script("gpu_job_settings"), benchmark_script("gpu_results")

    def collected(*paths: str) -> list[str]:
        done = run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "gpu", *paths], cwd=ROOT)
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
        return [line for line in done.stdout.splitlines() if "::" in line]

    assert sorted(collected(*job.GPU_TESTS)) == sorted(collected("tests/gpu")) != []

    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_outcomes.py").write_text(
        "import pytest\n"
        "def test_passes(): pass\n"
        "def test_fails(): assert False\n"
        "@pytest.mark.skip(reason='no GPU')\n"
        "def test_skips(): pass\n"
        "@pytest.mark.parametrize('n', [1, 2])\n"
        "def test_passes_twice(n): pass\n"
    )
    done = run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-rs", "tests"], cwd=tmp_path)
    summary = re.findall(r"(\d+) (passed|failed|skipped)", done.stdout.splitlines()[-1])
    assert (
        results.outcome_counts(done.stdout)
        == {what: int(n) for n, what in summary}
        == {
            "passed": 3,
            "failed": 1,
            "skipped": 1,
        }
    )
