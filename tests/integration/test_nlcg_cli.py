"""A bad NLCG hyperparameter through the real entry point: exit code 2 and one `error:` line naming the key,
no traceback (the optimizer is built at `configure_optimizers`, so the run gets that far on the demo data)."""

from __future__ import annotations

import pytest
from helpers import assert_one_line_error
from resume_runs import entry_point, make_demo_data

pytestmark = pytest.mark.slow


def test_bad_nlcg_value_exits_2_with_one_error_line(shared_runs):
    make_demo_data(shared_runs)
    done = entry_point("recipe=nlcg_65k", "debug=toy", "optimizer.line_search_period=0", tmp=shared_runs)
    # start-up notices may precede it; it ends the run
    assert_one_line_error(done, "line_search_period=0", "integer >= 1", alone=False)
