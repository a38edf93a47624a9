"""Why a search's evaluate phase grew with kernel_ms: wall seconds of time_ms, kernel_ms, and a capture without
torch.cuda.graph's synchronize/gc/empty_cache, on layer_norm 2048x4096+res; then a profile of one kernel_ms."""
import autotune  # noqa: F401
import cProfile, pstats, time
import torch
from autotune import bench, registry
from autotune.verify import ReferenceCache, outputs_like

DT = torch.bfloat16
TIMING = {"warmup_ms": 25.0, "rep_ms": 100.0, "max_reps": 300}


def raw_graph_ms(fn, **timing):
    fn()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        graph.capture_begin()
        fn()
        graph.capture_end()
    torch.cuda.current_stream().wait_stream(stream)
    return bench.time_ms(graph.replay, **timing)


def main():
    spec = registry.get("layer_norm")
    problem = spec.problem_for(spec.parse_shape("2048x4096+res"), DT)
    inputs, base, _ = ReferenceCache().get(spec, problem, DT, 0)
    out = outputs_like(base, None)
    config = {"variant": "single", "BLOCK_N": 4096, "ROWS_PER_PROGRAM": 1, "num_warps": 8, "num_stages": 1}
    call = lambda: spec.launch(inputs, config, out)
    call(); torch.cuda.synchronize()
    for name, f in [("time_ms", bench.time_ms), ("kernel_ms", bench.kernel_ms), ("raw graph", raw_graph_ms)]:
        for _ in range(3):
            t = time.perf_counter()
            ms = f(call, **TIMING)
            print(f"{name}: {ms*1000:.1f} us in {time.perf_counter() - t:.3f} s wall", flush=True)
    prof = cProfile.Profile()
    prof.enable()
    bench.kernel_ms(call, **TIMING)
    prof.disable()
    pstats.Stats(prof).sort_stats("cumulative").print_stats(18)


if __name__ == "__main__":
    main()
