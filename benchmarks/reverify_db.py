"""Re-verify every stored row of this GPU on a fresh seed, with more examples and the bucket's edges.

    python benchmarks/reverify_db.py --db PATH --examples 200 --seed 7 --out benchmarks/results/NAME
"""

from __future__ import annotations

import autotune  # first: picks the Triton interpreter when there is no GPU, before Triton is imported

import argparse
import json
import pathlib
import sys

from tabulate import tabulate

from autotune import gpu
from autotune.db import ConfigStore
from autotune.spec import dtype_from_name
from autotune.verify import verify


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--examples", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    here = gpu.current_gpu().name
    rows, failed = [], 0
    with ConfigStore(args.db, readonly=True) as store:
        stored = store.best_rows(gpu=here)
    for row in stored:
        spec = autotune.get(row.kernel)
        result = verify(spec, row.config, dtype_from_name(row.dtype), examples=args.examples, seed=args.seed,
                        extra_problems=spec.edges_for(row.problem))
        failed += not result.passed
        rows.append({"kernel": row.kernel, "dtype": row.dtype, "bucket": row.bucket, "config": row.config_json,
                     "examples": result.examples, "result": "pass" if result.passed else "FAIL",
                     "failure": result.failure.describe() if result.failure else ""})
    text = f"GPU {here}; {len(rows)} rows; seed {args.seed}; {args.examples} Hypothesis examples + bucket edges each\n\n"
    text += tabulate(rows, headers="keys", tablefmt="github") + "\n"
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text(text)
    out.with_suffix(".json").write_text(json.dumps(rows, indent=1))
    print(text)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
