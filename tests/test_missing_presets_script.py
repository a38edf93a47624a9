"""benchmarks/missing_presets.py (what a device call's `search_missing` searches): each preset's --shape text
parses back to that preset, so the search times the preset itself, activation and residual included."""

import pytest

import autotune
from autotune.runtime import registry


@pytest.mark.parametrize("kernel", registry.names())
def test_every_preset_label_parses_back_to_the_preset(kernel, benchmark_script):
    spec, label = autotune.get(kernel), benchmark_script("missing_presets").label
    for preset in spec.presets:
        assert spec.parse_shape(label(spec, preset)) == preset


def test_group_norm_and_norm_presets_keep_their_activation_and_residual(benchmark_script):
    label = benchmark_script("missing_presets").label
    group_norm, layer_norm = autotune.get("group_norm"), autotune.get("layer_norm")
    assert label(group_norm, group_norm.presets[2]) == "8x512x64x64,activation=silu,layout=channels_last"
    assert label(layer_norm, layer_norm.presets[0]) == "8192x4096+res"


def test_rows_of_an_earlier_space_the_kernel_extends_still_count(benchmark_script, capsys):
    # The H100's flash_attn_backward rows are mostly of the space before the Gluon engine (`extends`): still served,
    # so not missing; a GPU never tuned misses every bucket.
    script, shipped = benchmark_script("missing_presets"), str(autotune.db.shipped_path())
    script.main("flash_attn_backward", "bf16", "H100", shipped)
    assert capsys.readouterr().out.strip() == ""
    script.main("flash_attn_backward", "fp16", "H20", shipped)
    spec = autotune.get("flash_attn_backward")
    assert capsys.readouterr().out.count("--shape") == len({spec.bucket(p) for p in spec.presets})
