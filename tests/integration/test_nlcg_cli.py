"""A bad NLCG hyperparameter through the real entry point: exit code 2 and one `error:` line naming the key,
no traceback (the optimizer is built at `configure_optimizers`, so the run gets that far on the demo data)."""

from __future__ import annotations

import pytest
from resume_runs import entry_point, make_demo_data

pytestmark = pytest.mark.slow


def test_bad_nlcg_value_exits_2_with_one_error_line(shared_runs):
    make_demo_data(shared_runs)
    done = entry_point("recipe=nlcg_65k", "debug=toy", "optimizer.line_search_period=0", tmp=shared_runs)
    assert done.returncode == 2 and "Traceback" not in done.stdout + done.stderr, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        done.stderr.strip().splitlines()[-1]
    ]  # start-up notices may precede it; it ends the run
    assert "line_search_period=0" in errors[0] and "integer >= 1" in errors[0]
