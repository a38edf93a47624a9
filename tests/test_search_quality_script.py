"""benchmarks/search_quality.py's live studies save the table after every round of measurements, so a device
call cut short mid-shape keeps what it measured and the next call goes on from there."""

import torch

import autotune


def test_live_studies_hand_the_table_to_saved_after_every_round(benchmark_script):
    script, spec = benchmark_script("search_quality"), autotune.get("vector_add")
    table: dict = {}
    measurer = script.Measurer(spec, spec.parse_shape("3000"), torch.float32, "timed", 4, None, table, deadline=None)
    saved_sizes: list[int] = []
    runs = script.run_studies(
        measurer, ["random"], seeds=1, budget=4, batch=2, saved=lambda: saved_sizes.append(len(table))
    )
    assert len(saved_sizes) >= 2  # one save per round, not one at the end
    assert saved_sizes == sorted(saved_sizes) and saved_sizes[0] > 0
    assert saved_sizes[-1] == len(table) and len(runs["random:0"]) == 4
