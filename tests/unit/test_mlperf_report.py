"""Reading an MLPerf result log: a damaged line stops with its file and line number (the checkers would stop
with a traceback, or skip it)."""

import json
import re

import pytest

from lightning_lars.core.errors import UserError
from lightning_lars.report import mlperf


def event(key, **metadata):
    return ":::MLLOG " + json.dumps({"namespace": "", "time_ms": 1, "event_type": "POINT_IN_TIME", "key": key,
                                     "value": None, "metadata": metadata})  # fmt: skip


def test_events_are_read_in_order_and_other_lines_are_skipped(tmp_path):
    log = tmp_path / "mlperf.log"
    log.write_text(f"{event('init_start')}\nsome other output\n{event('eval_accuracy', epoch_num=3)}\n")
    assert [(e["key"], e["metadata"]) for e in mlperf.read_events(log)] == [
        ("init_start", {}),
        ("eval_accuracy", {"epoch_num": 3}),
    ]


@pytest.mark.parametrize(
    "damaged",
    [event("run_stop")[:40], ":::MLLOG " + json.dumps({"value": 1}), ":::MLLOG not json"],
    ids=["cut-off", "no-key", "not-json"],
)
def test_a_damaged_line_is_named(tmp_path, damaged):
    log = tmp_path / "mlperf.log"
    log.write_text(f"{event('init_start')}\n{event('run_start')}\n{damaged}\n")
    with pytest.raises(UserError, match=re.escape(f"{log}:3: not an MLPerf log line")) as error:
        mlperf.read_events(log)
    assert "\n" not in str(error.value) and "remove or repair that line" in str(error.value)


def test_rounds_before_v1_are_judged_against_the_v1_rcps():
    assert mlperf.rcp_ruleset("1.0.0") == ("1.0.0", "")
    assert mlperf.rcp_ruleset("4.0.0") == ("4.0.0", "")
    ruleset, note = mlperf.rcp_ruleset("0.7.0")
    assert ruleset == "1.0.0" and "no RCPs" in note
