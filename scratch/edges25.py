"""The gate's first check, on the timed problem and every bucket edge, for one config: which fails and why."""
import json, sys
import autotune
from autotune.verify import ReferenceCache, outputs_like, compare
from autotune.spec import dtype_from_name
spec = autotune.get(sys.argv[1]); dt = dtype_from_name(sys.argv[3]); config = json.loads(sys.argv[4])
problem = spec.parse_shape(sys.argv[2])
cache = ReferenceCache()
for p in spec.edges_for(problem):
    if spec.space.rejects(config, p):
        print("rejects", {k: v for k, v in p.items() if k != "dtype"}); continue
    inputs, base, ref = cache.get(spec, p, dt, 0)
    out = outputs_like(base)
    spec.launch(inputs, config, out)
    outs = out if isinstance(out, tuple) else (out,)
    for i, (o, r, b) in enumerate(zip(outs, ref if isinstance(ref, tuple) else (ref,), base if isinstance(base, tuple) else (base,))):
        err, budget, reason = compare(o, r, b, b.dtype)
        print(json.dumps({k: v for k, v in p.items()}, default=str)[:200], "out", i, "err", err, "budget", budget, reason, flush=True)
