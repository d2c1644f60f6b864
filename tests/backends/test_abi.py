"""The C ABI: outputs, output copies, scratch handling, run_generic, symbol prefixes."""

from __future__ import annotations

import cffi
import numpy as np
import pytest

from aotc.backends.cpu import emit_object, parse_target
from aotc.buffers import assign_buffers
from aotc.ir import ComputationBuilder, Direction, DType, Module, Op, Shape, scalar_reducer


def _two_stage_module(name="m", scale=2.0):
    """(x, y) -> (x*scale + y, sum(x*scale + y)), with an arena intermediate."""
    module = Module(name)
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(DType.F32, (8, 16)))
    y = b.parameter(1, Shape(DType.F32, (8, 16)))
    scaled = b.binary(Op.MULTIPLY, x, b.broadcast(b.scalar(scale, DType.F32), [], [8, 16]))
    total = b.binary(Op.ADD, scaled, y)
    exp = b.unary(Op.EXP, total)
    add = scalar_reducer(module, Op.ADD, DType.F32)
    b.build(b.tuple([total, b.reduce(exp, b.scalar(0.0, DType.F32), [0, 1], add)]), entry=True)
    return module


def _expected(x, y, scale=2.0):
    total = x * np.float32(scale) + y
    return total, np.exp(total).sum()


def test_scratch_null_caller_and_misaligned(compile_module, rng):
    compiled = compile_module(_two_stage_module())
    assert compiled.plan.arena_bytes > 0
    x, y = (rng.standard_normal((8, 16)).astype(np.float32) for _ in range(2))
    want_total, want_sum = _expected(x, y)
    for scratch in ("caller", "null"):
        for generic in (False, True):
            total, summed = compiled.run(x, y, scratch=scratch, generic=generic)
            np.testing.assert_allclose(total, want_total, rtol=1e-6)
            np.testing.assert_allclose(summed, want_sum, rtol=1e-5)
    assert compiled.run(x, y, scratch="misaligned") == 1
    assert compiled.run(x, y, scratch="misaligned", generic=True) == 1


def test_outputs_that_need_copies(compile_module, rng):
    """A parameter, a constant and one value twice as outputs; a non-tuple root."""
    module = Module("copies")
    b = ComputationBuilder(module, "main")
    x = b.parameter(0, Shape(DType.S16, (3, 5)))
    table = b.constant(np.arange(6, dtype=np.float64).reshape(2, 3))
    doubled = b.binary(Op.ADD, x, x)
    b.build(b.tuple([x, table, doubled, doubled, b.reshape(doubled, [15])]), entry=True)
    plan = assign_buffers(module)
    assert plan.output_copies, "the test needs output copies"
    xv = rng.integers(-50, 50, (3, 5)).astype(np.int16)
    got = compile_module(module).run(xv)
    np.testing.assert_array_equal(got[0], xv)
    np.testing.assert_array_equal(got[1], np.arange(6.0).reshape(2, 3))
    for out in got[2:4]:
        np.testing.assert_array_equal(out, 2 * xv)
    np.testing.assert_array_equal(got[4], (2 * xv).reshape(15))

    single = Module("single")
    b = ComputationBuilder(single, "main")
    p = b.parameter(0, Shape(DType.U32, (4,)))
    b.build(b.unary(Op.NOT, p), entry=True)
    pv = np.array([0, 1, 2**31, 7], np.uint32)
    (out,) = compile_module(single, name="single").run(pv)
    np.testing.assert_array_equal(out, ~pv)


def test_no_inputs_and_pred_output(compile_module):
    module = Module("leaf")
    b = ComputationBuilder(module, "main")
    iota = b.iota(Shape(DType.S32, (6,)), 0)
    three = b.broadcast(b.scalar(3, DType.S32), [], [6])
    b.build(b.tuple([b.compare(iota, three, Direction.LT)]), entry=True)
    (out,) = compile_module(module, name="leaf").run()
    np.testing.assert_array_equal(out, np.arange(6) < 3)


def test_symbol_prefixes_let_two_models_link_together(link, rng):
    scales = {"first": 2.0, "second": -1.0}
    modules = {name: _two_stage_module(name, scale) for name, scale in scales.items()}
    objects = {
        name: emit_object(module, assign_buffers(module), name, parse_target("host"))
        for name, module in modules.items()
    }
    library = link(objects)
    ffi = cffi.FFI()
    ffi.cdef("".join(f"int {n}_run(void *, void *, void *, void *, void *);" for n in scales))
    lib = ffi.dlopen(str(library))
    x, y = (rng.standard_normal((8, 16)).astype(np.float32) for _ in range(2))
    for name, scale in scales.items():
        total, summed = np.zeros((8, 16), np.float32), np.zeros((), np.float32)
        args = [ffi.from_buffer(a) for a in (x, y, total, summed)]
        assert getattr(lib, f"{name}_run")(*args, ffi.NULL) == 0
        want_total, want_sum = _expected(x, y, scale)
        np.testing.assert_allclose(total, want_total, rtol=1e-6)
        np.testing.assert_allclose(summed, want_sum, rtol=1e-5)


def test_same_input_gives_identical_objects():
    target = parse_target("host")
    first = _two_stage_module()
    obj = emit_object(first, assign_buffers(first), "m", target)
    assert emit_object(first, assign_buffers(first), "m", target) == obj
    rebuilt = _two_stage_module()  # new objects, new ids: same bytes
    assert emit_object(rebuilt, assign_buffers(rebuilt), "m", target) == obj


def test_every_opcode_has_a_rule():
    from aotc.backends.cpu.control import CONTROL_KERNELS
    from aotc.backends.llvm.rules import KERNELS, RULES
    from aotc.ir import Op
    from aotc.ir.ops import PADDED_OPS

    missing = set(Op) - set(RULES) - set(KERNELS) - set(CONTROL_KERNELS)
    missing -= {Op.PARAMETER, Op.CALL}  # parameters are bound; calls are inlined before
    missing -= PADDED_OPS  # the bounded-dims pass replaces them
    assert not missing, sorted(op.text for op in missing)


def test_model_name_must_be_a_c_identifier():
    from aotc.errors import AotcError

    module = _two_stage_module()
    with pytest.raises(AotcError):
        emit_object(module, assign_buffers(module), "my-model", parse_target("host"))
