"""lightning-lars: published large-batch ImageNet record runs as Lightning recipes.

The package is built in layers; each imports only the layers below it (tests/unit/test_layers.py checks):

    core < config < schedules < optim < models < data < parallel < recipe < runtime < report < callbacks
         < training < the entry points here (train.py, check.py, recipe_card.py)

``callbacks`` is the top-level ``callbacks/`` folder, installed as ``lightning_lars.callbacks``.
"""

from pathlib import Path

__version__ = "0.1.0"

# Run from a clone's root, Python finds this source folder before any installed copy (the working directory
# comes first on sys.path), and the source folder has no callbacks/: the wheel maps the top-level callbacks/
# into the package (pyproject's package-dir), an editable install through setuptools' finder. Without either,
# the clone's root on this package's path finds ``lightning_lars.callbacks`` where the wheel puts it.
_CLONE_ROOT = Path(__file__).resolve().parent.parent
if (
    not (Path(__file__).parent / "callbacks").is_dir()
    and (_CLONE_ROOT / "callbacks" / "__init__.py").is_file()
):
    __path__.append(str(_CLONE_ROOT))
