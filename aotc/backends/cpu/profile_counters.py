"""Per-kernel time and call counters of an instrumented build (`aotc profile`).

Only built when a compile asks for them: the entry function then reads the monotonic
clock around each of its kernel calls and adds the nanoseconds and one call to the
kernel's entries of two exported arrays.  Exported symbols, K the entry function's
kernel count, in run order:

- `int64_t NAME_profile_ns[K]`, `int64_t NAME_profile_calls[K]`: the sums so far;
- `const char *const NAME_profile_names[K]`: each kernel's instruction name;
- `void NAME_profile_reset(void)`: zero both arrays.

A while or conditional is one kernel of the entry function: the kernels of its
computations are counted under it, not on their own.  The adds are atomic, so runs on
several threads (each with its own scratch) count every call.  The clock is
clock_gettime(CLOCK_MONOTONIC) from libc, whose rate is known, unlike a cycle counter's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from llvmlite import ir

from ..llvm.lltypes import I8, I32, I64, PTR, VOID, i32, i64

# Linux's value on every architecture aotc targets; struct timespec is two 64-bit fields
CLOCK_MONOTONIC = 1
TIMESPEC = ir.LiteralStructType([I64, I64])

# call(builder, position in run order, kernel, its arguments): emits one kernel call
KernelCall = Callable[[ir.IRBuilder, int, ir.Function, Sequence[ir.Value]], None]


def plain_call(b: ir.IRBuilder, k: int, kernel: ir.Function, args: Sequence[ir.Value]) -> None:
    """The kernel call of an uninstrumented build."""
    b.call(kernel, args)


def counted_calls(llmod: ir.Module, name: str, kernel_names: Sequence[str]) -> KernelCall:
    """Define the counters, the reset function and the names table of `kernel_names`;
    returns the call that times kernel k into entry k."""
    count = len(kernel_names)
    table = ir.ArrayType(I64, max(count, 1))
    nanoseconds = _zeroed(llmod, f"{name}_profile_ns", table)
    calls = _zeroed(llmod, f"{name}_profile_calls", table)
    _emit_reset(llmod, name, [nanoseconds, calls])
    _emit_names(llmod, name, kernel_names)
    now = _emit_clock(llmod, name)

    def timed_call(b: ir.IRBuilder, k: int, kernel: ir.Function, args: Sequence[ir.Value]):
        start = b.call(now, [])
        b.call(kernel, args)
        elapsed = b.sub(b.call(now, []), start)
        for counter, amount in ((nanoseconds, elapsed), (calls, i64(1))):
            slot = b.gep(counter, [i64(0), i64(k)], inbounds=True, source_etype=table)
            b.atomic_rmw("add", slot, amount, "monotonic")

    return timed_call


def _zeroed(llmod: ir.Module, symbol: str, typ: ir.Type) -> ir.GlobalVariable:
    variable = ir.GlobalVariable(llmod, typ, symbol)
    variable.initializer = ir.Constant(typ, None)
    variable.align = 64  # its own cache lines: apart from the model's data
    return variable


def _emit_clock(llmod: ir.Module, name: str) -> ir.Function:
    """An internal `i64 now()`: clock_gettime(CLOCK_MONOTONIC) in nanoseconds."""
    clock_gettime = ir.Function(llmod, ir.FunctionType(I32, [I32, PTR]), "clock_gettime")
    now = ir.Function(llmod, ir.FunctionType(I64, []), f"{name}.profile.now")
    now.linkage = "internal"
    now.attributes.add("nounwind")
    b = ir.IRBuilder(now.append_basic_block("entry"))
    spec = b.alloca(TIMESPEC)
    b.call(clock_gettime, [i32(CLOCK_MONOTONIC), spec])
    seconds, nanoseconds = (
        b.load(b.gep(spec, [i32(0), i32(field)], source_etype=TIMESPEC), typ=I64)
        for field in (0, 1)
    )
    b.ret(b.add(b.mul(seconds, i64(1_000_000_000)), nanoseconds))
    return now


def _emit_reset(llmod: ir.Module, name: str, counters: Sequence[ir.GlobalVariable]) -> None:
    """`void NAME_profile_reset(void)`: zero the counters."""
    memset = llmod.globals.get("llvm.memset.p0.i64") or ir.Function(
        llmod, ir.FunctionType(VOID, [PTR, I8, I64, ir.IntType(1)]), "llvm.memset.p0.i64"
    )
    reset = ir.Function(llmod, ir.FunctionType(VOID, []), f"{name}_profile_reset")
    reset.attributes.add("nounwind")
    b = ir.IRBuilder(reset.append_basic_block("entry"))
    for counter in counters:
        size = counter.value_type.count * 8
        b.call(memset, [counter, ir.Constant(I8, 0), i64(size), ir.Constant(ir.IntType(1), 0)])
    b.ret_void()


def _emit_names(llmod: ir.Module, name: str, kernel_names: Sequence[str]) -> None:
    """`const char *const NAME_profile_names[K]`: the kernels' names, NUL-terminated."""
    pointers = []
    for k, kernel_name in enumerate(kernel_names):
        text = bytearray(kernel_name.encode() + b"\0")
        string = ir.GlobalVariable(llmod, ir.ArrayType(I8, len(text)), f"{name}.profile.name.{k}")
        string.initializer = ir.Constant(string.value_type, text)
        string.global_constant = True
        string.linkage = "private"
        pointers.append(string)
    table = ir.ArrayType(PTR, max(len(pointers), 1))
    names = ir.GlobalVariable(llmod, table, f"{name}_profile_names")
    names.initializer = ir.Constant(table, pointers or None)
    names.global_constant = True
