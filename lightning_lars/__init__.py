"""lightning-lars: published large-batch ImageNet record runs as Lightning recipes."""

__version__ = "0.1.0"
