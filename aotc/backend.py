"""`onnx.backend.base.Backend` on top of the compiler.

`prepare(model)` returns a rep; `rep.run(inputs)` compiles the model for the
actual input shapes (and, where shapes depend on input values, such as a
Reshape's shape fed as an input, for those values), links a shared object,
loads it with cffi and calls it.  Like XLA's JIT, it compiles once per
signature and caches the result.  This is how the ONNX node conformance
cases run against real generated code.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from .driver import CompileOptions, compile_model
from .errors import AotcError, InputValuesRequired

# inputs whose values were asked for, and still asked for again: give up
_MAX_SPECIALISATIONS = 8


class AotcRep(BackendRep):
    def __init__(self, model: onnx.ModelProto, options: CompileOptions):
        self._model = model
        self._options = options
        initializers = {i.name for i in model.graph.initializer}
        self._input_names = [i.name for i in model.graph.input if i.name not in initializers]
        self._output_dtypes = [_numpy_dtype(o) for o in model.graph.output]
        self._outputs_type = namedtuple(
            "Outputs", [o.name for o in model.graph.output], rename=True
        )
        self._value_inputs: list[str] = []  # inputs whose values determine shapes
        self._cache: dict[tuple, object] = {}

    def run(self, inputs, **kwargs):
        arrays = self._by_name(inputs)
        loaded = self._compiled_for(arrays)
        outputs = loaded.run([arrays[spec.name] for spec in loaded.inputs])
        return self._outputs_type(
            *(_as_dtype(o, dtype) for o, dtype in zip(outputs, self._output_dtypes))
        )

    def _by_name(self, inputs) -> dict[str, np.ndarray]:
        if isinstance(inputs, dict):
            return {name: np.asarray(inputs[name]) for name in self._input_names}
        if isinstance(inputs, np.ndarray):
            inputs = [inputs]
        if len(inputs) != len(self._input_names):
            raise AotcError(f"expected {len(self._input_names)} inputs, got {len(inputs)}")
        return {name: np.asarray(a) for name, a in zip(self._input_names, inputs)}

    def _signature(self, arrays: dict[str, np.ndarray]) -> tuple:
        shapes = tuple((n, a.shape, a.dtype.str) for n, a in arrays.items())
        values = tuple((n, arrays[n].tobytes()) for n in self._value_inputs)
        return shapes, values

    def _compiled_for(self, arrays: dict[str, np.ndarray]):
        for _ in range(_MAX_SPECIALISATIONS):
            key = self._signature(arrays)
            if key in self._cache:
                return self._cache[key]
            options = CompileOptions(
                name=self._options.name,
                input_shapes={n: a.shape for n, a in arrays.items()},
                input_values={n: arrays[n] for n in self._value_inputs},
                target=self._options.target,
                opt_level=self._options.opt_level,
            )
            try:
                loaded = compile_model(self._model, options).load()
            except InputValuesRequired as need:
                new = [n for n in need.inputs if n not in self._value_inputs]
                if not new:
                    raise
                self._value_inputs += new
                continue
            self._cache[key] = loaded
            return loaded
        raise AotcError("shapes keep depending on more input values; giving up")


class AotcBackend(Backend):
    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device.upper().startswith("CPU")

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs) -> AotcRep:
        super().prepare(model, device, **kwargs)
        options = CompileOptions(
            name=kwargs.get("name", "model"),
            target=kwargs.get("target", "host"),
            opt_level=kwargs.get("opt_level", 2),
        )
        return AotcRep(model, options)

    @classmethod
    def run_model(cls, model, inputs, device="CPU", **kwargs):
        return cls.prepare(model, device, **kwargs).run(inputs)


def _numpy_dtype(value: onnx.ValueInfoProto):
    """The numpy dtype ONNX uses for an output (ml_dtypes types for bf16, float8...)."""
    tensor = value.type.tensor_type if value.type.HasField("tensor_type") else None
    if tensor is None or not tensor.elem_type:
        return None
    return onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)


def _as_dtype(array: np.ndarray, dtype) -> np.ndarray:
    if dtype is None or array.dtype == dtype:
        return array
    return array.astype(dtype)


prepare = AotcBackend.prepare
run_model = AotcBackend.run_model
supports_device = AotcBackend.supports_device
