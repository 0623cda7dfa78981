"""benchmarks/profile_steps.py's summary on torch.profiler's own event objects with known spans (microseconds)."""

import pytest
from helpers import benchmark_script
from torch.autograd import DeviceType
from torch.autograd.profiler_util import FunctionEvent

profile_steps = benchmark_script("profile_steps")


def event(action: str, start_us: int, end_us: int, device_type=DeviceType.CPU) -> FunctionEvent:
    return FunctionEvent(
        id=start_us,
        name=f"{profile_steps.PROFILED}{action}",
        thread=0,
        start_us=start_us,
        end_us=end_us,
        device_type=device_type,
    )


def test_nested_ranges_count_once_so_the_parts_fill_the_steps_wall_time():
    """Two optimizer steps; the first's closure runs forward and backward, and one of our callback hooks runs
    inside it (as on_before_optimizer_step does). Each moment belongs to the innermost counted range."""
    events = [
        event("[Strategy]SingleDeviceStrategy.optimizer_step", 0, 100),
        event("[LightningModule]Net.training_step", 10, 40),
        event("[Strategy]SingleDeviceStrategy.backward", 40, 80),
        event("[Callback]Ours.on_before_optimizer_step", 85, 95),
        event("[_TrainingEpochLoop].train_dataloader_next", 100, 110),
        event("[Strategy]SingleDeviceStrategy.optimizer_step", 110, 200),
        event("[_TrainingEpochLoop].train_dataloader_next", 200, 230),  # after the last step: outside
    ]
    steps, parts = profile_steps.summarise(events, our_callbacks={"Ours"})
    per_step = {part: ms["host_ms"] * steps for part, ms in parts.items()}  # ms over both steps
    assert steps == 2
    assert per_step == pytest.approx(
        {
            "forward": 0.030,
            "backward": 0.040,
            "our callbacks": 0.010,
            "optimizer": (100 - 30 - 40 - 10 + 90) / 1e3,
            "data": 0.010,
            "idle": 0.0,
            "wall": 0.200,
        }
    )


def test_the_gpu_timelines_copies_of_the_ranges_are_not_counted_again():
    """With CUDA on, torch.profiler gives each named range a second event (device_type CUDA, the same name) on the
    GPU's later timeline; the steps and parts are the host's, counted once."""
    host = [
        event("[Strategy]SingleDeviceStrategy.optimizer_step", 0, 100),
        event("[LightningModule]Net.training_step", 10, 40),
        event("[Strategy]SingleDeviceStrategy.backward", 40, 80),
        event("[Strategy]SingleDeviceStrategy.optimizer_step", 110, 200),
    ]
    on_gpu = [
        event(
            e.name[len(profile_steps.PROFILED) :],
            e.time_range.start + 30,
            e.time_range.end + 50,
            DeviceType.CUDA,
        )
        for e in host
    ]
    assert profile_steps.summarise(host + on_gpu, set()) == profile_steps.summarise(host, set())
    assert profile_steps.summarise(host + on_gpu, set())[0] == 2
