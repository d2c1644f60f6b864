"""The emission context: the LLVM module and builder rules emit into.

It also owns how a rule reaches functions outside its IR: LLVM intrinsics
(declared on first use, name-mangled by operand types) and libm-style math
functions, whose names come from a `MathLibrary` (a GPU backend swaps in
its own, e.g. `__nv_erff`).  Buffers (where a `Slice` lives at run time)
come from the kernel being emitted, through `slice_pointer`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol, TypeAlias

from llvmlite import ir

from ...ir import Instruction
from .lltypes import F16, F32, F64, I8, i64
from .loops import entry_alloca

if TYPE_CHECKING:
    from ...buffers import BufferPlan, Slice


class KernelTarget(Protocol):
    """What target-neutral rules ask of the target they emit for (a backend's own
    target class has more: vector width, GEMM tiles)."""

    has_fma: bool
    has_vector_ldexp: bool


class MathLibrary:
    """Names of the scalar math functions for one target (here: C libm)."""

    # f32 pow inline (vmath, through f64: vectorizes on CPUs); a GPU library's own powf
    # is better where f64 is slow
    inline_f32_pow = True

    def function_name(self, base: str, ty: ir.Type) -> str:
        """`erf` -> `erff` for float, `erf` for double."""
        return base + "f" if ty == F32 else base


def type_suffix(ty: ir.Type) -> str:
    """The mangling of `ty` in an overloaded intrinsic's name."""
    if isinstance(ty, ir.IntType):
        return f"i{ty.width}"
    return {F16: "f16", F32: "f32", F64: "f64"}[ty]


class EmitContext:
    """Where rules emit: module, current builder, plan, symbol prefix, rule table."""

    def __init__(
        self,
        module: ir.Module,
        plan: BufferPlan,
        prefix: str,
        rules: dict,
        math: MathLibrary | None = None,
        target: KernelTarget | None = None,
    ):
        self.module = module
        self.plan = plan
        self.prefix = prefix
        self.rules: dict[object, Rule] = rules
        self.math = math or MathLibrary()
        self.target = target  # what the kernels are for (vector width); None: unspecified
        self.builder: ir.IRBuilder | None = None  # set for each function emitted
        self.slice_pointer: Callable[[Slice], ir.Value] | None = None  # ditto
        # the current function's (inputs, outputs, arena) pointers, and how to point the
        # context at another function's builder and pointers (parallel loop bodies)
        self.kernel_pointers: Sequence[ir.Value] = ()
        self.bind: Callable[[ir.IRBuilder, Sequence[ir.Value]], None] | None = None
        # the kernel being emitted's scratch (GEMM packing...): its temporary in the
        # arena, or the workspace after it; the program sets it for each kernel
        self.workspace: Slice | None = None
        self.workspace_of: Callable[[BufferPlan, Instruction], Slice] | None = None
        # index values a loop composed of digits (elemental.compose_index): id ->
        # (value, digits, their extents), so that splitting one again reads the digits
        self.composed: dict[int, tuple[ir.Value, list[ir.Value], tuple[int, ...]]] = {}
        # id -> (least, greatest) of integer values known at compile time
        # (ir/value_ranges.py; set by the CPU program): gathers skip clamping them
        self.value_ranges: dict[int, tuple[int, int]] = {}
        # where the entry's input_dims are (bounded dims, extents.py); None: no such input
        self.input_dims: Slice | None = None

    # -- functions outside the IR ---------------------------------------------

    def intrinsic(
        self, name: str, args: Sequence[ir.Value], ret: ir.Type | None = None
    ) -> ir.Value:
        """Call LLVM intrinsic `name`, overloaded on (ret if given, then) the first argument."""
        overloads = ([ret] if ret is not None else []) + [args[0].type]
        mangled = ".".join([name] + [type_suffix(t) for t in overloads])
        result_type = ret if ret is not None else args[0].type
        return self.builder.call(self.declare(mangled, result_type, args), args)

    def memcpy(self, destination: ir.Value, source: ir.Value, size: ir.Value) -> None:
        """Copy `size` bytes (an i64) from `source` to `destination`; they do not overlap."""
        args = [destination, source, size, ir.Constant(ir.IntType(1), 0)]
        self.builder.call(self.declare("llvm.memcpy.p0.p0.i64", ir.VoidType(), args), args)

    def libm(self, base: str, args: Sequence[ir.Value]) -> ir.Value:
        """Call math library function `base` (erf, tanh, ...) at the arguments' type."""
        name = self.math.function_name(base, args[0].type)
        function = self.declare(name, args[0].type, args, pure=True)
        return self.builder.call(function, args)

    def declare(
        self, name: str, ret: ir.Type, args: Sequence[ir.Value], pure: bool = False
    ) -> ir.Function:
        existing = self.module.globals.get(name)
        if existing is not None:
            return existing
        fnty = ir.FunctionType(ret, [a.type for a in args])
        function = ir.Function(self.module, fnty, name)
        function.attributes.add("nounwind")
        if pure:  # libm as with -fno-math-errno: lets LLVM hoist and CSE the calls
            function.attributes.add("readnone")
        return function

    # -- memory -----------------------------------------------------------

    def alloca(self, ty: ir.Type, name: str = "") -> ir.Value:
        return entry_alloca(self.builder, ty, name)

    def byte_pointer(self, base: ir.Value, offset: int) -> ir.Value:
        if offset == 0:
            return base
        return self.builder.gep(base, [i64(offset)], inbounds=True, source_etype=I8)

    def constant_pointer(self, instr: Instruction) -> ir.Value:
        """Pointer to a non-scalar constant's data: its slice of the weights blob."""
        return self.slice_pointer(self.plan.slice_of(instr))


# a value of one element (a tuple for tuple-shaped results), and what produces it
Value: TypeAlias = "ir.Value | tuple"
# index (one i64 per dim) -> the element there
Gen = Callable[[Sequence[ir.Value]], Value]


class SplitGen:
    """A generator that reads each operand once, at an index it knows before emitting
    anything else (`reads(index)`: [(operand generator, its index)]), then makes its value
    of theirs (`combine(values)`): elementwise ops and pure index maps
    (ir/index_maps.py's INDEX_MAP_OPS).  Chains of them evaluate on an explicit stack
    (elemental.Memoized), not one Python call per instruction: a fused kernel may be
    deeper than Python's recursion limit."""

    __slots__ = ("combine", "reads")

    def __init__(
        self,
        reads: Callable[[Sequence[ir.Value]], list[tuple[Gen, Sequence[ir.Value]]]],
        combine: Callable[[list[Value]], Value],
    ):
        self.reads = reads
        self.combine = combine

    def __call__(self, index: Sequence[ir.Value]) -> Value:
        return self.combine([gen(at) for gen, at in self.reads(index)])


def first_value(values: list[Value]) -> Value:
    """The `combine` of a SplitGen reading one operand: its value as it is."""
    return values[0]


# opcode rule: (context, instruction, operand generators) -> the instruction's generator
Rule = Callable[[EmitContext, Instruction, list[Gen]], Gen]
