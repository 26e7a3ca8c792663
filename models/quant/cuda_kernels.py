"""Fused CUDA paths for the three formats (chosen at load, one per layer; `FusedPath.name` says
which kernels it may run, `compute.kernels_run(model)` which ones did).

Every path here offers its kernels in order of preference for each input (`FusedPath.choose`);
`compute.configure` wraps it in the self-check (`self_check.py`): each (layer signature, kernel
and tile, dtype, device) is compared once with the exact path, before the run where an engine
runs it, and a kernel that disagrees or raises is replaced for good by the next one, recorded
through `util.fallbacks.record`. The last resort is always the exact path.

- **W4A16** (`w4a16_path`): for a bf16 model, torch's tinygemm `_weight_int4pack_mm` (SM80+;
  N % 8 == 0, K a multiple of 16 * innerKTiles, groups 32..256). At load the 4-bit fields are
  packed two per byte (even column in the high nibble) and tiled by `_convert_weight_to_int4pack`,
  and each group's (s, z = -zp * s) goes into the [K/G, N, 2] bf16 `scales_and_zeros`, for the
  kernel's `(f - 8) * s + z`; those two are all the path keeps. For an fp16 or fp32 model, and
  for layers tinygemm does not take, this project's Triton kernel (`triton_w4a16`) reads the
  layer's own compressed-tensors words (no copy; only the zero points, as int8, are its own).
  A non-bf16 activation on a tinygemm layer runs the exact path, recorded as a fallback.
- **FP8 blocks** (`fp8_path`): on SM90 with CUDA >= 12.9, for bf16/fp16 activations,
  `torch._scaled_mm` with blockwise scales (`scaled_mm.py`: activations quantised to e4m3 per
  1x128 block, the checkpoint's `activation_scheme: dynamic`, the checkpoint's 128x128 scales
  passed as torch requires them) at every row count; elsewhere, or if it raises or disagrees,
  the Triton weight-only kernel (`triton_fp8`, the FP8 weight decoded in registers). On a GPU
  each of those is recorded as a fallback: `scaled_mm_reason`'s refusal (another SM, a wheel
  built with CUDA < 12.9, a layer cuBLAS would misread) when the path is chosen, a kernel that
  raises or disagrees by the self-check. Off CUDA (a test's CPU tensors) nothing is recorded.
  The choice never depends on how many rows share the call, so that a token's activations are
  quantised alike whether it is prefilled or decoded. The fp8-fused arms may still agree with
  HF's forward less often than HF agrees with itself: on a deep random-init model an activation
  one ulp away can take the next e4m3 code, and W8A8 amplifies rounding (benchmarks/gpu_check.py
  --only quant).
- **NF4 / FP4** (`nf4_path`): bitsandbytes' CUDA `gemm_4bit` op when bitsandbytes has a CUDA
  library. That op itself picks, by rows and the GPU, its fused kernel or a dequantise + F.linear
  (`bitsandbytes/backends/cuda/ops.py`); `bnb_kernel` asks bitsandbytes' own rule, so the name says which:
  `bnb_gemm_4bit_fused` or `bnb_dequant_linear`. Else this project's Triton kernel.

**Batch-invariant mode** (the engine's, engine/invariant/cuda/products.py): every layer runs its
format's Triton kernel (`triton_call`) at the engine's fixed plan, with no self-check, because
tinygemm, `_scaled_mm` and bitsandbytes choose their kernel and split by the rows and the card,
and the self-check's verdict is keyed by the row class.

Triton kernels are named with their tile (`triton_kernels.tile_for`), e.g.
`triton_fp8[16x64x64/split2]`. They are checked on CPU under `TRITON_INTERPRET=1`
(tests/models/quant/test_triton_kernels.py) and the `_scaled_mm` arguments against torch's rules
(test_scaled_mm.py); `benchmarks/gpu_check.py --only quant` checks every path against the exact
one on a GPU.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from nudgeability.models.quant import scaled_mm, triton_kernels
from nudgeability.models.quant.compute import FusedPath
from nudgeability.models.quant.self_check import Kernel
from nudgeability.util import fallbacks

TINYGEMM_GROUPS = (32, 64, 128, 256)
E4M3_UNIT = 2.0**-4  # e4m3 keeps 3 fraction bits: relative rounding error <= 2^-4
E4M3_FLOOR = 2.0**-10 / scaled_mm.E4M3_MAX  # half e4m3's subnormal step, per block amax


def tinygemm_reason(out_features: int, in_features: int, group_size: int, device) -> str | None:
    """Why tinygemm cannot take the layer here, or None."""
    if torch.device(device).type != "cuda":
        return "not on CUDA"
    if torch.cuda.get_device_capability(device) < (8, 0):
        return "tinygemm needs SM80+"
    if group_size not in TINYGEMM_GROUPS or out_features % 8 or in_features % 32:
        return f"[{out_features}, {in_features}] group {group_size}"
    return None


def _int4pack(two_per_byte: torch.Tensor, inner_k_tiles: int) -> torch.Tensor:
    """torch's tinygemm tiling (CUDA only; a seam for the memory test's meta tensors)."""
    return torch.ops.aten._convert_weight_to_int4pack(two_per_byte, inner_k_tiles)


def _triton_kernel(name: str, rows: int, n: int, k: int, call) -> Kernel:
    tile = triton_kernels.tile_for(rows, n, k)
    return Kernel(f"{name}[{tile.name}]", lambda x: call(x, tile))


def w4a16_path(
    fields: torch.Tensor,
    scale: torch.Tensor,
    zero_point: torch.Tensor | None,
    group_size: int,
    dtype: torch.dtype = torch.bfloat16,
    packed: torch.Tensor | None = None,
) -> FusedPath | str:
    """tinygemm where it takes the layer and the model is bf16, else the Triton kernel on
    `packed` (the layer's compressed-tensors words; repacked from `fields` if not given)."""
    out_features, in_features = fields.shape
    signature = f"w4a16 [{out_features}, {in_features}] g{group_size} " + (
        "sym" if zero_point is None else "asym"
    )
    reason = tinygemm_reason(out_features, in_features, group_size, fields.device)
    if reason is None and dtype != torch.bfloat16:
        reason = f"tinygemm takes bf16 activations, the model is {dtype}"
        if triton_kernels.available():
            fallbacks.record(f"tinygemm_int4pack_mm {signature}", "triton_w4a16", reason)
    if reason is not None:
        if not triton_kernels.available():
            return f"{reason}, and no Triton (pip install '.[gpu]')"
        words = packed.contiguous() if packed is not None else _repack_int32(fields)
        zp = None if zero_point is None else zero_point.to(torch.int8).contiguous()
        given = scale
        scale = scale.contiguous()

        def choose(x: torch.Tensor) -> list[Kernel]:
            def call(x, tile):
                return triton_kernels.w4a16_matmul(x, words, scale, zp, group_size, tile)

            return [_triton_kernel("triton_w4a16", x.shape[0], out_features, in_features, call)]

        # the path's own tensors (what it adds to the layer's storage, which it reads in place)
        own = tuple(
            t
            for t, new in ((zp, True), (words, packed is None), (scale, scale is not given))
            if t is not None and new
        )
        return _checked_path("triton_w4a16", choose, own, signature)
    inner = next(t for t in (8, 4, 2) if in_features % (16 * t) == 0)
    f = fields.to(torch.uint8)
    tiled = _int4pack(((f[:, ::2] << 4) | f[:, 1::2]).contiguous(), inner)
    s = scale.to(torch.float32)
    z = torch.zeros_like(s) if zero_point is None else -zero_point.to(torch.float32) * s
    scales_and_zeros = torch.stack((s, z), -1).transpose(0, 1).contiguous().to(torch.bfloat16)
    del f, s, z

    def magnitude() -> torch.Tensor:
        # tinygemm forms (f - 8) * s + z from bf16 s and z = -zp * s: with |f - 8|, |zp| <= 8 its
        # terms are within 16 |s| (which bounds |W| too)
        sz = scales_and_zeros.float()
        s16 = (16 * sz[..., 0].abs()).t().repeat_interleave(group_size, 1)
        return s16[:, :in_features]

    def tinygemm(x: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten._weight_int4pack_mm(
            x.contiguous(), tiled, group_size, scales_and_zeros
        )

    def choose(x: torch.Tensor) -> list[Kernel]:
        if x.dtype != torch.bfloat16:
            return []  # the exact path: tinygemm takes bf16 only (recorded below)
        # two roundings beyond the bound's own (s and z to bf16, then the decoded value)
        return [Kernel("tinygemm_int4pack_mm", tinygemm, 2 * 2.0**-8, magnitude=magnitude)]

    return _checked_path(
        "tinygemm_int4pack_mm", _bf16_only(choose, signature), (tiled, scales_and_zeros), signature
    )


def _bf16_only(choose, signature: str):
    """`choose`, recording once that non-bf16 activations on a tinygemm layer run exact."""

    def wrapped(x: torch.Tensor) -> list[Kernel]:
        if x.dtype != torch.bfloat16:
            fallbacks.record(
                f"tinygemm_int4pack_mm {signature}", "exact", f"activations are {x.dtype}"
            )
        return choose(x)

    return wrapped


def _checked_path(name: str, choose, tensors: tuple, signature: str) -> FusedPath:
    """A path whose `run` (used when nothing wraps it) takes the first kernel unchecked;
    `compute.configure` replaces it by the self-checked run."""

    def run(x: torch.Tensor) -> torch.Tensor:
        kernels = choose(x)
        if not kernels:
            raise RuntimeError(f"{name} {signature}: no kernel for {x.dtype} without its layer")
        return kernels[0].run(x)

    return FusedPath(name, run, tensors, choose, signature)


def _repack_int32(fields: torch.Tensor) -> torch.Tensor:
    """Fields f [N, K] (0..15) as compressed-tensors int32 words (8 per word, column j at 4*(j%8))."""
    out_features, in_features = fields.shape
    padded = torch.nn.functional.pad(fields.to(torch.int64), (0, (-in_features) % 8))
    words = (padded.view(out_features, -1, 8) << (4 * torch.arange(8, device=fields.device))).sum(
        -1
    )
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32).contiguous()


def fp8_path(
    weight: torch.Tensor,
    scale_inv: torch.Tensor,
    block: tuple[int, int],
    facts: tuple | None = None,
) -> FusedPath | str:
    """`_scaled_mm` at every row count where torch takes the layer, else the Triton weight-only
    kernel (module docstring). `facts` = (capability, CUDA version) (default: the weight's
    device's)."""
    if not triton_kernels.available():
        return "no Triton (pip install '.[gpu]')"
    n, k = weight.shape
    scale = scale_inv.to(torch.float32).contiguous()
    capability, cuda = facts if facts is not None else scaled_mm.device_facts(weight.device)
    refused = scaled_mm.scaled_mm_reason(weight, block, capability, cuda)
    use_scaled_mm = refused is None
    signature = f"fp8 [{n}, {k}] block {tuple(block)}"
    if refused is not None and capability is not None:  # a GPU, or a wheel, that cannot take it
        fallbacks.record(f"scaled_mm_blockwise {signature}", "triton_fp8", refused)

    def call(x, tile):
        return triton_kernels.fp8_matmul(x, weight, scale, block, tile)

    def blockwise(x: torch.Tensor) -> torch.Tensor:
        return scaled_mm.blockwise(x, weight, scale)

    def choose(x: torch.Tensor) -> list[Kernel]:
        triton = _triton_kernel("triton_fp8", x.shape[0], n, k, call)
        if not (use_scaled_mm and x.dtype in (torch.bfloat16, torch.float16)):
            return [triton]
        fast = Kernel("scaled_mm_blockwise", blockwise, E4M3_UNIT, E4M3_FLOOR)
        return [fast, triton]

    name = "triton_fp8+scaled_mm_blockwise" if use_scaled_mm else "triton_fp8"
    return _checked_path(name, choose, (scale,), signature)


def bnb_kernel(rows: int, n: int, k: int, blocksize: int, dtype, device_index) -> str:
    """Which of its kernels bitsandbytes' CUDA `gemm_4bit` op runs for these rows: its rule in
    `bitsandbytes/backends/cuda/ops.py` (0.50): dequantise + F.linear past
    `_gemm_4bit_custom_max_m` rows or when K is not a multiple of the blocksize, else its fused
    kernel where its per-GPU heuristic `_gemm_4bit_use_custom_fn` says so."""
    from bitsandbytes.backends.cuda import ops

    if rows > ops._gemm_4bit_custom_max_m or k % blocksize:
        return "bnb_dequant_linear"
    if ops._gemm_4bit_use_custom_fn(device_index, dtype, rows, n, k):
        return "bnb_gemm_4bit_fused"
    return "bnb_dequant_linear"


def nf4_path(layer) -> FusedPath | str:
    """bitsandbytes' own CUDA op when installed with CUDA (named by the kernel it picks), else
    the Triton 4-bit kernel."""
    n, k = layer.out_features, layer.in_features
    signature = f"{layer.quant_type} [{n}, {k}] block {layer.blocksize}"
    weight = layer.weight
    lazy: dict = {}

    def triton(x: torch.Tensor) -> Kernel:
        def call(x, tile):
            if not lazy:  # built on first use: a bnb layer needs them only if bnb fails its check
                lazy["absmax"] = layer.block_absmax().contiguous()
                lazy["table"] = layer.weight_quant_map.to(torch.float32).contiguous()
            return triton_kernels.nf4_matmul(
                x, weight, lazy["absmax"], lazy["table"], layer.blocksize, n, tile
            )

        return _triton_kernel("triton_4bit", x.shape[0], n, k, call)

    if _bnb_has_cuda():
        import bitsandbytes as bnb

        state = layer.quant_state()

        def run_bnb(x: torch.Tensor) -> torch.Tensor:
            return bnb.matmul_4bit(x, weight, quant_state=state).to(x.dtype)

        def choose(x: torch.Tensor) -> list[Kernel]:
            try:
                name = bnb_kernel(x.shape[0], n, k, layer.blocksize, x.dtype, x.device.index)
            except (ImportError, AttributeError):  # another bitsandbytes: its rule is unknown
                name = "bnb_gemm_4bit_cuda"
            fused = [Kernel(name, run_bnb)]
            return fused + [triton(x)] if triton_kernels.available() else fused

        return _checked_path("bnb_gemm_4bit_cuda", choose, (), signature)
    if not triton_kernels.available():
        return "no Triton (pip install '.[gpu]') and no CUDA bitsandbytes"
    return _checked_path("triton_4bit", lambda x: [triton(x)], (), signature)


def triton_call(layer) -> tuple[str, Callable] | str:
    """`(name, call(x2d, tile) -> y2d)`: `layer`'s own Triton kernel on its stored tensors at a
    tile the caller gives (the batch-invariant mode, module docstring), or why it has none."""
    n, k = layer.out_features, layer.in_features
    if not triton_kernels.available():
        return "no Triton (pip install '.[gpu]')"
    if layer.format_name == "fp8":
        weight, block = layer.weight, layer.block_size
        scale = layer.weight_scale_inv.to(torch.float32).contiguous()
        return "triton_fp8", lambda x, tile: triton_kernels.fp8_matmul(
            x, weight, scale, block, tile
        )
    if layer.format_name == "bnb4":
        absmax = layer.block_absmax().contiguous()
        table = layer.weight_quant_map.to(torch.float32).contiguous()
        return "triton_4bit", lambda x, tile: triton_kernels.nf4_matmul(
            x, layer.weight, absmax, table, layer.blocksize, n, tile
        )
    if layer.format_name != "w4a16":
        return f"no Triton kernel for {layer.format_name or type(layer).__name__}"
    if layer.num_bits != 4:
        return f"{layer.num_bits}-bit weights"
    group = k // layer.weight_scale.shape[1]
    g_idx = layer.weight_g_idx
    if g_idx is not None and not torch.equal(g_idx.long().cpu(), torch.arange(k) // group):
        return "activation-ordered groups (g_idx)"
    words, scale = layer.weight_packed.contiguous(), layer.weight_scale.contiguous()
    zp = layer._zero_point()
    zp = None if zp is None else zp.to(torch.int8).contiguous()
    return "triton_w4a16", lambda x, tile: triton_kernels.w4a16_matmul(
        x, words, scale, zp, group, tile
    )


def _bnb_has_cuda() -> bool:
    try:
        from bitsandbytes.cextension import BNB_BACKEND, lib  # noqa: F401
    except Exception:  # not installed (the GPU image), or no native library
        return False
    return BNB_BACKEND == "CUDA" and lib is not None and not type(lib).__name__.startswith("Error")


# the former name of the blockwise call (benchmarks and tests that drive it directly)
_scaled_mm_blockwise = scaled_mm.blockwise
