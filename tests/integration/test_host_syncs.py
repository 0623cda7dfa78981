"""No host-device synchronisation per step. Between log steps our whole stack (the demo recipe as
train.py builds it: every callback, BN groups, plugins) runs exactly as many ``aten::_local_scalar_dense``
(``.item()``, ``bool(tensor)``: on a GPU each waits for the device) per optimizer step as bare Lightning with
the same module, counted by torch.profiler on 2 gloo ranks (tests/integration/sync_runs.py). Before, the
preemption check all-reduced a boolean and read it back at every step."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from resume_runs import HERE, ROOT, env, make_demo_data

pytestmark = pytest.mark.slow
STEPS_PER_EPOCH = 200 // 32  # demo data of make_demo_data, global batch 32: an epoch ends after 6 steps


def test_between_log_steps_our_stack_adds_no_sync(tmp_path):
    make_demo_data(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    done = subprocess.run(
        [sys.executable, str(HERE / "sync_runs.py"), str(tmp_path / "data"), str(out)],
        cwd=ROOT,
        env=env(tmp_path),
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    for rank in (0, 1):
        ours = json.loads((out / f"ours-rank{rank}.json").read_text())
        bare = json.loads((out / f"bare-rank{rank}.json").read_text())
        every, ours, bare = ours["log_every"], ours["counts"], bare["counts"]
        assert len(ours) == len(bare) == 12
        # A window is one optimizer step. Allowed to sync: the step that logs ((s + 1) % every == 0, when our
        # checks run) and the one after (Lightning writes that step's metrics after the callbacks' hooks), and
        # the first step of an epoch (epoch-end checkpoint and metrics). Step 0 warms up.
        quiet = [s for s in range(1, len(ours)) if (s + 1) % every and s % every and s % STEPS_PER_EPOCH]
        assert quiet == [1, 2, 5, 9, 10]
        assert [ours[s] for s in quiet] == [bare[s] for s in quiet], (ours, bare)
        # the counter sees our syncs where they belong: at the log steps (agreement, divergence check, log line)
        log_steps = [s for s in range(len(ours)) if (s + 1) % every == 0]
        assert all(ours[s] > bare[s] for s in log_steps), (ours, bare)
