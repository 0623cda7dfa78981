"""Multi-node launch: SLURM (sbatch + srun), torchrun, or Lightning's own process spawning.

``python -m lightning_lars.parallel.launch --nodes N --devices G recipe=NAME [key=value ...]`` (what
``make recipe=NAME nodes=N devices=G`` runs) picks, with ``--launcher auto``:

* inside a SLURM allocation (``SLURM_JOB_ID`` set): ``srun`` one task per GPU, now;
* ``sbatch`` on PATH: writes ``<log_dir>/slurm/<recipe>-<time>.sbatch`` and submits it;
* otherwise, more than one node: ``torchrun`` for this node (``NODE_RANK``, ``MASTER_ADDR``,
  ``MASTER_PORT`` from the environment; run the same command on every node);
* otherwise: ``python -m lightning_lars.train`` with ``trainer.devices=G`` (Lightning starts the processes).

No home-made process management: srun and torchrun start the processes; Lightning's ``SLURMEnvironment``
and ``TorchElasticEnvironment`` read their variables. SLURM jobs get ``--signal=SIGUSR1@90`` (every task
is signalled 90 s before the time limit; Lightning saves a checkpoint and runs ``scontrol requeue``) and
``--requeue``. Every process of one run must share one Hydra run dir, so the launcher pins
``hydra.run.dir`` (the default holds a timestamp, which would differ between processes).
``--dry-run`` prints the command or script instead of running it.
"""

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from lightning_lars.core.errors import UserError

RUN_DIR = "${paths.log_dir}/${recipe_name}/runs/"  # Hydra interpolations, resolved by the training job
LAUNCHERS = ("auto", "slurm", "torchrun", "local")


def train_args(recipe: str, nodes: int, devices: int, overrides: list[str]) -> list[str]:
    """Arguments after ``python`` for one training process."""
    return [
        "-m",
        "lightning_lars.train",
        f"recipe={recipe}",
        f"trainer.num_nodes={nodes}",
        f"trainer.devices={devices}",
        *overrides,
    ]


def sbatch_script(
    recipe: str,
    nodes: int,
    devices: int,
    overrides: list[str],
    python: str = "python",
    time_limit: str = "24:00:00",
    partition: str | None = None,
    account: str | None = None,
    cpus_per_node: int = 1,
    mem: str = "0",
) -> str:
    """A batch script: one srun task per GPU with its share of the node's cores, SIGUSR1 90 s before the
    limit, requeue on preemption.

    ``--cpus-per-task`` = cores per node / GPUs per node (SLURM's default is 1 core per task: one decode
    thread per GPU); ``--mem=0`` asks for all of each node's memory (``mem``: another SLURM size, e.g. 480G);
    ``--open-mode=append``: a requeued job appends to its log instead of truncating the first attempt's.
    """
    cpus_per_task = max(1, cpus_per_node // devices)
    directives = [
        f"--job-name=lars-{recipe}",
        f"--nodes={nodes}",
        f"--ntasks-per-node={devices}",
        f"--gpus-per-node={devices}",
        f"--cpus-per-task={cpus_per_task}",
        f"--mem={mem}",
        f"--time={time_limit}",
        "--signal=SIGUSR1@90",
        "--requeue",
        "--output=%x-%j.out",
        "--open-mode=append",
    ]
    directives += [f"--partition={partition}"] * bool(partition) + [f"--account={account}"] * bool(account)
    run_dir = shlex.quote(f"hydra.run.dir={RUN_DIR}slurm-") + '"${SLURM_JOB_ID}"'
    command = " ".join(shlex.quote(a) for a in [python, *train_args(recipe, nodes, devices, overrides)])
    return "\n".join(
        [
            "#!/bin/bash",
            f"# lightning-lars: {recipe} on {nodes} node(s) x {devices} GPU(s). Submit: sbatch THIS_FILE",
            *(f"#SBATCH {d}" for d in directives),
            "set -euo pipefail",
            "# W&B: online with credentials (wandb login / WANDB_API_KEY), else offline with a one-line notice",
            "# srun starts one task per GPU; Lightning's SLURMEnvironment reads SLURM_PROCID/LOCAL_ID/NTASKS.",
            "# Since Slurm 22.05 srun does not inherit sbatch's --cpus-per-task: pass it on,"
            " or every task gets 1 core.",
            'export SRUN_CPUS_PER_TASK="${SLURM_CPUS_PER_TASK}"',
            f"srun --kill-on-bad-exit=1 {command} {run_dir}",
            "",
        ]
    )


def torchrun_command(
    recipe: str,
    nodes: int,
    devices: int,
    overrides: list[str],
    node_rank: int,
    master_addr: str,
    master_port: int,
    run_id: str,
) -> list[str]:
    """``torchrun`` for one node; the same command (same ``run_id``) must run on every node.

    Run as ``python -m torch.distributed.run`` (= ``torchrun``) so the venv's torch is the one that runs.
    """
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nnodes={nodes}",
        f"--nproc-per-node={devices}",
        f"--node-rank={node_rank}",
        f"--master-addr={master_addr}",
        f"--master-port={master_port}",
        *train_args(recipe, nodes, devices, overrides),
        f"hydra.run.dir={RUN_DIR}torchrun-{run_id}",
    ]


def partition_cpus(partition: str | None, which=shutil.which) -> tuple[int | None, str]:
    """(cores per node of ``partition``, the smallest node's, from ``sinfo``; why not, where None): sinfo
    missing, failing (a login node with a broken SLURM config: its own last line of stderr), or listing no
    node."""
    if not which("sinfo"):
        return None, "sinfo is not on PATH here"
    command = ["sinfo", "--noheader", "--format=%c"] + ([f"--partition={partition}"] if partition else [])
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
    except subprocess.TimeoutExpired:
        return None, f"`{' '.join(command)}` did not answer in 30 s"
    except OSError as err:
        return None, f"`{' '.join(command)}` could not start: {err.strerror}"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1].strip()
        return None, f"`{' '.join(command)}` failed (exit {done.returncode}): {last}"
    counts = [int(n.rstrip("+")) for n in done.stdout.split() if n.rstrip("+").isdigit()]
    if not counts:
        return None, f"`{' '.join(command)}` listed no node"
    return min(counts), ""


def choose_launcher(nodes: int, env=os.environ, which=shutil.which) -> str:
    """slurm inside an allocation or where sbatch exists, torchrun for several nodes, else local."""
    if env.get("SLURM_JOB_ID") or which("sbatch"):
        return "slurm"
    return "torchrun" if nodes > 1 else "local"


def split_recipe(args: list[str]) -> tuple[str, list[str]]:
    """``recipe=NAME`` out of the Hydra overrides (it must be there)."""
    recipes = [a.split("=", 1)[1] for a in args if a.startswith("recipe=")]
    if len(recipes) != 1:
        raise UserError("name exactly one recipe: make recipe=NAME nodes=N devices=G (see make recipes)")
    return recipes[0], [a for a in args if not a.startswith("recipe=")]


def build(argv: list[str], env=os.environ, which=shutil.which) -> tuple[str, list[str] | str]:
    """(launcher, command) for these arguments: a command list to run, or an sbatch script's text."""
    parser = argparse.ArgumentParser(description="launch a recipe on N nodes x G devices")
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--devices", type=int, default=1, help="GPUs (or CPU processes) per node")
    parser.add_argument("--launcher", choices=LAUNCHERS, default="auto")
    parser.add_argument("--time", default="24:00:00", help="SLURM time limit")
    parser.add_argument("--partition")
    parser.add_argument("--account")
    parser.add_argument(
        "--cpus-per-node",
        type=int,
        help="cores per node, shared by its GPUs' tasks"
        " (default: sinfo's count for the partition; without sinfo, required)",
    )
    parser.add_argument("--mem", default="0", help="SLURM --mem per node (0: all of it)")
    parser.add_argument("--dry-run", action="store_true", help="print the command or script, run nothing")
    parser.add_argument("overrides", nargs="*", help="recipe=NAME and Hydra key=value overrides")
    args = parser.parse_args(argv)
    if args.nodes < 1 or args.devices < 1:
        raise UserError(f"nodes={args.nodes} devices={args.devices}: both must be at least 1")
    recipe, overrides = split_recipe(args.overrides)
    launcher = choose_launcher(args.nodes, env, which) if args.launcher == "auto" else args.launcher
    if launcher == "slurm" and env.get("SLURM_JOB_ID"):  # already allocated (salloc): run the tasks now
        cpus = env.get("SLURM_CPUS_PER_TASK") or str(
            max(1, int(env.get("SLURM_CPUS_ON_NODE", 1)) // args.devices)
        )
        return launcher, [
            "srun",
            f"--nodes={args.nodes}",
            f"--ntasks-per-node={args.devices}",
            f"--cpus-per-task={cpus}",
            "--kill-on-bad-exit=1",
            sys.executable,
            *train_args(recipe, args.nodes, args.devices, overrides),
            f"hydra.run.dir={RUN_DIR}slurm-{env['SLURM_JOB_ID']}",
        ]
    if launcher == "slurm":
        # never this machine's count: a login node's cores say nothing of the compute nodes'
        cpus_per_node, why = args.cpus_per_node, ""
        if cpus_per_node is None:
            cpus_per_node, why = partition_cpus(args.partition, which)
        if cpus_per_node is None:
            raise UserError(
                f"cannot tell the cores of a compute node: {why}; pass --cpus-per-node N"
                " (make ... args='--cpus-per-node N'), the cores of one node, shared by its GPUs' tasks, or"
                " train on this machine instead of submitting: make ... args='--launcher local'"
            )
        return launcher, sbatch_script(
            recipe,
            args.nodes,
            args.devices,
            overrides,
            sys.executable,
            args.time,
            args.partition,
            args.account,
            cpus_per_node,
            args.mem,
        )
    if launcher == "torchrun":
        if args.nodes > 1 and not env.get("MASTER_ADDR"):
            raise UserError(
                "torchrun over several nodes: set MASTER_ADDR=<node 0's host> and NODE_RANK=<0..N-1>"
                " (and the same RUN_ID) on every node"
            )
        run_id = env.get("RUN_ID") or time.strftime("%Y-%m-%d_%H-%M")
        return launcher, torchrun_command(
            recipe,
            args.nodes,
            args.devices,
            overrides,
            int(env.get("NODE_RANK", 0)),
            env.get("MASTER_ADDR", "127.0.0.1"),
            int(env.get("MASTER_PORT", 29500)),
            run_id,
        )
    if args.nodes > 1:
        raise UserError("launcher=local runs one node: use --launcher torchrun or slurm for nodes > 1")
    return launcher, [sys.executable, *train_args(recipe, args.nodes, args.devices, overrides)]


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    try:
        launcher, command = build(argv)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    dry_run = "--dry-run" in argv
    if isinstance(command, str):  # an sbatch script
        if dry_run:
            print(command, end="")
            return
        path = Path("logs/slurm") / f"{time.strftime('%Y-%m-%d_%H-%M-%S')}.sbatch"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(command)
        print(f"[launch] sbatch {path}", flush=True)
        raise SystemExit(subprocess.call(["sbatch", str(path)]))
    print(f"[launch] {launcher}: {shlex.join(command)}", flush=True)
    if not dry_run:
        # the launcher's process becomes srun/torchrun/python: signals reach it
        os.execvp(command[0], command)


if __name__ == "__main__":
    main()
