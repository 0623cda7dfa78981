"""Where a training step's time goes: N steps of a recipe under Lightning's PyTorchProfiler, summed by part.

    python benchmarks/profile_steps.py [--steps 20] [--skip 20] [--json FILE] -- recipe=NAME key=value ...

The run is built by the project's own stack (Hydra compose of the overrides, ``training.run.build``), with
``trainer.profiler`` set to Lightning's ``PyTorchProfiler`` (torch.profiler underneath) on a schedule that
waits ``--skip`` steps (warm-up, compilation), then records ``--steps``. Lightning names each action it
profiles; their events are summed per step into: forward (``training_step``), backward, optimizer (the
optimizer step less the forward and backward its closure runs), data (the loader's next batch), our callbacks
(``[Callback]`` hooks of this project's classes), Lightning's other callbacks. Each row gives host ms and,
on CUDA, device ms (the kernels launched inside it); "idle" is the wall time of the recorded steps that no
device kernel filled (on a CPU: that no recorded part filled). The trace itself is not written (tens of MB).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import defaultdict

PROFILED = "[pl][profile]"
PARTS = {  # Lightning's action name (after PROFILED) -> part
    "training_step": "forward",
    "backward": "backward",
    "optimizer_step": "optimizer",
    "train_dataloader_next": "data",
}


def profiler_overrides(skip: int, steps: int, folder: str) -> list[str]:
    """``trainer.profiler`` as Lightning's PyTorchProfiler on torch.profiler's schedule, built by Hydra."""
    prefix = "+trainer.profiler"
    return [
        f"{prefix}._target_=lightning.pytorch.profilers.PyTorchProfiler",
        f"{prefix}.export_to_chrome=false",
        f"{prefix}.record_module_names=false",
        f"{prefix}.acc_events=true",  # torch.profiler keeps the recorded cycle's events after it ends
        f"{prefix}.dirpath={folder}",  # Lightning's own operator table goes to a file there, not the console
        f"{prefix}.filename=operators",
        f"{prefix}.schedule._target_=torch.profiler.schedule",
        f"{prefix}.schedule.wait={max(skip - 1, 0)}",
        f"{prefix}.schedule.warmup=1",
        f"{prefix}.schedule.active={steps}",
        f"{prefix}.schedule.repeat=1",
    ]


def compose_profiled(overrides: list[str], skip: int, steps: int, folder: str):
    """The run's config as the entry point composes ``overrides`` (the same checks), with the profiler and, unless
    given, enough steps and ``folder`` as the run's output folder."""
    from lightning_lars.config.compose import compose_command_line

    overrides = [*overrides, *profiler_overrides(skip, steps, folder)]
    if not any(o.startswith("trainer.max_steps=") for o in overrides):
        overrides.append(f"trainer.max_steps={skip + steps + 1}")
    if not any(o.startswith("paths.output_dir=") for o in overrides):
        overrides.append(f"paths.output_dir={folder}")
    return compose_command_line(overrides)


def part_of(action: str, our_callbacks: set[str]) -> str | None:
    """The part an action belongs to, or None (loops and hooks that only contain other actions)."""
    if action.startswith("[Callback]"):
        owner = action[len("[Callback]") :].split(".")[0]
        return "our callbacks" if owner in our_callbacks else "Lightning's callbacks"
    for method, part in PARTS.items():
        if action.endswith(f".{method}"):  # not on_before_optimizer_step and the like
            return part
    return None


def summarise(events, our_callbacks: set[str]) -> tuple[int, dict[str, dict[str, float]]]:
    """(steps, ms per step per part, host and device) from the profiler's events. The recording window cuts
    through a step (a backward can be recorded without the optimizer step that began before it), so only
    events inside the span from the first recorded optimizer step's start to the last one's end count. Ranges
    nest (the optimizer step's closure runs forward and backward; a callback hook such as
    ``on_before_optimizer_step`` runs inside the step): each part gets its ranges' own time, less the time of the
    counted ranges directly inside them, so that every moment is counted once."""
    # with CUDA on, the profiler gives each range a second event on the GPU's timeline (device_type CUDA, same
    # name): the host's ranges are the steps, each once, as torch's own summaries take them
    ours = [e for e in events if e.name.startswith(PROFILED) and e.device_type.name == "CPU"]
    steps = [e for e in ours if part_of(e.name[len(PROFILED) :], our_callbacks) == "optimizer"]
    if not steps:
        return 0, {}
    first, last = min(e.time_range.start for e in steps), max(e.time_range.end for e in steps)
    counted = []  # (start, end, part, device us) of the ranges inside the window that belong to a part
    for event in ours:
        part = part_of(event.name[len(PROFILED) :], our_callbacks)
        if part is not None and first <= event.time_range.start and event.time_range.end <= last:
            span = event.time_range
            counted.append((span.start, span.end, part, getattr(event, "device_time_total", 0.0)))
    host, device = defaultdict(float), defaultdict(float)
    enclosing: list[tuple] = []  # the ranges open at the current start, outermost first
    for start, end, part, device_us in sorted(counted, key=lambda r: (r[0], -r[1])):
        while enclosing and enclosing[-1][1] <= start:
            enclosing.pop()
        host[part] += (end - start) / 1e3  # the range's own span, not its threads' sum
        device[part] += device_us / 1e3
        if enclosing:  # its time is its own, not also its parent's
            parent = enclosing[-1][2]
            host[parent] -= (end - start) / 1e3
            device[parent] -= device_us / 1e3
        enclosing.append((start, end, part))
    wall = (last - first) / 1e3
    filled = sum(device.values()) if any(device.values()) else sum(host.values())
    count = len(steps)
    table = {part: {"host_ms": host[part] / count, "device_ms": device[part] / count} for part in host}
    table["idle"] = {"host_ms": max(wall - filled, 0.0) / count, "device_ms": max(wall - filled, 0.0) / count}
    table["wall"] = {"host_ms": wall / count, "device_ms": wall / count}
    return count, table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="steps recorded (default: 20)")
    parser.add_argument("--skip", type=int, default=20, help="steps before them, not recorded (default: 20)")
    parser.add_argument("--json", help="also write the table here")
    parser.add_argument("overrides", nargs="*", help="the run's Hydra overrides, after --")
    args = parser.parse_args(argv)
    import lightning as L

    from lightning_lars.training import run

    with tempfile.TemporaryDirectory() as folder:  # the run folder Hydra would have made
        cfg = compose_profiled(args.overrides, args.skip, args.steps, folder)
        L.seed_everything(0, verbose=False)
        trainer, module, datamodule, _ = run.build(cfg)
        trainer.fit(module, datamodule=datamodule)
    ours = {type(c).__name__ for c in trainer.callbacks if type(c).__module__.startswith("lightning_lars")}
    steps, table = summarise(trainer.profiler.function_events or [], ours)
    print(
        f"\n| {steps} whole steps recorded after {args.skip} | host ms/step | device ms/step |\n|---|---|---|"
    )
    for part, ms in table.items():
        print(f"| {part} | {ms['host_ms']:.2f} | {ms['device_ms']:.2f} |")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(table, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
