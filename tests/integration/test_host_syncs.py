"""No device-to-host read by our code between log steps. The demo recipe as train.py builds it (every
callback, BN groups, plugins) runs on 2 gloo ranks under ``host_reads.HostReadRecorder``, which records every
``.item()``/``float``/``bool`` (``aten._local_scalar_dense``), copy to the CPU and ``tolist``/``numpy`` with the
stack that made it (tests/integration/sync_runs.py). On a GPU each such read waits for the device. Our code
may read only where it logs (every ``trainer.log_every_n_steps`` optimizer steps); between those steps the only
reads are Lightning's own, and exactly those that bare Lightning makes with the same module."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest
from helpers import free_port
from resume_runs import HERE, ROOT, env, make_demo_data

pytestmark = pytest.mark.slow


def _where(reads):
    return Counter(f"{read['kind']} at {read['where']}" for read in reads)


def test_between_log_steps_only_lightning_reads_from_the_device(tmp_path):
    make_demo_data(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    done = subprocess.run(
        [sys.executable, str(HERE / "sync_runs.py"), str(tmp_path / "data"), str(out)],
        cwd=ROOT,
        env={**env(tmp_path), "MASTER_PORT": str(free_port())},  # the three fits run one after another
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    for rank in (0, 1):
        bare = json.loads((out / f"bare-rank{rank}.json").read_text())
        lightning_quiet = _where(r for r in bare if r["quiet"])
        print(f"rank {rank}: bare Lightning's reads between log steps: {dict(lightning_quiet)}")
        for progress in ("lines", "bar"):
            reads = json.loads((out / f"{progress}-rank{rank}.json").read_text())
            ours_quiet = [r for r in reads if r["quiet"] and r["ours"]]
            assert not ours_quiet, (
                f"{progress}, rank {rank}: our reads between log steps: {_where(ours_quiet)}"
            )
            # Nor do we make Lightning read: its only reads left are its SIGTERM flag, broadcast and read after
            # every micro-batch when there is more than one rank (training_epoch_loop.py,
            # Lightning-AI/pytorch-lightning#21487; no setting turns it off in Lightning 2.6). A metric logged
            # with prog_bar=True would add one `.item()` per batch (Lightning converts them all, bar or not).
            theirs_quiet = _where(r for r in reads if r["quiet"])
            assert all("_broadcast_sigterm_tensor" in where for where in theirs_quiet), (
                progress,
                theirs_quiet,
            )
            assert theirs_quiet == lightning_quiet, (progress, rank)
            # the recorder sees our reads where they belong: at log steps (divergence check, log line, trust)
            ours_at_log_steps = _where(r for r in reads if r["ours"] and not r["quiet"])
            assert any("divergence.py" in where for where in ours_at_log_steps), ours_at_log_steps
            if rank == 0:
                assert any("trust_ratio.py" in where for where in ours_at_log_steps), ours_at_log_steps
