"""softmax along one dim: one read and one write of each row that fits on chip, an online pass for longer rows;
and its backward, dx = y * (dy - sum(dy * y)), a tuned kernel of its own."""

from autotune.kernels.fused_softmax.softmax import SPEC as SOFTMAX
from autotune.kernels.fused_softmax.softmax_backward import SPEC as SOFTMAX_BACKWARD

SPECS = (SOFTMAX, SOFTMAX_BACKWARD)
