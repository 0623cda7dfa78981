"""A one-node SLURM cluster from Debian's ``slurm-wlm`` (slurmctld + slurmd on this machine), started by the
test that needs it and stopped after it: real sbatch, srun, scancel and scontrol requeue.

No munge: ``auth/none`` and ``cred/none`` (plugins Debian ships), so the cluster runs as root on free ports
with its state in a temporary folder; ``proctrack/linuxproc`` and ``task/none`` need no cgroups. No accounting
database: ``sacct`` fails and submitit says it bypasses it, then reads job states from its result files.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from helpers import free_port

DAEMONS = ("slurmctld", "slurmd", "sbatch", "scontrol", "scancel", "sinfo")


def why_not() -> str | None:
    """Why a SLURM cluster cannot be started here, or None."""
    missing = [name for name in DAEMONS if shutil.which(name) is None]
    if missing:
        return f"{', '.join(missing)} not found: install Debian's slurm-wlm (apt-get install slurm-wlm)"
    if os.geteuid() != 0:
        return "slurmd must run as root to start jobs as their user (run the slow tests as root)"
    return None


def write_conf(folder: Path) -> Path:
    host = socket.gethostname()
    lines = [
        "ClusterName=lars-test",
        f"SlurmctldHost={host}",
        f"SlurmctldPort={free_port()}",
        f"SlurmdPort={free_port()}",
        "AuthType=auth/none",
        "CredType=cred/none",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={folder / 'state'}",
        f"SlurmdSpoolDir={folder / 'spool'}",
        f"SlurmctldPidFile={folder / 'slurmctld.pid'}",
        f"SlurmdPidFile={folder / 'slurmd.pid'}",
        f"SlurmctldLogFile={folder / 'slurmctld.log'}",
        f"SlurmdLogFile={folder / 'slurmd.log'}",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "MpiDefault=none",
        "ReturnToService=2",
        "JobRequeue=1",
        "SchedulerType=sched/builtin",
        f"NodeName={host} CPUs={os.cpu_count()} RealMemory=2000 State=UNKNOWN",
        "PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES",
    ]
    for sub in ("state", "spool"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    conf = folder / "slurm.conf"
    conf.write_text("\n".join(lines) + "\n")
    return conf


@contextmanager
def slurm_cluster(folder: Path) -> Iterator[dict[str, str]]:
    """Starts slurmctld and slurmd in the foreground; yields the environment whose SLURM_CONF names them."""
    conf = write_conf(folder)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["SLURM_CONF"] = str(conf)
    daemons = [
        subprocess.Popen(["slurmctld", "-D", "-c", "-f", str(conf)], env=env, stderr=subprocess.STDOUT),
    ]
    try:
        time.sleep(1)  # slurmd registers with a listening slurmctld
        daemons.append(subprocess.Popen(["slurmd", "-D", "-f", str(conf)], env=env, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + 60
        state = ""
        while time.monotonic() < deadline and state != "idle":
            done = subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True)
            state = done.stdout.strip()
            time.sleep(0.5)
        assert state == "idle", f"the SLURM node never became idle ({state!r}): see {folder}/slurm*.log"
        yield env
    finally:
        subprocess.run(["scancel", "--full", "--user=root"], env=env, capture_output=True)
        for daemon in reversed(daemons):
            daemon.terminate()
            try:
                daemon.wait(timeout=30)
            except subprocess.TimeoutExpired:
                daemon.kill()
