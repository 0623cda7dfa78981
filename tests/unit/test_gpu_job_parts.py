"""The GPU job's bookkeeping, with real subprocesses and clocks: a part is cut at its own limit and says so, the
budget left bounds every part, the limits fit the job's 8 minutes, and results land in a new folder per job."""

import sys
import time

from helpers import benchmark_script

JOB_MINUTES = 8  # the job's promise, the kit's install included


def parts_here(tmp_path, budget_s: float):
    job_module, parts_module, results = (
        benchmark_script(name) for name in ("gpu_job_settings", "gpu_check_parts", "gpu_results")
    )
    job = results.Job(tmp_path / "results", budget_s, {}, time.monotonic())
    return job_module, parts_module, parts_module.Parts(job, set(job_module.LIMITS), True, tmp_path)


def test_the_parts_that_decide_the_goals_fit_the_jobs_eight_minutes_with_the_install_first():
    """The budget is the issue's 8 minutes; the parts up to (g) fit in it at their limits, in order of value; what
    comes after takes only what they leave."""
    settings = benchmark_script("gpu_job_settings")
    limits = list(settings.LIMITS.items())
    assert settings.BUDGET_S <= JOB_MINUTES * 60
    deciding = [limit for _, limit in limits[: [name for name, _ in limits].index("gpu tests") + 1]]
    assert sum(deciding) <= settings.BUDGET_S
    assert [name for name, _ in limits][:3] == ["install", "recipe compiled", "bare loop compiled"]


def test_a_part_past_its_limit_is_cut_there_and_its_log_kept(tmp_path, monkeypatch):
    job_module, parts_module, parts = parts_here(tmp_path, 60)
    monkeypatch.setitem(job_module.LIMITS, "gpu tests", 1.5)
    monkeypatch.setattr(parts_module, "MIN_PART_S", 1)
    sleeper = [sys.executable, "-c", "import time; print('started', flush=True); time.sleep(30)"]
    start = time.monotonic()
    result = parts.run("gpu tests", sleeper)
    assert time.monotonic() - start < 10
    assert result["status"] == "timed out" and "past its 2 s" in result["why"]
    assert "started" in parts.job.log("gpu tests").read_text()


def test_what_the_budget_has_left_bounds_a_part_and_an_empty_budget_runs_nothing(tmp_path, monkeypatch):
    job_module, parts_module, parts = parts_here(tmp_path, 3)
    monkeypatch.setattr(parts_module, "MIN_PART_S", 1)
    sleeper = [sys.executable, "-c", "import time; time.sleep(30)"]
    assert parts.run("recipe compiled", sleeper)["status"] == "timed out"  # its own limit is 90 s
    assert parts.job.left_s() < 1
    result = parts.run("bare loop compiled", [sys.executable, "-c", "pass"])
    assert result["status"] == "not run" and "budget is spent" in result["why"]


def test_each_job_gets_its_own_results_folder_named_by_date_and_device(tmp_path):
    results = benchmark_script("gpu_results")
    first = results.results_folder(tmp_path, "NVIDIA H200")
    assert first.name == f"{time.strftime('%Y-%m-%d', time.gmtime())}-h200"
    first.mkdir()
    assert results.results_folder(tmp_path, "NVIDIA H200").name == f"{first.name}-2"
