"""Weight-update sharding (Kumar et al. 2019) on 2 and 4 gloo processes: every weight equals the unsharded
LARS/LAMB step bitwise over 6 steps with a changing LR, the consolidated checkpoint equals the unsharded
optimizer's state, and a fresh sharded optimizer resumes from it."""

import pytest
import torch.multiprocessing as mp
from helpers import free_port
from sharded_update_workers import compare

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("world_size", [2, 4])
def test_sharded_update_equals_unsharded_and_round_trips_its_state(world_size):
    mp.spawn(compare, args=(world_size, free_port()), nprocs=world_size, join=True)
