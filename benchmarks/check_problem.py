"""One config on one problem, output by output: error against float64, budget, and the worst element
(ours, the reference's, PyTorch's). For a failure the gate reported, on the machine that reported it:

    python benchmarks/check_problem.py KERNEL DTYPE 'PROBLEM_JSON' ['CONFIG_JSON' (default: the space's default)]
"""
import sys, json
import autotune
from autotune.gate.verify import ReferenceCache, outputs_like, compare
from autotune.spec import dtype_from_name
name, dt, problem = sys.argv[1], dtype_from_name(sys.argv[2]), json.loads(sys.argv[3])
spec = autotune.get(name)
config = json.loads(sys.argv[4]) if len(sys.argv) > 4 else dict(spec.space.default)
inputs, base, ref = ReferenceCache().get(spec, problem, dt, 0)
out = outputs_like(base)
spec.launch(inputs, config, out)
outs = out if isinstance(out, tuple) else (out,)
bases = base if isinstance(base, tuple) else (base,)
refs = ref if isinstance(ref, tuple) else (ref,)
for i, (o, r, b) in enumerate(zip(outs, refs, bases)):
    err, budget, reason = compare(o, r, b, b.dtype)
    d = (o.double() - r.double()).abs().reshape(-1)
    j = int(d.argmax()) if d.numel() else 0
    print(i, tuple(o.shape), o.dtype, "err", err, "budget", budget, reason, "| worst at", j,
          "out", o.reshape(-1)[j].item() if d.numel() else None, "ref", r.reshape(-1)[j].item() if d.numel() else None,
          "torch", b.reshape(-1)[j].item() if d.numel() else None, "max|ref|", r.abs().max().item() if d.numel() else None)
