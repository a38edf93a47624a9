"""benchmarks/missing_presets.py --also=SHAPE: a shape that is not a preset (group_norm at 2x1280x32x32 for issue 39)
is searched by a device call like a preset, once, until a database holds a current row of its bucket."""

from stored_rows import store_best

from autotune import gpu
from autotune.kernels.norm.group_norm import SPEC


def test_also_adds_a_shape_after_the_presets_until_its_bucket_has_a_row(benchmark_script, capsys, tmp_path):
    main = benchmark_script("missing_presets").main
    gpu_name = gpu.current_gpu().name
    db = tmp_path / "rows.sqlite"
    main("group_norm", "fp32", gpu_name, str(db), "--also=2x1280x32x32,groups=32,activation=silu")
    shapes = capsys.readouterr().out.split()
    assert shapes[-2:] == ["--shape", "2x1280x32x32,activation=silu"] and len(shapes) == 8  # three presets first
    third = SPEC.parse_shape("2x1280x32x32,groups=32,activation=silu")
    store_best(db, SPEC, SPEC.bucket(third), dict(SPEC.space.default))
    main("group_norm", "fp32", gpu_name, str(db), "--also=2x1280x32x32,groups=32,activation=silu")
    assert "2x1280x32x32" not in capsys.readouterr().out
