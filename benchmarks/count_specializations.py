"""How many Triton compilations one config's gate needs: every kernel launch of the default config on the
problems a search trial verifies (the timed preset's bucket edges and the Hypothesis draws), sorted into
Triton's specialization classes (each int argument 1, a multiple of 16 or neither; each pointer's dtype and
16-byte alignment; the constexprs). Nothing runs: the launches are captured. CPU or GPU.

    python benchmarks/count_specializations.py flash_attn_backward --examples 20

On 2026-11-23 (CPU): flash_attn_backward 24 problems -> 42 compilations (query-side kernel 28, dk/dv 14);
flash_attn 18; softmax 33 problems -> 18. Leaving Nq, Nk and the head counts unspecialized would take the backward to 36 only.
"""

from __future__ import annotations

import autotune  # first: picks the Triton interpreter when there is no GPU, before Triton is imported
import argparse
import collections

import torch
from triton.runtime.jit import KernelInterface

from autotune import gpu
from autotune.spec import dtype_from_name
from autotune.gate.verify import draw_problems, outputs_like


def specialization(value: object) -> object:
    """The class Triton compiles a launch argument for."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int):
        return ("int", "1" if value == 1 else "16k" if value % 16 == 0 else "other", value >= 2**31)
    if isinstance(value, torch.Tensor):
        return ("ptr", str(value.dtype), value.data_ptr() % 16 == 0)
    if isinstance(value, float):
        return "float"
    return ("constexpr", repr(value))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kernel")
    parser.add_argument("--dtype", default="fp16")
    parser.add_argument("--examples", type=int, default=20, help="Hypothesis problems per trial (search --examples)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    spec, dtype = autotune.get(args.kernel), dtype_from_name(args.dtype)
    compiles: dict[str, set] = collections.defaultdict(set)

    def capture(kernel, grid):
        def launch(*call_args, **kwargs):
            key = tuple(specialization(a) for a in call_args) + tuple(sorted((k, repr(v)) for k, v in kwargs.items()))
            compiles[kernel.fn.__name__].add(key)
        return launch

    KernelInterface.__getitem__ = capture
    timed = spec.problem_for(spec.presets[len(spec.presets) // 2], dtype)
    problems = [spec.problem_for(p, dtype) for p in spec.edges_for(timed)]
    problems += draw_problems(spec, spec.space.default, dtype, examples=args.examples, seed=args.seed)
    for problem in problems:
        inputs = spec.make_inputs(problem, dtype, gpu.device(), 0)
        spec.launch(inputs, dict(spec.space.default), outputs_like(spec.baseline(inputs), None))
    counts = {name: len(keys) for name, keys in sorted(compiles.items())}
    print(f"{spec.name} {args.dtype}: {len(problems)} problems -> {sum(counts.values())} compilations {counts}")


if __name__ == "__main__":
    main()
