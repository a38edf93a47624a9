"""A Hopper-native (sm_90a) GEMM written in Gluon: c = a @ b, and the gated GEMM of gated_mlp, h = act(x @ w_gate.T)
* (x @ w_up.T) (optionally storing the pre-activations [g | u] that gated_mlp's backward reads), half inputs,
float32 accumulation, one rounding on the store.

Persistent and warp-specialized: one program an SM walks the output tiles in grouped order (GROUP_M row-tiles
run down before moving right, so the programs running together share operand blocks in L2); a producer warp
streams the A and B blocks of each tile by TMA into a NUM_STAGES-deep shared-memory ring guarded by mbarriers;
one or two consumer warpgroups issue asynchronous wgmmas from the ring, keep one group in flight, release each
stage as its wgmma retires, and store their tile through shared memory by TMA. The store of one tile drains
while the next tile's mainloop runs (waited only before its buffer is written again), and the producer fills
the ring for the next tile during an epilogue. Schedules and config keys: search_spaces/hopper_gemm_config.py.

Operands may be row-major or transposed (a column-major a = a (K, M) view's transpose, b as linear's weight.T):
the TMA unit reads the transposed ones as (K, M) and (N, K) blocks and wgmma reads those shared-memory tiles
transposed, so the backward's products (dy @ w, dy.T @ x) need no copies. Written against Triton 3.6's Gluon.
`supported` and `gated_supported` say why a call cannot run here; importing this module never fails.
"""

from __future__ import annotations

import torch
import triton

from autotune import gpu
from autotune.kernels.common import launch as launch_
from autotune.kernels.common.grid import cdiv
from autotune.kernels.common.tma_layouts import nvmma_layout
from autotune.search_spaces import hopper_gemm_config as cfg

try:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        mbarrier,
        tma,
        warpgroup_mma,
        warpgroup_mma_wait,
    )
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    GLUON_MISSING: str | None = None
    _jit = gluon.jit
except ImportError as error:  # an older Triton, or one built without Gluon
    GLUON_MISSING = f"Triton {triton.__version__} has no Gluon for Hopper ({error})"

    def _jit(fn=None, **options):  # the kernels below are then never compiled
        return fn if fn is not None else (lambda f: f)

DTYPES = (torch.bfloat16, torch.float16)
ACTIVATIONS = {"none": 0, "relu": 1, "gelu": 2, "gelu_tanh": 3, "silu": 4}
"""gemm.py's numbering and formulas."""
_ALIGNMENT = 16
"""Bytes TMA needs a base address and every non-unit stride aligned to."""


@_jit
def _activate(z, ACTIVATION: gl.constexpr):
    """gemm.activate's formulas on a float32 tile."""
    if ACTIVATION == 1:
        y = gl.where(z < 0.0, 0.0, z)
    elif ACTIVATION == 2:
        y = 0.5 * z * (1.0 + gl.erf(z * 0.7071067811865476))
    elif ACTIVATION == 3:
        y = z / (1.0 + gl.exp(-1.5957691216057308 * (z + 0.044715 * z * z * z)))
    elif ACTIVATION == 4:
        y = z / (1.0 + gl.exp(-z))
    else:
        y = z
    return y


@_jit
def _tile_origin(tile, M, N, TILE_M: gl.constexpr, BLOCK_N: gl.constexpr, GROUP_M: gl.constexpr):
    """(first row, first column) of output tile `tile`, in gemm.tile_position's grouped order."""
    tiles_m = gl.cdiv(M, TILE_M)
    per_group = GROUP_M * gl.cdiv(N, BLOCK_N)
    first_m = (tile // per_group) * GROUP_M
    group_rows = gl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (tile % per_group) % group_rows
    pid_n = (tile % per_group) // group_rows
    return pid_m * TILE_M, pid_n * BLOCK_N


@_jit
def _loader(a_desc, b_desc, u_desc, a_bufs, b_bufs, ready, empty, M, N, K,
            BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr,
            NUM_STAGES: gl.constexpr, A_PARTS: gl.constexpr, A_T: gl.constexpr, B_T: gl.constexpr,
            GATED: gl.constexpr):
    """The producer warp: for each of this program's tiles, each step of K, the A block(s) and B block(s) into the
    next ring stage. Past an edge of a matrix TMA reads zeros, which add nothing to a product."""
    B_PARTS: gl.constexpr = 2 if GATED else 1
    TILE_M: gl.constexpr = BLOCK_M * A_PARTS
    n_tiles = gl.cdiv(M, TILE_M) * gl.cdiv(N, BLOCK_N)
    k_steps = gl.cdiv(K, BLOCK_K)
    nbytes: gl.constexpr = A_PARTS * a_desc.block_type.nbytes + B_PARTS * b_desc.block_type.nbytes
    count = 0
    for tile in range(gl.program_id(0), n_tiles, gl.num_programs(0)):
        row, col = _tile_origin(tile, M, N, TILE_M, BLOCK_N, GROUP_M)
        for step in range(k_steps):
            stage = count % NUM_STAGES
            mbarrier.wait(empty.index(stage), ((count // NUM_STAGES) & 1) ^ 1)  # a fresh barrier passes parity 1
            bar = ready.index(stage)
            mbarrier.expect(bar, nbytes)
            k = step * BLOCK_K
            for part in gl.static_range(A_PARTS):
                if A_T:
                    tma.async_copy_global_to_shared(a_desc, [k, row + part * BLOCK_M], bar,
                                                    a_bufs.index(stage * A_PARTS + part))
                else:
                    tma.async_copy_global_to_shared(a_desc, [row + part * BLOCK_M, k], bar,
                                                    a_bufs.index(stage * A_PARTS + part))
            if B_T:
                tma.async_copy_global_to_shared(b_desc, [col, k], bar, b_bufs.index(stage * B_PARTS))
                if GATED:
                    tma.async_copy_global_to_shared(u_desc, [col, k], bar, b_bufs.index(stage * B_PARTS + 1))
            else:
                tma.async_copy_global_to_shared(b_desc, [k, col], bar, b_bufs.index(stage * B_PARTS))
                if GATED:
                    tma.async_copy_global_to_shared(u_desc, [k, col], bar, b_bufs.index(stage * B_PARTS + 1))
            count += 1


@_jit
def _store_tile(out_desc, c_buf, values, row, col):
    """values (rounded) into the consumer's epilogue buffer, then by TMA to (row, col) of the output, which clips
    past its edges. The buffer's previous store must have been read first."""
    tma.store_wait(0)
    c_buf.store(values.to(out_desc.dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(out_desc, [row, col], c_buf)


@_jit
def _consumer(a_bufs, b_bufs, ready, empty, turns, c_desc, g_desc, uo_desc, c_bufs, M, N, K,
              CONSUMER: gl.constexpr, NUM_CONSUMERS: gl.constexpr, PINGPONG: gl.constexpr, BLOCK_M: gl.constexpr,
              BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr, NUM_STAGES: gl.constexpr,
              A_T: gl.constexpr, B_T: gl.constexpr, GATED: gl.constexpr, ACTIVATION: gl.constexpr,
              STORE_GU: gl.constexpr):
    """One consumer warpgroup: its BLOCK_M x BLOCK_N part of each tile it takes (cooperative: the CONSUMER-th
    rows of every tile of the program; pingpong: every NUM_CONSUMERS-th tile whole), wgmma over the ring, then
    the epilogue. Pingpong consumers take turns through their mainloops (`turns`): the ring's parity waits tell
    apart only adjacent fills of a stage, so a consumer may wait for a block only once every earlier block has
    been waited for (its own, or the other consumer's previous tile); the turns also keep one consumer's
    wgmmas from competing with the other's, whose epilogue runs meanwhile."""
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                         instr_shape=[16, BLOCK_N, 16])
    A_PARTS: gl.constexpr = 1 if PINGPONG else NUM_CONSUMERS
    B_PARTS: gl.constexpr = 2 if GATED else 1
    PART: gl.constexpr = 0 if PINGPONG else CONSUMER
    TAKES: gl.constexpr = NUM_CONSUMERS if PINGPONG else 1  # every TAKES-th tile of the program is this one's
    FIRST: gl.constexpr = CONSUMER if PINGPONG else 0
    TILE_M: gl.constexpr = BLOCK_M * A_PARTS
    n_tiles = gl.cdiv(M, TILE_M) * gl.cdiv(N, BLOCK_N)
    k_steps = gl.cdiv(K, BLOCK_K)
    programs = gl.num_programs(0)
    c_buf = c_bufs.index(CONSUMER)
    count = FIRST * k_steps  # the ring position of this consumer's first block: the loader's order
    if PINGPONG and CONSUMER == 1:
        mbarrier.arrive(turns.index(0))  # consumer 0 goes first
    turn = 0
    for tile in range(gl.program_id(0) + FIRST * programs, n_tiles, TAKES * programs):
        row, col = _tile_origin(tile, M, N, TILE_M, BLOCK_N, GROUP_M)
        if PINGPONG:
            mbarrier.wait(turns.index(CONSUMER), turn & 1)
        row += PART * BLOCK_M
        acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, acc_layout)
        up = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, acc_layout)
        for step in range(k_steps):
            stage = count % NUM_STAGES
            mbarrier.wait(ready.index(stage), (count // NUM_STAGES) & 1)
            a = a_bufs.index(stage * A_PARTS + PART)
            if A_T:
                a = a.permute((1, 0))
            b = b_bufs.index(stage * B_PARTS)
            if B_T:
                b = b.permute((1, 0))
            acc = warpgroup_mma(a, b, acc, is_async=True)
            if GATED:
                bu = b_bufs.index(stage * B_PARTS + 1)
                if B_T:
                    bu = bu.permute((1, 0))
                up = warpgroup_mma(a, bu, up, is_async=True)
                # wgmma groups retire in order: this step's two may run on, the previous step's are done
                acc, up = warpgroup_mma_wait(2, deps=(acc, up))
            else:
                acc = warpgroup_mma_wait(1, deps=(acc,))
            if step > 0:
                mbarrier.arrive(empty.index((count - 1) % NUM_STAGES))
            count += 1
        if PINGPONG:  # every block of this tile has landed: the other consumer may wait for its own
            mbarrier.arrive(turns.index(1 - CONSUMER))
            turn += 1
        if GATED:
            acc, up = warpgroup_mma_wait(0, deps=(acc, up))
        else:
            acc = warpgroup_mma_wait(0, deps=(acc,))
        mbarrier.arrive(empty.index((count - 1) % NUM_STAGES))
        count += (TAKES - 1) * k_steps  # the other consumer's tiles
        if GATED:
            if STORE_GU:
                _store_tile(g_desc, c_buf, acc, row, col)
                _store_tile(uo_desc, c_buf, up, row, col)
            _store_tile(c_desc, c_buf, _activate(acc, ACTIVATION) * up, row, col)
        else:
            _store_tile(c_desc, c_buf, acc, row, col)
    tma.store_wait(0)


@_jit(do_not_specialize=["M", "N", "K"])  # one compile serves every shape
def _hopper_gemm_kernel(a_desc, b_desc, u_desc, c_desc, g_desc, uo_desc, M, N, K,
                        BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr,
                        NUM_STAGES: gl.constexpr, NUM_CONSUMERS: gl.constexpr, PINGPONG: gl.constexpr,
                        CONSUMER_REGISTERS: gl.constexpr, A_T: gl.constexpr, B_T: gl.constexpr,
                        GATED: gl.constexpr, ACTIVATION: gl.constexpr, STORE_GU: gl.constexpr):
    """c (M, N) = a (M, K) @ b (K, N); GATED: c = act(a @ b) * (a @ u), and with STORE_GU a @ b into g and
    a @ u into uo. Grid: (programs,), at most one an SM. The default partition is consumer 0; the other
    consumer and the loader are workers."""
    A_PARTS: gl.constexpr = 1 if PINGPONG else NUM_CONSUMERS
    B_PARTS: gl.constexpr = 2 if GATED else 1
    dtype: gl.constexpr = a_desc.dtype
    a_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES * A_PARTS] + a_desc.block_type.shape, a_desc.layout)
    b_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES * B_PARTS] + b_desc.block_type.shape, b_desc.layout)
    c_bufs = gl.allocate_shared_memory(c_desc.dtype, [NUM_CONSUMERS] + c_desc.block_type.shape, c_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=A_PARTS)  # cooperative: each consumer releases each stage
    turns = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(turns.index(i), count=1)
    fence_async_shared()  # the initialized barriers, visible to the TMA unit

    # The argument tuples are written out in the calls: a tuple held in a variable loses its constexprs.
    if NUM_CONSUMERS == 1:
        gl.warp_specialize([
            (_consumer, (a_bufs, b_bufs, ready, empty, turns, c_desc, g_desc, uo_desc, c_bufs, M, N, K,
                         0, NUM_CONSUMERS, PINGPONG, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, NUM_STAGES, A_T, B_T,
                         GATED, ACTIVATION, STORE_GU)),
            (_loader, (a_desc, b_desc, u_desc, a_bufs, b_bufs, ready, empty, M, N, K,
                       BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, NUM_STAGES, A_PARTS, A_T, B_T, GATED)),
        ], [1], [24])
    else:
        gl.warp_specialize([
            (_consumer, (a_bufs, b_bufs, ready, empty, turns, c_desc, g_desc, uo_desc, c_bufs, M, N, K,
                         0, NUM_CONSUMERS, PINGPONG, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, NUM_STAGES, A_T, B_T,
                         GATED, ACTIVATION, STORE_GU)),
            (_consumer, (a_bufs, b_bufs, ready, empty, turns, c_desc, g_desc, uo_desc, c_bufs, M, N, K,
                         1, NUM_CONSUMERS, PINGPONG, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, NUM_STAGES, A_T, B_T,
                         GATED, ACTIVATION, STORE_GU)),
            (_loader, (a_desc, b_desc, u_desc, a_bufs, b_bufs, ready, empty, M, N, K,
                       BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, NUM_STAGES, A_PARTS, A_T, B_T, GATED)),
        ], [4, 1], [CONSUMER_REGISTERS, 24])


SOURCES = (_activate, _tile_origin, _loader, _store_tile, _consumer, _hopper_gemm_kernel)
"""Every Gluon function the kernel runs: in the source hash of the specs whose configs may run it."""


def _read_problem(name: str, t: torch.Tensor) -> str | None:
    """Why TMA cannot read the 2-D t as it is laid out (neither dim contiguous, an address or stride off 16 bytes)."""
    if t.stride(1) != 1 and t.stride(0) != 1:
        return f"{name} must be row-major or column-major (one unit stride), got strides {tuple(t.stride())}"
    if t.data_ptr() % _ALIGNMENT:
        return f"{name} must start at a {_ALIGNMENT}-byte aligned address for TMA"
    outer = 0 if t.stride(1) == 1 else 1  # the dim TMA steps along by a stride
    if t.shape[outer] > 1 and t.stride(outer) * t.element_size() % _ALIGNMENT:
        return f"{name}'s strides must be multiples of {_ALIGNMENT} bytes apart from the unit one, got {tuple(t.stride())}"
    return None


def _device_problem(tensors: dict[str, torch.Tensor]) -> str | None:
    """Why these tensors cannot go to the kernel at all (no Gluon, not 2-D, not CUDA, the dtype, the device, the
    interpreter, not sm_90, another Triton), or None."""
    if GLUON_MISSING:
        return GLUON_MISSING
    first = next(iter(tensors.values()))
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor) or t.dim() != 2:
            return f"{name} must be a 2-D tensor"
        if not t.is_cuda:
            return f"{name} is on the {t.device.type}: the kernel needs a Hopper GPU (sm_90)"
        if t.dtype not in DTYPES or t.dtype != first.dtype:
            return f"{name} is {t.dtype}: the kernel takes operands of one dtype in {DTYPES}"
        if t.device != first.device:
            return f"every operand must be on one device, got {t.device} and {first.device}"
    if gpu.interpreter_active():
        return "the Triton interpreter (TRITON_INTERPRET=1) does not run Gluon"
    capability = torch.cuda.get_device_capability(first.device)
    if capability != (9, 0):
        return f"the kernel needs a Hopper GPU (sm_90), this is sm_{capability[0]}{capability[1]}"
    if not triton.__version__.startswith(cfg.GLUON_TRITON):
        return f"written against Triton {cfg.GLUON_TRITON}x's Gluon API, found Triton {triton.__version__}"
    return None


def supported(a: torch.Tensor, b: torch.Tensor, config: dict | None = None) -> str | None:
    """Why hopper_matmul(a, b) cannot run here (see _device_problem; shapes that do not chain, a layout TMA cannot
    read, an N whose output rows TMA cannot write, the config), or None when it can."""
    if (problem := _device_problem({"a": a, "b": b})) is not None:
        return problem
    if a.shape[1] != b.shape[0]:
        return f"a (M, K) and b (K, N) must share K, got {tuple(a.shape)} and {tuple(b.shape)}"
    for name, t in (("a", a), ("b", b)):
        if (problem := _read_problem(name, t)) is not None:
            return problem
    if b.shape[1] * b.element_size() % _ALIGNMENT:
        return f"N must be a multiple of {_ALIGNMENT // b.element_size()} (the output's rows, for TMA), got {b.shape[1]}"
    return None if config is None else cfg.config_problem(config, gated=False)


def gated_supported(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, activation: str = "silu",
                    config: dict | None = None) -> str | None:
    """Why hopper_gated(x, w_gate, w_up, activation) cannot run here (as supported, for x @ w_gate.T; the weights'
    shapes and layouts differing, the activation), or None when it can. No biases: gated_mlp's with biases
    stay on gated.py's kernel."""
    if (problem := _device_problem({"x": x, "w_gate": w_gate, "w_up": w_up})) is not None:
        return problem
    if w_gate.shape != w_up.shape or w_gate.shape[1] != x.shape[1]:
        return (f"w_gate and w_up must both be (H, K) for x (M, K), got {tuple(w_gate.shape)}, {tuple(w_up.shape)} "
                f"and {tuple(x.shape)}")
    for name, t in (("x", x), ("w_gate", w_gate), ("w_up", w_up)):
        if (problem := _read_problem(name, t)) is not None:
            return problem
    if (w_gate.stride(1) == 1) != (w_up.stride(1) == 1):
        return "w_gate and w_up must be laid out alike (both row-major or both column-major)"
    if w_gate.shape[0] * x.element_size() % _ALIGNMENT:
        return f"H must be a multiple of {_ALIGNMENT // x.element_size()} (the outputs' rows, for TMA), got {w_gate.shape[0]}"
    if activation not in ACTIVATIONS:
        return f"activation must be one of {tuple(ACTIVATIONS)}, got {activation!r}"
    return None if config is None else cfg.config_problem(config, gated=True)


def _descriptor(t: torch.Tensor, block: list[int]) -> TensorDescriptor:
    """A TMA descriptor over the 2-D t (unit stride last) reading `block` tiles, zero-filling past its edges. A
    single row's stride, which TMA never steps along, is set to one it accepts."""
    stride = t.stride(0) if t.shape[0] > 1 else cdiv(t.shape[1] * t.element_size(), _ALIGNMENT) * _ALIGNMENT // t.element_size()
    return TensorDescriptor(t, list(t.shape), [stride, 1], block, nvmma_layout(tuple(block), t.dtype))


def _a_read(a: torch.Tensor, config: dict) -> tuple[TensorDescriptor, bool]:
    """(descriptor, transposed) for a (M, K): (BLOCK_M, BLOCK_K) blocks of a row-major a, else (BLOCK_K, BLOCK_M)
    blocks of its (K, M) transpose."""
    if a.stride(1) == 1:
        return _descriptor(a, [config["BLOCK_M"], config["BLOCK_K"]]), False
    return _descriptor(a.t(), [config["BLOCK_K"], config["BLOCK_M"]]), True


def _b_read(b: torch.Tensor, config: dict) -> tuple[TensorDescriptor, bool]:
    """(descriptor, transposed) for b (K, N): (BLOCK_K, BLOCK_N) blocks of a row-major b, else (BLOCK_N, BLOCK_K)
    blocks of its (N, K) transpose (linear's weight)."""
    if b.stride(1) == 1:
        return _descriptor(b, [config["BLOCK_K"], config["BLOCK_N"]]), False
    return _descriptor(b.t(), [config["BLOCK_N"], config["BLOCK_K"]]), True


def _launch(a, b, u, outs, m: int, n: int, k: int, config: dict, gated: bool, activation: str, store_gu: bool,
            table=None):
    a_desc, a_t = _a_read(a, config)
    b_desc, b_t = _b_read(b, config)
    u_desc = _b_read(u, config)[0] if gated else b_desc
    out_block = [config["BLOCK_M"], config["BLOCK_N"]]
    c_desc = _descriptor(outs[0], out_block)
    # A plain product writes c alone, and hands it as all three outputs: one descriptor serves them.
    g_desc, uo_desc = (c_desc if t is outs[0] else _descriptor(t, out_block) for t in outs[1:])
    consumers = config["NUM_CONSUMERS"]
    maxnreg, _ = cfg.register_split(consumers, config["CONSUMER_REGISTERS"])
    tiles = cdiv(m, cfg.tile_rows(config)) * cdiv(n, config["BLOCK_N"])
    sms = torch.cuda.get_device_properties(a.device).multi_processor_count if a.is_cuda else 1  # 1: a compile
    meta = dict(
        BLOCK_M=config["BLOCK_M"], BLOCK_N=config["BLOCK_N"], BLOCK_K=config["BLOCK_K"], GROUP_M=config["GROUP_M"],
        NUM_STAGES=config["NUM_STAGES"], NUM_CONSUMERS=consumers, PINGPONG=config["SCHEDULE"] == "pingpong",
        CONSUMER_REGISTERS=config["CONSUMER_REGISTERS"], A_T=a_t, B_T=b_t, GATED=gated,
        ACTIVATION=ACTIVATIONS[activation], STORE_GU=store_gu, num_warps=4, maxnreg=maxnreg,
    )
    # A public call's launch is kept per grid and constexprs (`launch.kept`: bound once, the next call straight to
    # the launcher); the gate's and the search's (table None) go through Triton's own.
    launch = launch_.kept(table, _hopper_gemm_kernel, (min(tiles, sms),), role=tuple(meta.items()))
    return launch(a_desc, b_desc, u_desc, c_desc, g_desc, uo_desc, m, n, k, **meta)


def launch_matmul(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, config: dict, table=None):
    """c (M, N, row-major) = a (M, K) @ b (K, N) with one config, unchecked (see supported); the compiled kernel
    (None where nothing ran, or where the kept launch of a public call's runtime `table` ran it)."""
    (m, k), n = a.shape, b.shape[1]
    if m * n == 0:
        return None
    if k == 0:
        c.zero_()
        return None
    return _launch(a, b, b, (c, c, c), m, n, k, config, False, "none", False, table)


def launch_gated(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, h: torch.Tensor, gu: torch.Tensor | None,
                 activation: str, config: dict, table=None):
    """h (M, H) = act(x @ w_gate.T) * (x @ w_up.T), and where gu is given (a contiguous (M, 2H)) [g | u] into it,
    with one config, unchecked (see gated_supported); the compiled kernel as launch_matmul says."""
    (m, k), n = x.shape, w_gate.shape[0]
    if m * n == 0:
        return None
    outs = (h, h, h) if gu is None else (h, gu[:, :n], gu[:, n:])
    return _launch(x, w_gate.t(), w_up.t(), outs, m, n, k, config, True, activation, gu is not None, table)


def hopper_matmul(a: torch.Tensor, b: torch.Tensor, config: dict | None = None) -> torch.Tensor:
    """a @ b as a new row-major tensor, with this module's kernel (DEFAULT_CONFIG where config is None);
    ValueError with supported's reason where it cannot run."""
    config = dict(cfg.DEFAULT_CONFIG if config is None else config)
    if (reason := supported(a, b, config)) is not None:
        raise ValueError(f"hopper_matmul: {reason}")
    c = a.new_empty((a.shape[0], b.shape[1]))
    launch_matmul(a, b, c, config)
    return c


def hopper_gated(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, activation: str = "silu",
                 store_gu: bool = False, config: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(h = act(x @ w_gate.T) * (x @ w_up.T), and with store_gu the pre-activations [g | u] as one (M, 2H) tensor
    (gated_mlp's backward input), else an empty tensor), as gated.py's launcher writes them; ValueError with
    gated_supported's reason where it cannot run."""
    config = dict(cfg.DEFAULT_GATED_CONFIG if config is None else config)
    if (reason := gated_supported(x, w_gate, w_up, activation, config)) is not None:
        raise ValueError(f"hopper_gated: {reason}")
    m, n = x.shape[0], w_gate.shape[0]
    h = x.new_empty((m, n))
    gu = x.new_empty((m, 2 * n)) if store_gu else x.new_empty((0,))
    launch_gated(x, w_gate, w_up, h, gu if store_gu else None, activation, config)
    return h, gu
