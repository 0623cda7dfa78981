"""lightning-lars: published large-batch ImageNet record runs as Lightning recipes.

The package is built in layers; each imports only the layers below it (tests/unit/test_layers.py checks):

    core < config < schedules < optim < models < data < parallel < recipe < runtime < report < callbacks
         < training < the entry points here (train.py, check.py, wheelhouse.py)

``callbacks`` is the top-level ``callbacks/`` folder, installed as ``lightning_lars.callbacks``.
"""

__version__ = "0.1.0"
