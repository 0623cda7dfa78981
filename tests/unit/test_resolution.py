"""Progressive resizing: resolution at named epochs (ffcv-imagenet's schedule) and config validation."""

import pytest

from lightning_lars.core.errors import UserError
from lightning_lars.data.resolution import ResolutionSchedule, resolution_at, resolution_schedule

# ffcv-imagenet rn50_88_epochs.yaml: min_res 160, max_res 192, start_ramp 65, end_ramp 76
FFCV_RN50_88 = {"start": 160, "end": 192, "start_ramp_epoch": 65, "end_ramp_epoch": 76}


@pytest.mark.parametrize(
    ("epoch", "expected"),
    [
        (0, 160),  # before the ramp
        (65, 160),  # ramp start
        (70, 160),  # 160 + 5/11 * 32 = 174.5 px rounds down to a multiple of 32
        (71, 192),  # 160 + 6/11 * 32 = 177.5 px rounds up
        (76, 192),  # ramp end
        (87, 192),  # last of 88 epochs
    ],
)
def test_ffcv_rn50_schedule_at_named_epochs(epoch, expected):
    assert resolution_at(epoch, **FFCV_RN50_88) == expected


def test_wide_ramp_steps_through_multiples_of_32():
    schedule = resolution_schedule({"start": 128, "end": 256, "start_ramp_epoch": 0, "end_ramp_epoch": 4})
    assert [schedule.at_epoch(epoch) for epoch in range(6)] == [128, 160, 192, 224, 256, 256]
    assert schedule.is_progressive


def test_custom_step_rounds_to_that_step():
    # 100 + 1/3 * 60 = 120 px; with step 16 that is 7.5 steps -> 8 (round half to even) -> 128 px
    assert resolution_at(1, start=100, end=160, start_ramp_epoch=0, end_ramp_epoch=3, step=16) == 128


def test_int_is_a_fixed_resolution():
    schedule = resolution_schedule(176)
    assert not schedule.is_progressive
    assert {schedule.at_epoch(epoch) for epoch in (0, 10, 1000)} == {176}


@pytest.mark.parametrize(
    "spec",
    [
        {"start": 192, "end": 160, "start_ramp_epoch": 0, "end_ramp_epoch": 2},  # shrinking
        {"start": 160, "end": 192, "start_ramp_epoch": 5, "end_ramp_epoch": 5},  # empty ramp
        {"start": 160, "end": 192, "end_ramp": 5},  # misspelt key
        {"end": 192},
        "224",
        0,
    ],
)
def test_bad_specs_are_user_errors(spec):
    with pytest.raises(UserError):
        resolution_schedule(spec)


def test_schedule_object_passes_through():
    schedule = ResolutionSchedule(start=160, end=192, start_ramp_epoch=1, end_ramp_epoch=3)
    assert resolution_schedule(schedule) is schedule
