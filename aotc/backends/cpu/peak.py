"""The f32 multiply-add peak of one core of this machine, for code of a CPU target.

A kernel of independent multiply-add chains on the target's widest vectors, compiled
for the target and run here (LLVM's JIT): as many chains as the vector registers hold,
so each unit issues one every cycle whatever its latency.  It is what a GEMM's micro
kernel could reach at best, the roof of `aotc profile`'s roofline.  A target without
fused multiply-add gets chains of multiplies and chains of adds (one FLOP each).
"""

from __future__ import annotations

import ctypes
import time

import llvmlite.binding as llvm
from llvmlite import ir

from ...errors import AotcError
from ..llvm.lltypes import F32, I64
from .target import CpuTarget, target_machine

# (architecture, vector bits) -> vector registers; a few stay free for the operands
VECTOR_REGISTERS = {("x86_64", 128): 16, ("x86_64", 256): 16, ("x86_64", 512): 32}
DEFAULT_REGISTERS = 32  # aarch64's NEON
SPARE_REGISTERS = 4
# how long one timed run lasts at least, and how many are timed (the best counts)
MIN_SECONDS = 0.02
TIMED_RUNS = 5


def peak_gflops(target: CpuTarget) -> float:
    """The measured peak, in GFLOP/s; an AotcError where `target`'s code cannot run here."""
    if target.arch != llvm.get_process_triple().split("-", 1)[0]:
        raise AotcError(f"cannot measure the peak of {target}: its code does not run here")
    lanes = target.vector_bits // 32
    registers = VECTOR_REGISTERS.get((target.arch, target.vector_bits), DEFAULT_REGISTERS)
    chains = registers - SPARE_REGISTERS
    module = llvm.parse_assembly(str(_chains_module(target, lanes, chains)))
    module.verify()
    engine = llvm.create_mcjit_compiler(module, target_machine(target))
    engine.finalize_object()
    signature = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_int64, ctypes.c_float, ctypes.c_float)
    kernel = signature(engine.get_function_address("chains"))
    iterations = 1024
    while _seconds(kernel, iterations) < MIN_SECONDS:
        iterations *= 2
    best = min(_seconds(kernel, iterations) for _ in range(TIMED_RUNS))
    flops_per_iteration = chains * lanes * (2 if target.has_fma else 1)
    return iterations * flops_per_iteration / best / 1e9


def _seconds(kernel, iterations: int) -> float:
    start = time.perf_counter()
    kernel(iterations, 1.0, 0.0)  # acc * 1 + 0: every value stays normal (no slow subnormals)
    return time.perf_counter() - start


def _chains_module(target: CpuTarget, lanes: int, chains: int) -> ir.Module:
    """`float chains(i64 n, float x, float y)`: `chains` vector accumulators, each updated
    n times by acc * x + y (fused, or alternately multiplied and added)."""
    module = ir.Module(name="peak")
    module.triple = target.triple
    vector = ir.VectorType(F32, lanes)
    fma = ir.Function(module, ir.FunctionType(vector, [vector] * 3), f"llvm.fma.v{lanes}f32")
    function = ir.Function(module, ir.FunctionType(F32, [I64, F32, F32]), "chains")
    n, x, y = function.args
    entry, loop, done = (function.append_basic_block(b) for b in ("entry", "loop", "done"))
    b = ir.IRBuilder(entry)
    xs, ys = (_splat(b, value, vector) for value in (x, y))
    b.branch(loop)
    b.position_at_end(loop)
    i = b.phi(I64)
    accumulators = [b.phi(vector) for _ in range(chains)]
    updated = []
    for c, acc in enumerate(accumulators):
        if target.has_fma:
            updated.append(b.call(fma, [acc, xs, ys]))
        else:
            updated.append(b.fmul(acc, xs) if c % 2 else b.fadd(acc, ys))
    following = b.add(i, ir.Constant(I64, 1))
    b.cbranch(b.icmp_signed(">=", following, n), done, loop)
    i.add_incoming(ir.Constant(I64, 0), entry)
    i.add_incoming(following, loop)
    for c, (acc, new) in enumerate(zip(accumulators, updated)):
        acc.add_incoming(ir.Constant(vector, [float(c + 1)] * lanes), entry)
        acc.add_incoming(new, loop)
    b.position_at_end(done)
    total = updated[0]
    for value in updated[1:]:
        total = b.fadd(total, value)
    b.ret(b.extract_element(total, ir.Constant(I64, 0)))
    return module


def _splat(b: ir.IRBuilder, value: ir.Value, vector: ir.VectorType) -> ir.Value:
    single = b.insert_element(ir.Constant(vector, None), value, ir.Constant(I64, 0))
    zeros = ir.Constant(ir.VectorType(ir.IntType(32), vector.count), None)
    return b.shuffle_vector(single, ir.Constant(vector, None), zeros)
