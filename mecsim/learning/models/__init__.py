"""Model zoo: registered architectures, their layers and their forward FLOPs.

Importing this package registers every model in :data:`MODELS`; build one
with :func:`build_model`.
"""

from mecsim.learning.models import cnn, mlp, vision  # noqa: F401  (registers the models)
from mecsim.learning.models.flops import forward_flops_per_sample
from mecsim.learning.models.layers import Layer, layer_nbytes, model_layers
from mecsim.learning.models.registry import (
    MODELS,
    InputShapeError,
    ModelBuilder,
    build_model,
    image_shape,
)

__all__ = [
    "MODELS",
    "InputShapeError",
    "Layer",
    "ModelBuilder",
    "build_model",
    "forward_flops_per_sample",
    "image_shape",
    "layer_nbytes",
    "model_layers",
]
