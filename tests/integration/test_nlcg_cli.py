"""A bad NLCG hyperparameter through the real entry point: exit code 2 and one `error:` line naming the key,
no traceback (the optimizer is built at `configure_optimizers`, so the run gets that far on the demo data)."""

from __future__ import annotations

import pytest
from resume_runs import make_demo_data
from test_bad_input import entry_point

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def shared(tmp_path_factory):
    return tmp_path_factory.getbasetemp() / "resume_runs"  # the demo data test_bad_input.py makes, reused


def test_bad_nlcg_value_exits_2_with_one_error_line(shared):
    make_demo_data(shared)
    done = entry_point("recipe=nlcg_65k", "debug=toy", "optimizer.line_search_period=0", tmp=shared)
    assert done.returncode == 2 and "Traceback" not in done.stdout + done.stderr, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        done.stderr.strip().splitlines()[-1]
    ]  # start-up notices may precede it; it ends the run
    assert "line_search_period=0" in errors[0] and "integer >= 1" in errors[0]
