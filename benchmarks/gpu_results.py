"""The GPU job's results (benchmarks/gpu_check.py): one folder in the repository per job,
``benchmarks/results/<date>-<device>/``, and at most 8 files in ``$OUT`` to carry it back.

The folder holds ``summary.json`` (every part: status, why it did not run, its numbers), ``summary.md`` (the same
as tables, each ratio beside the run it divides by), ``logs/<part>.log`` (each part's output, its last 256 KiB),
``pip-freeze.txt`` and ``nvidia-smi.txt``. ``$OUT`` gets ``results.tar.gz`` (that folder, under its own name)
plus copies of the summary; on the machine the lead runs from, one line puts the folder in place:

    tar -xzf <files_at>/results.tar.gz -C benchmarks/results

Stdlib only: it runs before the kit is installed.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

LOG_TAIL_BYTES = 256 * 2**10  # a failed compile's traceback fits; the device tool brings back 16 MiB a file


def results_folder(base: Path, device_name: str) -> Path:
    """``base/<UTC date>-<device>``, e.g. 2026-11-28-h200 ("NVIDIA H200"); a second job that day gets -2."""
    device = re.sub(r"[^a-z0-9]+", "-", device_name.lower().removeprefix("nvidia ")).strip("-") or "device"
    name = f"{time.strftime('%Y-%m-%d', time.gmtime())}-{device}"
    folder, count = base / name, 1
    while folder.exists():
        count += 1
        folder = base / f"{name}-{count}"
    return folder


class Job:
    """The parts' results, rewritten to ``folder`` after every part; the time budget the parts share."""

    def __init__(self, folder: Path, budget_s: float, header: dict, started: float):
        """``started``: time.monotonic() when the job began (the kit's install counts against the budget)."""
        self.folder, self.started = folder, started
        self.deadline = self.started + budget_s
        (folder / "logs").mkdir(parents=True, exist_ok=True)
        self.results = {**header, "budget_s": budget_s, "parts": {}}

    def left_s(self) -> float:
        return self.deadline - time.monotonic()

    def log(self, part: str) -> Path:
        return self.folder / "logs" / f"{re.sub(r'[^a-z0-9]+', '-', part.lower()).strip('-')}.log"

    def record(self, part: str, result: dict) -> dict:
        """Keep ``result`` under ``part`` (cutting its log to the tail) and rewrite the summary."""
        log = self.log(part)
        if log.is_file() and log.stat().st_size > LOG_TAIL_BYTES:
            data = log.read_bytes()[-LOG_TAIL_BYTES:]
            log.write_bytes(b"[... cut: the last 256 KiB follow]\n" + data)
        result = {"at_s": round(time.monotonic() - self.started, 1), **result}  # a re-record keeps its time
        self.results["parts"][part] = result
        self._write_summary()
        return result

    def stopped(self, trace: str) -> None:
        """The job ended on an error: its last lines go into the summary, the parts recorded so far stay."""
        self.results["stopped"] = trace.strip().splitlines()[-12:]
        self._write_summary()

    def _write_summary(self) -> None:
        (self.folder / "summary.json").write_text(json.dumps(self.results, indent=2) + "\n")
        (self.folder / "summary.md").write_text(markdown(self.results))


def cell(value) -> str:
    if isinstance(value, float):
        return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"
    return "" if value is None else str(value)


def markdown(results: dict) -> str:
    """The summary as tables: one row a part, its numbers, and why a part did not run."""
    lines = [
        f"# GPU job on {results['device']} ({results['date']}, commit {results['commit']})",
        "",
        f"torch {results['torch']} (CUDA {results['cuda']}), lightning {results['lightning']},"
        f" Python {results['python']}; budget {results['budget_s']:.0f} s, parts in order of value.",
        "",
        "| part | status | images/s | beside it, same job | ratio | ms/step | peak GiB | s (limit) | why |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, part in results["parts"].items():
        beside = part.get("beside", {})
        row = [
            name,
            part["status"],
            cell(part.get("images_per_s")),
            f"{beside['what']}: {cell(beside['images_per_s'])}" if beside else "",
            f"{part['ratio']:.3f}" if part.get("ratio") else "",
            cell(part.get("ms_per_step")),
            cell(part.get("peak_gib")),
            f"{cell(part.get('seconds'))} ({part.get('limit_s', '')})",
            part.get("why", ""),
        ]
        lines.append("| " + " | ".join(row) + " |")
    if results.get("stopped"):
        lines += ["", "## The job stopped on an error", "", "```", *results["stopped"], "```"]
    for name, part in results["parts"].items():
        if part.get("tables"):
            lines += ["", f"## {name}", "", part["tables"]]
        if part.get("ms_per_step_by_part"):
            lines += ["", f"## {name}: ms per step", "", "| part | host | device |", "|---|---|---|"]
            for what, ms in part["ms_per_step_by_part"].items():
                lines.append(f"| {what} | {ms['host_ms']:.2f} | {ms['device_ms']:.2f} |")
    return "\n".join(lines) + "\n"


def pack(folder: Path, out: Path) -> list[Path]:
    """``out/results.tar.gz`` (``folder`` under its own name) and copies of its summary: 3 files."""
    out.mkdir(parents=True, exist_ok=True)
    archive = out / "results.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(folder, arcname=folder.name)
    copies = [Path(shutil.copy(folder / name, out / name)) for name in ("summary.json", "summary.md")]
    return [archive, *copies]


def read_json(path: Path) -> dict:
    """A part's JSON file, or what was wrong with it: a part killed at its limit can leave one half written."""
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        return {"unreadable": f"{path.name}: {error}"}


def outcome_counts(log: str) -> dict[str, int]:
    """How many tests ended how, from ``pytest -v``'s line per test: a run cut at its limit keeps the ended ones."""
    ended = re.findall(r"^tests/\S+::\S+ (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)\b", log, re.MULTILINE)
    return {outcome.lower(): ended.count(outcome) for outcome in dict.fromkeys(ended)}


def environment(folder: Path) -> None:
    """pip freeze and nvidia-smi beside the numbers (each a few seconds at most; one that hangs says so)."""
    (folder / "pip-freeze.txt").write_text(_output([sys.executable, "-m", "pip", "freeze"], timeout=60))
    smi = shutil.which("nvidia-smi")
    text = _output([smi], timeout=30) if smi else "nvidia-smi: not on this machine\n"
    (folder / "nvidia-smi.txt").write_text(text)


def _output(command: list[str], timeout: float) -> str:
    """``command``'s stdout and stderr, or why it gave none."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"{' '.join(command)}: {error}\n"
    return done.stdout + done.stderr
