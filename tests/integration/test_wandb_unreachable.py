"""Issue 12.5: W&B on compute nodes without internet. With a key present and the server unreachable, a real
``wandb.init`` (no mock) must end in an offline run within a bounded time, with a one-line notice; before,
wandb retried for 90 s and ``CommError`` ended the run in ``build()``. Loopback addresses only."""

from __future__ import annotations

import logging
import socket
import time

import pytest
import wandb

from lightning_lars.wandb_logger import wandb_logger

pytestmark = pytest.mark.slow
SLACK_S = 45  # starting wandb's offline service takes 5-15 s on this shared 2-core machine


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


@pytest.mark.parametrize("server, init_timeout_s, reason", [("closed_port", 30.0, "unreachable"),
                                                            ("silent_server", 5.0, "did not answer")])
def test_key_set_server_unreachable_goes_offline_in_bounded_time(server, init_timeout_s, reason, request,
                                                                 tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("WANDB_API_KEY", "0123456789abcdef0123456789abcdef01234567")  # 40 chars, as wandb wants
    monkeypatch.setenv("WANDB_BASE_URL", request.getfixturevalue(server))
    monkeypatch.setenv("WANDB_MODE", "online")  # restored after the test: Lightning sets it when offline
    monkeypatch.delenv("WANDB_MODE")            # credentials alone decide: online
    # A W&B service or run left by an earlier in-process test keeps its own settings (its run folder among them):
    # in the full slow tier the offline run then landed outside tmp_path. Start from none, as a job does.
    wandb.teardown()
    for name in ("WANDB_SERVICE", "WANDB_DIR"):
        monkeypatch.delenv(name, raising=False)
    caplog.set_level(logging.INFO)
    started = time.monotonic()
    logger = wandb_logger("lightning-lars-test", str(tmp_path), init_timeout_s=init_timeout_s)
    try:
        run = logger.experiment  # what build() triggers through log_hyperparams
        elapsed = time.monotonic() - started
        assert run.offline and run.settings.mode in ("offline", "dryrun")
        logger.log_metrics({"train/loss": 1.0}, step=0)  # logging goes on, into the offline run
    finally:
        wandb.finish()
        wandb.teardown()  # wandb keeps the first settings it saw in a process-wide singleton
    assert elapsed < init_timeout_s + SLACK_S
    notices = [r.getMessage() for r in caplog.records if r.getMessage().startswith("W&B: offline")]
    assert len(notices) == 1 and reason in notices[0] and "\n" not in notices[0]
    assert "wandb sync" in notices[0]
    assert list((tmp_path / "wandb").glob("offline-run-*"))
