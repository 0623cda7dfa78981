"""W&B on compute nodes without internet. With a key present and the server unreachable, a real
``wandb.init`` (no mock) must end in an offline run within a bounded time, with a one-line notice; before,
wandb retried for 90 s and ``CommError`` ended the run in ``build()``. Loopback addresses only.

Each case runs in a fresh Python process, as a job does: wandb keeps process-wide state (its service, the first
settings it saw, threads of its own), so in-process cases depended on which test ran before them."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow
SLACK_S = 45  # starting wandb's offline service takes 5-15 s on this shared 2-core machine

# What a training job does with the logger: build it, let Lightning create the run (``build()`` triggers this
# through log_hyperparams), log a metric. The notice goes to stderr through Lightning's rank-zero logger.
JOB = textwrap.dedent("""
    import json, logging, sys, time
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    import wandb
    from lightning_lars.report.wandb_logger import wandb_logger
    started = time.monotonic()
    logger = wandb_logger("lightning-lars-test", sys.argv[1], init_timeout_s=float(sys.argv[2]))
    run = logger.experiment
    elapsed = time.monotonic() - started
    logger.log_metrics({"train/loss": 1.0}, step=0)
    offline, mode = bool(run.offline), run.settings.mode
    wandb.finish()
    print(json.dumps({"elapsed_s": elapsed, "offline": offline, "mode": mode}))
""")


@pytest.fixture
def silent_server():
    """A loopback server that accepts TCP connections and never answers (a hung proxy or firewall)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    server.close()


@pytest.fixture
def closed_port():
    """A loopback port nothing listens on: connections are refused, as on a node with no route out."""
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    return f"http://127.0.0.1:{port}"


@pytest.mark.parametrize(
    "server, init_timeout_s, reason",
    [("closed_port", 30.0, "unreachable"), ("silent_server", 5.0, "did not answer")],
)
def test_key_set_server_unreachable_goes_offline_in_bounded_time(
    server, init_timeout_s, reason, request, tmp_path
):
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("WANDB_")
    }  # credentials alone decide: online
    env.update(
        WANDB_API_KEY="0123456789abcdef0123456789abcdef01234567",  # 40 chars, as wandb wants
        WANDB_BASE_URL=request.getfixturevalue(server),
        NETRC=str(tmp_path / "no-netrc"),
        WANDB_CONFIG_DIR=str(tmp_path / "wandb-config"),
    )
    save_dir = tmp_path / "logs"
    job = subprocess.run(
        [sys.executable, "-c", JOB, str(save_dir), str(init_timeout_s)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=init_timeout_s + SLACK_S + 60,
    )
    assert job.returncode == 0, job.stderr[-3000:]
    result = json.loads(job.stdout.strip().splitlines()[-1])
    assert result["offline"] and result["mode"] in ("offline", "dryrun")
    assert result["elapsed_s"] < init_timeout_s + SLACK_S
    notices = [line for line in job.stderr.splitlines() if line.startswith("W&B: offline")]
    assert len(notices) == 1 and reason in notices[0], job.stderr[-3000:]
    assert "wandb sync" in notices[0] and str(save_dir) in notices[0]
    assert "Traceback" not in job.stderr, job.stderr[-3000:]
    assert list((save_dir / "wandb").glob("offline-run-*"))
