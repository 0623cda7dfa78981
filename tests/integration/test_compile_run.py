"""``model.compile=default`` through the real entry point: the demo at toy scale, 2 steps on CPU, compiled by
torch's inductor (the oracle that it compiled: inductor's own cache folder fills)."""

import re

import pytest
from helpers import TRAIN, entry_point_env, run

pytestmark = pytest.mark.slow


@pytest.mark.demo_data(train_per_class=20, val_per_class=4)
def test_a_compiled_toy_run_finishes(data_dir, tmp_path):
    cache = tmp_path / "inductor"
    done = run(
        [
            *TRAIN,
            "recipe=demo",
            "debug=toy",
            "model.compile=default",
            "trainer.max_steps=2",
            "data.resolution=16",
            "trainer.limit_val_batches=1",
            "~logger",
            f"paths.data_dir={data_dir}",
            f"paths.log_dir={tmp_path / 'logs'}",
        ],
        cwd=tmp_path,
        env=entry_point_env(TORCHINDUCTOR_CACHE_DIR=str(cache)),
        timeout=1200,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert re.search(r"optimizer steps +2 ", out), out[-3000:]
    assert list((tmp_path / "logs").glob("**/results.json"))
    assert any(cache.rglob("*.py")), "inductor wrote no kernels: the model ran eager"
