"""Explicit 16-lane SIMD values for numba kernels: each operation one LLVM vector instruction.

numba's auto-vectoriser only vectorises a reduction when fast-math lets it reassociate the sum,
and it gives up on loops whose accumulators it cannot keep in registers (measured on the
dequantise-and-dot loops of `numba_kernels.py`: scalar code, several times slower). These
intrinsics make the vectors explicit instead: `F32x16` and `I32x16` are LLVM `<16 x float>` /
`<16 x i32>` values that numba keeps in registers (one zmm on AVX-512, two ymm on AVX2, four
registers on NEON), and every arithmetic operation is IEEE float32 with no fast-math flag:

- `vadd`, `vsub`, `vmul`: one rounding per lane; `vfma(a, b, c)` = a*b + c with one rounding
  (`llvm.fma`, a hardware FMA where the CPU has one);
- `vsum(v)`: the 16 lanes added pairwise, halves first ((l0 + l8) + (l4 + l12)) ..., a fixed
  order, so a kernel's result does not depend on how LLVM schedules it;
- conversions are exact: `vfloat` (int32 -> float32 for |i| < 2^24), `vload_e4m3` (float8 e4m3fn
  -> float32, through float16), and the two roundings `vround_bf16` / `vround_f16` round each
  lane to bfloat16 / float16 to nearest-even, as torch's `.to(dtype)` does, and back.

`vlookup16(table, idx)` picks lane `idx[i]` (0..15) of `table` for every lane i: one `vpermps`
on AVX-512, two 8-entry `vpermps` and a blend on AVX2, a lane-by-lane extract elsewhere. Which
one is chosen at compile time from the CPU numba compiles for (numba caches per CPU);
`FAST_LOOKUP` says whether it is the one instruction.
"""

from __future__ import annotations

from functools import lru_cache

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.typing import signature
from numba.extending import intrinsic, models, register_model

LANES = 16
_F32 = ir.FloatType()
_I32 = ir.IntType(32)
_I16 = ir.IntType(16)
_I8 = ir.IntType(8)
_VF = ir.VectorType(_F32, LANES)
_VI = ir.VectorType(_I32, LANES)


class F32x16(types.Type):
    """16 float32 lanes (an LLVM vector value)."""

    def __init__(self):
        super().__init__(name="F32x16")


class I32x16(types.Type):
    """16 int32 lanes (an LLVM vector value)."""

    def __init__(self):
        super().__init__(name="I32x16")


f32x16 = F32x16()
i32x16 = I32x16()


@register_model(F32x16)
class _F32x16Model(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, _VF)


@register_model(I32x16)
class _I32x16Model(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, _VI)


def _splat_int(value: int) -> ir.Constant:
    return ir.Constant(_VI, [value] * LANES)


def _lanes_pointer(context, builder, array_type, array, index, element):
    """Pointer to the 16 elements of a 1-D array starting at `index`, typed `<16 x element>*`."""
    data = context.make_array(array_type)(context, builder, array).data
    return builder.bitcast(builder.gep(data, [index]), ir.VectorType(element, LANES).as_pointer())


def _is_1d(array, dtype) -> bool:
    return isinstance(array, types.Array) and array.ndim == 1 and array.dtype == dtype


def _call(builder, name: str, result, arguments):
    fn = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(result, [a.type for a in arguments]), name
    )
    return builder.call(fn, arguments)


@intrinsic
def vzeros(typingctx):
    """16 zeros."""

    def codegen(context, builder, sig, args):
        return ir.Constant(_VF, [0.0] * LANES)

    return signature(f32x16), codegen


@intrinsic
def vlanes(typingctx):
    """0.0, 1.0, ..., 15.0: each lane's index as a float (a constant)."""

    def codegen(context, builder, sig, args):
        return ir.Constant(_VF, [float(i) for i in range(LANES)])

    return signature(f32x16), codegen


@intrinsic
def vsplat(typingctx, scalar):
    """`scalar` (cast to float32) in every lane."""
    if not isinstance(scalar, (types.Float, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        value = context.cast(builder, args[0], sig.args[0], types.float32)
        one = builder.insert_element(ir.Constant(_VF, ir.Undefined), value, ir.Constant(_I32, 0))
        return builder.shuffle_vector(one, ir.Constant(_VF, ir.Undefined), _splat_int(0))

    return signature(f32x16, scalar), codegen


@intrinsic
def vload(typingctx, array, index):
    """array[index : index + 16] of a 1-D float32 array (no alignment needed, no bounds check)."""
    if not _is_1d(array, types.float32):
        return None

    def codegen(context, builder, sig, args):
        return builder.load(_lanes_pointer(context, builder, sig.args[0], *args, _F32), align=4)

    return signature(f32x16, array, index), codegen


@intrinsic
def vload_bytes(typingctx, array, index):
    """array[index : index + 16] of a 1-D uint8 array, each byte zero-extended to int32."""
    if not _is_1d(array, types.uint8):
        return None

    def codegen(context, builder, sig, args):
        raw = builder.load(_lanes_pointer(context, builder, sig.args[0], *args, _I8), align=1)
        return builder.zext(raw, _VI)

    return signature(i32x16, array, index), codegen


@intrinsic
def vlow4(typingctx, v):
    """The low nibble of each lane (v & 15)."""

    def codegen(context, builder, sig, args):
        return builder.and_(args[0], _splat_int(15))

    return signature(i32x16, i32x16), codegen


@intrinsic
def vhigh4(typingctx, v):
    """Bits 4.. of each lane (v >> 4): the high nibble of a byte."""

    def codegen(context, builder, sig, args):
        return builder.lshr(args[0], _splat_int(4))

    return signature(i32x16, i32x16), codegen


@intrinsic
def vfloat(typingctx, v):
    """int32 lanes as float32 (exact below 2^24)."""

    def codegen(context, builder, sig, args):
        return builder.sitofp(args[0], _VF)

    return signature(f32x16, i32x16), codegen


def _binary(op: str, doc: str):
    @intrinsic
    def binary(typingctx, a, b):
        def codegen(context, builder, sig, args):
            return getattr(builder, op)(*args)

        return signature(f32x16, f32x16, f32x16), codegen

    binary.__doc__ = doc
    return binary


vadd = _binary("fadd", "a + b, one rounding per lane.")
vsub = _binary("fsub", "a - b, one rounding per lane.")
vmul = _binary("fmul", "a * b, one rounding per lane.")


@intrinsic
def vfma(typingctx, a, b, c):
    """a * b + c with a single rounding per lane (llvm.fma)."""

    def codegen(context, builder, sig, args):
        return _call(builder, "llvm.fma.v16f32", _VF, list(args))

    return signature(f32x16, f32x16, f32x16, f32x16), codegen


@intrinsic
def vsum(typingctx, v):
    """The sum of the 16 lanes, halves added pairwise (a fixed order), as a float32."""

    def codegen(context, builder, sig, args):
        value, width = args[0], LANES
        while width > 1:
            half = width // 2
            lo = ir.Constant(ir.VectorType(_I32, half), list(range(half)))
            hi = ir.Constant(ir.VectorType(_I32, half), list(range(half, width)))
            value = builder.fadd(
                builder.shuffle_vector(value, value, lo), builder.shuffle_vector(value, value, hi)
            )
            width = half
        return builder.extract_element(value, ir.Constant(_I32, 0))

    return signature(types.float32, f32x16), codegen


@intrinsic
def vload_e4m3(typingctx, array, index):
    """16 float8_e4m3fn bytes (a 1-D uint8 array) as float32 lanes holding value * 2^-8, exactly.

    The sign and the 7 magnitude bits moved into a float16 (sign at bit 15, exponent and mantissa
    at bits 7..13) make a float16 of value / 256: e4m3's exponent bias is 7, float16's 15, so a
    normal e4m3 number lands on a normal float16 and an e4m3 subnormal (exponent 0) on a float16
    subnormal, which the hardware conversion to float32 (vcvtph2ps) reads exactly. The two NaN
    codes (0x7F, 0xFF) decode to 480/256; checkpoints hold no NaN.
    """
    if not _is_1d(array, types.uint8):
        return None

    def codegen(context, builder, sig, args):
        raw = builder.load(_lanes_pointer(context, builder, sig.args[0], *args, _I8), align=1)
        v16 = ir.VectorType(_I16, LANES)
        wide = builder.shl(builder.zext(raw, v16), ir.Constant(v16, [8] * LANES))
        # arithmetic shift: the sign reaches bit 15 and 14; bit 14 is then cleared
        bits = builder.and_(
            builder.ashr(wide, ir.Constant(v16, [1] * LANES)), ir.Constant(v16, [0xBFFF] * LANES)
        )
        half = builder.bitcast(bits, ir.VectorType(ir.HalfType(), LANES))
        return builder.fpext(half, _VF)

    return signature(f32x16, array, index), codegen


@intrinsic
def vround_bf16(typingctx, v):
    """Each lane rounded to bfloat16 (nearest, ties to even) and widened back: torch's rounding."""

    def codegen(context, builder, sig, args):
        bits = builder.bitcast(args[0], _VI)
        odd = builder.and_(builder.lshr(bits, _splat_int(16)), _splat_int(1))
        rounded = builder.add(builder.add(bits, _splat_int(0x7FFF)), odd)
        return builder.bitcast(builder.and_(rounded, _splat_int(-65536)), _VF)

    return signature(f32x16, f32x16), codegen


@intrinsic
def vround_f16(typingctx, v):
    """Each lane rounded to float16 (nearest, ties to even; float16 range and subnormals) and back."""

    def codegen(context, builder, sig, args):
        half = builder.fptrunc(args[0], ir.VectorType(ir.HalfType(), LANES))
        return builder.fpext(half, _VF)

    return signature(f32x16, f32x16), codegen


@lru_cache(maxsize=1)
def cpu_features() -> frozenset[str]:
    """The features of the CPU numba compiles for: NUMBA_CPU_FEATURES when NUMBA_CPU_NAME names a
    target (e.g. `generic` for a portable cache: none), else the host's."""
    from numba.core import config

    if config.CPU_NAME and config.CPU_NAME != "host":
        listed = (config.CPU_FEATURES or "").split(",")
        return frozenset(f[1:] for f in listed if f.startswith("+"))
    import llvmlite.binding as llvm

    return frozenset(name for name, on in llvm.get_host_cpu_features().items() if on)


FAST_LOOKUP = "avx512f" in cpu_features()


@intrinsic
def vlookup16(typingctx, table, index):
    """table[index[i]] in every lane i (index lanes 0..15)."""

    def codegen(context, builder, sig, args):
        tab, idx = args
        features = cpu_features()
        if "avx512f" in features:
            return _call(builder, "llvm.x86.avx512.permvar.sf.512", _VF, [tab, idx])
        if "avx2" in features:
            v8f, v8i = ir.VectorType(_F32, 8), ir.VectorType(_I32, 8)
            first = ir.Constant(ir.VectorType(_I32, 8), list(range(8)))
            second = ir.Constant(ir.VectorType(_I32, 8), list(range(8, 16)))
            tab_lo = builder.shuffle_vector(tab, tab, first)
            tab_hi = builder.shuffle_vector(tab, tab, second)
            halves = []
            for part in (first, second):
                i8 = builder.shuffle_vector(idx, idx, part)
                lo = _call(builder, "llvm.x86.avx2.permps", v8f, [tab_lo, i8])
                hi = _call(builder, "llvm.x86.avx2.permps", v8f, [tab_hi, i8])
                upper = builder.icmp_signed(">", i8, ir.Constant(v8i, [7] * 8))
                halves.append(builder.select(upper, hi, lo))
            return builder.shuffle_vector(
                halves[0], halves[1], ir.Constant(_VI, list(range(LANES)))
            )
        out = ir.Constant(_VF, ir.Undefined)
        for lane in range(LANES):
            at = ir.Constant(_I32, lane)
            picked = builder.extract_element(tab, builder.extract_element(idx, at))
            out = builder.insert_element(out, picked, at)
        return out

    return signature(f32x16, f32x16, i32x16), codegen
