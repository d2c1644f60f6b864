"""StableHLO made by JAX (tests/fixtures/stablehlo, see ../hlo/make_fixtures.py): every
NAME.mlir and NAME.jaxexport compiled with the CLI, linked, called through cffi and
compared with the outputs JAX computed (NAME.npz of the HLO fixtures); bad input ends
in one line."""

from __future__ import annotations

import numpy as np
import pytest
from aotc_testing import REPO
from test_cli import assert_one_line_error
from test_hlo_fixtures import aotc, compare, fixture_arrays, run_compiled

from aotc.frontends.stablehlo import import_stablehlo
from aotc.ir.evaluate import evaluate
from aotc.ir.types import from_storage

FIXTURES = REPO / "tests" / "fixtures" / "stablehlo"
MODULES = sorted(FIXTURES.glob("*.mlir"))
NAMES = [p.stem for p in MODULES]


def test_enough_fixtures():
    assert len(NAMES) >= 20
    assert "transformer_block" in NAMES
    for name in NAMES:  # each has its export artifact and the HLO fixture's npz; small
        for path in (FIXTURES / f"{name}.mlir", FIXTURES / f"{name}.jaxexport"):
            assert path.stat().st_size < 200 * 1024, path
        assert (REPO / "tests" / "fixtures" / "hlo" / f"{name}.npz").is_file(), name


def compile_and_compare(source, name: str, build) -> None:
    inputs, outputs = fixture_arrays(name)
    result = aotc("compile", source, "-o", build, "--name", name, "-q")
    assert result.returncode == 0, result.stderr
    got = run_compiled(build, name, inputs, outputs)
    assert len(got) == len(outputs)
    for k, ((dtype, expected), raw) in enumerate(zip(outputs, got)):
        compare(name, k, dtype, from_storage(raw, dtype), from_storage(expected, dtype))


@pytest.mark.parametrize("name", NAMES)
def test_mlir(name, tmp_path):
    compile_and_compare(FIXTURES / f"{name}.mlir", name, tmp_path)


@pytest.mark.parametrize("name", NAMES)
def test_jaxexport(name, tmp_path):
    pytest.importorskip("jax", reason="reading a .jaxexport needs jax")
    compile_and_compare(FIXTURES / f"{name}.jaxexport", name, tmp_path)


def test_jaxexport_without_jax_is_one_line(tmp_path):
    try:
        import jax  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("jax is installed here: the refusal cannot happen")
    result = aotc("compile", FIXTURES / "mlp_forward.jaxexport", "-o", tmp_path / "out")
    assert_one_line_error(result, "mlp_forward.jaxexport", "needs jax", "aotc[jax]")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", ["transformer_block", "fori_loop", "cond", "maxpool_grad"])
def test_evaluator_agrees(name):
    """The imported IR itself, before any pass, computes what JAX computed."""
    module = import_stablehlo(FIXTURES / f"{name}.mlir")
    inputs, outputs = fixture_arrays(name)
    args = [from_storage(a, p.shape.dtype) for a, p in zip(inputs, module.entry.parameters)]
    values = evaluate(module, args)
    values = values if isinstance(values, tuple) else (values,)
    assert len(values) == len(outputs)
    for k, (value, (dtype, expected)) in enumerate(zip(values, outputs)):
        compare(name, k, dtype, value, from_storage(expected, dtype))


def test_text_itself_imports():
    text = (FIXTURES / "mlp_forward.mlir").read_text()
    module = import_stablehlo(text)
    assert module.input_names == ["arg0", "arg1", "arg2", "arg3", "arg4"]
    assert module.output_names == ["result"]


MODULE = """// written by hand
module @m {
  func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {
    %0 = %s
    return %0 : tensor<4xf32>
  }
}
"""


@pytest.mark.parametrize(
    "body, words",
    [
        ("stablehlo.frobnicate %arg0 : tensor<4xf32>", ["stablehlo.frobnicate", "line 4"]),
        (
            (
                'stablehlo.custom_call @lapack_sgetrf_ffi(%arg0) {backend_config = ""} : '
                "(tensor<4xf32>) -> tensor<4xf32>"
            ),
            ["stablehlo.custom_call @lapack_sgetrf_ffi is not supported", "line 4"],
        ),
        ("stablehlo.add %arg0, %arg0 : tensor<4xf32> )", ["line 4", "')'"]),
        ("stablehlo.add %arg0, %nope : tensor<4xf32>", ["line 4", "%nope"]),
        ("chlo.lgamma %arg0 : tensor<4xf32> -> tensor<4xf32>", ["chlo.lgamma", "line 4"]),
    ],
    ids=["unknown-op", "custom-call", "malformed", "undefined-value", "refused-chlo"],
)
def test_refused_in_one_line(body, words, tmp_path):
    module = tmp_path / "m.mlir"
    module.write_text(MODULE.replace("%s", body))
    result = aotc("compile", module, "-o", tmp_path / "out", "--name", "m")
    assert_one_line_error(result, "m.mlir", *words)
    assert not (tmp_path / "out").exists()


def test_dynamic_dim_is_refused_in_one_line(tmp_path):
    module = tmp_path / "dyn.txt"  # sniffed by content: `module` after a comment
    module.write_text(
        MODULE.replace("%s", "stablehlo.abs %arg0 : tensor<4xf32>").replace(
            "%arg0: tensor<4xf32>", "%arg0: tensor<?xf32>"
        )
    )
    result = aotc("compile", module, "-o", tmp_path / "out", "--name", "m")
    assert_one_line_error(result, "dyn.txt", "dynamic dim '?'", "line 3")
    assert not (tmp_path / "out").exists()


LITERALS = """#loc1 = loc("here")
module {
  func.func @main(%arg0: tensor<2x2xf32> loc("x")) -> (tensor<2x2xf32>, tensor<2xbf16>,
      tensor<3xui8>, tensor<2xi1>, tensor<2xf32>, tensor<2xf32>, tensor<2x2xi1>) {
    %0 = stablehlo.constant dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32>
    %1 = "stablehlo.add"(%arg0, %0) : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32> loc(#loc1)
    %2 = stablehlo.constant dense<1.5> : tensor<2xbf16>
    %3 = stablehlo.constant dense<[1, 2, 255]> : tensor<3xui8>
    %4 = stablehlo.constant dense<[true, false]> : tensor<2xi1>
    %5 = stablehlo.constant dense<"0x0000803F00000040"> : tensor<2xf32>
    %c = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %6 = "stablehlo.reduce"(%arg0, %c) ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %m = "stablehlo.maximum"(%a, %b) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%m) : (tensor<f32>) -> ()
    }) {dimensions = array<i64: 1>} : (tensor<2x2xf32>, tensor<f32>) -> tensor<2xf32>
    %7 = "stablehlo.compare"(%arg0, %0) {comparison_direction = #stablehlo<comparison_direction GT>} : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xi1>
    return %1, %2, %3, %4, %5, %6, %7 : tensor<2x2xf32>, tensor<2xbf16>, tensor<3xui8>, tensor<2xi1>, tensor<2xf32>, tensor<2xf32>, tensor<2x2xi1>
  }
}
"""


def test_literals_and_generic_forms():
    x = np.array([[0.5, 3.0], [-1.0, 5.0]], np.float32)
    got = evaluate(import_stablehlo(LITERALS), [x])
    wanted = (
        x + [[1, 2], [3, 4]],
        [1.5, 1.5],
        [1, 2, 255],
        [True, False],
        [1.0, 2.0],
        [3.0, 5.0],
        x > [[1, 2], [3, 4]],
    )
    assert len(got) == len(wanted)
    for value, expected in zip(got, wanted):
        np.testing.assert_array_equal(value, expected)


# chlo op -> numpy's; each lowered by chlo.py into IR ops
CHLO_UNARY = {
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "tan": np.tan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "square": np.square,
}


@pytest.mark.parametrize("op", sorted(CHLO_UNARY))
def test_chlo_elementwise_ops_match_numpy(op):
    """Each chlo elementwise op, evaluated over [-0.95, 0.95] (rtol 1e-5, atol 1e-6)."""
    text = f"""module {{
  func.func @main(%arg0: tensor<9xf32>) -> tensor<9xf32> {{
    %0 = chlo.{op} %arg0 : tensor<9xf32> -> tensor<9xf32>
    return %0 : tensor<9xf32>
  }}
}}
"""
    x = np.linspace(-0.95, 0.95, 9, dtype=np.float32)
    got = evaluate(import_stablehlo(text), [x])  # one result: the array itself
    np.testing.assert_allclose(got, CHLO_UNARY[op](x.astype(np.float64)), rtol=1e-5, atol=1e-6)
