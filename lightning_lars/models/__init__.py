"""Models timm does not have, registered with ``timm.register_model`` on import.

Importing this package (the module does) makes ``timm.create_model("alexnet_bn")`` work like any timm name.
"""

from lightning_lars.models import alexnet_bn, resnet_v1  # noqa: F401  (register with timm)
