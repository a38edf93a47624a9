"""The normalizations: layer_norm and rms_norm over the trailing dims (optionally with a residual add), and
group_norm with a fused activation; each with a backward kernel of its own."""

from autotune.kernels.norm.group_norm import SPEC as GROUP_NORM
from autotune.kernels.norm.group_norm_backward import SPEC as GROUP_NORM_BACKWARD
from autotune.kernels.norm.layer_norm import LAYER_NORM, RMS_NORM
from autotune.kernels.norm.layer_norm_backward import LAYER_NORM_BACKWARD, RMS_NORM_BACKWARD

SPECS = (LAYER_NORM, LAYER_NORM_BACKWARD, RMS_NORM, RMS_NORM_BACKWARD, GROUP_NORM, GROUP_NORM_BACKWARD)
