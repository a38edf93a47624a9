"""Where one stored row's re-verification spends its time: the draws, the compile-ahead, the check.

    python benchmarks/profile_reverify.py --db FILE --kernel softmax --dtype fp16 [--row 0] [--examples 200]

Times each phase of `autotune db verify` for one row (on a copy of the database: nothing is recorded), then
prints cProfile's top functions of the check itself, so a slow row says whether the measuring process still
compiles (Triton's `compile` among the top) or the gate's own work dominates.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import shutil
import tempfile
import time

from autotune.runtime import registry
from autotune.db import ConfigStore
from autotune.engine.precompile import CompilePool, default_workers
from autotune.spec import dtype_from_name
from autotune.gate.verify import draw_problems, verify


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--kernel", required=True)
    parser.add_argument("--dtype", required=True)
    parser.add_argument("--row", type=int, default=0, help="which of the kernel's rows in this dtype (bucket order)")
    parser.add_argument("--examples", type=int, default=200)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--workers", type=int, default=default_workers())
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()

    copy = tempfile.NamedTemporaryFile(suffix=".sqlite", delete=False).name
    shutil.copyfile(args.db, copy)
    store = ConfigStore(copy)
    spec = registry.get(args.kernel)
    rows = sorted((r for r in store.best_rows(kernel=spec.name) if r.dtype == args.dtype and r.source_hash == spec.source_hash),
                  key=lambda r: r.bucket)
    row = rows[args.row]
    config, dtype = spec.space.validate(row.config), dtype_from_name(row.dtype)
    edges = spec.edges_for(row.problem) if row.problem else []
    asked = max(args.examples, row.examples_verified + 1)
    print(f"row: {spec.name} {row.dtype} {row.bucket} config {row.config_json}; {asked} examples, seed {args.seed}")

    with CompilePool(args.workers) as pool:
        started = time.perf_counter()
        drawn = draw_problems(spec, config, dtype, examples=asked, seed=args.seed)
        drew = time.perf_counter() - started
        problems = [spec.problem_for(p, dtype) for p in edges] + drawn
        started = time.perf_counter()
        built = pool.compile(spec, problems, dtype, [config])
        compiled = time.perf_counter() - started
    print(f"draw_problems: {drew:.1f} s for {len(drawn)} problems (+{len(edges)} edges)")
    print(f"compile-ahead: {compiled:.1f} s with {args.workers} workers, built for all: {built == 1}")

    profile = cProfile.Profile()
    started = time.perf_counter()
    profile.enable()
    result = verify(spec, config, dtype, examples=asked, seed=args.seed, extra_problems=edges, extra_first=False)
    profile.disable()
    print(f"verify: {time.perf_counter() - started:.1f} s, {result.examples} problems, passed {result.passed}")
    for order in ("tottime", "cumulative"):
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats(order).print_stats(args.top)
        print(text.getvalue())


if __name__ == "__main__":
    main()
