"""`onnx.backend.base.Backend` on top of the compiler.

`prepare(model)` returns a rep; `rep.run(inputs)` compiles the model for the
actual input shapes (and, where shapes depend on input values, such as a
Reshape's shape fed as an input, for those values), links a shared object,
loads it with cffi and calls it.  Like XLA's JIT, it compiles once per
signature and caches the result; a model whose inputs name their unknown dims
(dim_param) is compiled once with those dims bounded (`--dim`) by the next power
of two of the largest extent seen, and again, with larger bounds, only when a call
exceeds them (`AotcRep._bounded_for`); where a bounded build is refused, per
signature.  This is how the ONNX node conformance cases run against real
generated code.

Sequence values (lists of arrays) and optionals (None, or the value) are
flattened into the compiled model's tensors, "NAME.0", "NAME.1"... for a
sequence and none for an empty optional (frontends/onnx/boundary.py); the
signature includes each sequence's length and which optionals are empty.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from .driver import CompileOptions, compile_model
from .errors import AotcError, InputValuesRequired
from .frontends.onnx import uses_onnxruntime_extras
from .ir.bounds import DimRange

# inputs whose values were asked for, and still asked for again: give up
_MAX_SPECIALISATIONS = 8


class AotcRep(BackendRep):
    def __init__(self, model: onnx.ModelProto, options: CompileOptions):
        self._model = model
        self._options = options
        initializers = {i.name for i in model.graph.initializer}
        self._inputs = [i for i in model.graph.input if i.name not in initializers]
        self._input_names = [i.name for i in self._inputs]
        self._outputs_type = namedtuple(
            "Outputs", [o.name for o in model.graph.output], rename=True
        )
        self._value_inputs: list[str] = []  # (flat) inputs whose values determine shapes
        self._cache: dict[tuple, object] = {}
        self._symbols = _named_dims(self._inputs)  # input -> {dim: its dim_param}
        # the bounded build: (bounds by dim name, the loaded model); False once refused
        self._bounded: tuple[dict[str, int], object] | bool | None = None
        self.ran_bounded = False  # whether the last run ran the bounded build

    def run(self, inputs, **kwargs):
        flat, structure = _flatten_inputs(self._inputs, self._by_name(inputs))
        loaded = self._bounded_for(flat, structure)
        self.ran_bounded = loaded is not None
        loaded = loaded or self._compiled_for(flat, structure)
        outputs = loaded.run([flat[spec.name] for spec in loaded.model_inputs])
        named = dict(zip((spec.name for spec in loaded.model_outputs), outputs))
        return self._outputs_type(*_regroup_outputs(self._model.graph.output, named))

    def _by_name(self, inputs) -> dict:
        if isinstance(inputs, dict):
            return {name: inputs[name] for name in self._input_names}
        if isinstance(inputs, np.ndarray):
            inputs = [inputs]
        if len(inputs) != len(self._input_names):
            raise AotcError(f"expected {len(self._input_names)} inputs, got {len(inputs)}")
        return dict(zip(self._input_names, inputs))

    def _signature(self, flat: dict[str, np.ndarray], structure: dict) -> tuple:
        shapes = tuple((n, a.shape, a.dtype.str) for n, a in flat.items())
        values = tuple((n, flat[n].tobytes()) for n in self._value_inputs if n in flat)
        return shapes, tuple(structure.items()), values

    def _bounded_for(self, flat: dict[str, np.ndarray], structure: dict[str, int | None]):
        """The model compiled once for every call whose named dims fit its bounds (the
        next power of two of each one's largest extent so far); None where the model
        names no dims, takes sequences or optionals, has shapes that depend on input
        values, or a bounded build was refused."""
        if self._bounded is False or structure or self._value_inputs or not self._symbols:
            return None
        extents: dict[str, int] = {}
        for name, dims in self._symbols.items():
            shape = flat[name].shape if name in flat else None
            if shape is None or max(dims, default=-1) >= len(shape):
                return None
            for dim, symbol in dims.items():
                extents[symbol] = max(extents.get(symbol, 0), shape[dim])
        if isinstance(self._bounded, tuple):
            bounds, loaded = self._bounded
            if all(extents[s] <= bounds[s] for s in extents):
                return loaded
            extents = {s: max(e, bounds[s]) for s, e in extents.items()}
        bounds = {s: 1 << max(e - 1, 0).bit_length() for s, e in extents.items()}
        options = CompileOptions(
            name=self._options.name,
            dim_extents={s: DimRange(0, b) for s, b in bounds.items()},
            target=self._options.target,
            opt_level=self._options.opt_level,
        )
        try:
            loaded = compile_model(self._model, options).load()
        except AotcError:
            self._bounded = False
            return None
        self._bounded = (bounds, loaded)
        return loaded

    def _compiled_for(self, flat: dict[str, np.ndarray], structure: dict[str, int | None]):
        for _ in range(_MAX_SPECIALISATIONS):
            key = self._signature(flat, structure)
            if key in self._cache:
                return self._cache[key]
            options = CompileOptions(
                name=self._options.name,
                input_shapes={n: a.shape for n, a in flat.items()},
                input_values={n: flat[n] for n in self._value_inputs if n in flat},
                input_structure=structure,
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


def _named_dims(infos) -> dict[str, dict[int, str]]:
    """Each tensor input's dims that the model names (dim_param), by input."""
    named: dict[str, dict[int, str]] = {}
    for info in infos:
        if not info.type.HasField("tensor_type") or not info.type.tensor_type.HasField("shape"):
            continue
        dims = {
            i: d.dim_param for i, d in enumerate(info.type.tensor_type.shape.dim) if d.dim_param
        }
        if dims:
            named[info.name] = dims
    return named


def _flatten_inputs(infos, values: dict) -> tuple[dict[str, np.ndarray], dict[str, int | None]]:
    """Graph input values (arrays; lists for sequences; None for an optional holding
    nothing) as the compiled model's tensors by name, and the structure to compile for
    (CompileOptions.input_structure)."""
    flat: dict[str, np.ndarray] = {}
    structure: dict[str, int | None] = {}
    for info in infos:
        value = values[info.name]
        if value is None:
            structure[info.name] = None
        elif isinstance(value, (list, tuple)) and _is_sequence(info.type):
            structure[info.name] = len(value)
            for i, item in enumerate(value):
                flat[f"{info.name}.{i}"] = np.asarray(item)
        else:
            flat[info.name] = np.asarray(value)
    return flat, structure


def _regroup_outputs(infos, named: dict[str, np.ndarray]) -> list:
    """The compiled model's tensors by name as graph output values (see _flatten_inputs)."""
    results = []
    for info in infos:
        dtype = _numpy_dtype(info.type)
        if info.name in named:
            results.append(_as_dtype(named[info.name], dtype))
            continue
        items = []
        while f"{info.name}.{len(items)}" in named:
            items.append(_as_dtype(named[f"{info.name}.{len(items)}"], dtype))
        results.append(items if items or _is_sequence(info.type, optional=False) else None)
    return results


def _is_sequence(type_proto: onnx.TypeProto, optional: bool = True) -> bool:
    """Whether values of this type are sequences (or, if `optional`, optional sequences)."""
    if optional and type_proto.HasField("optional_type"):
        type_proto = type_proto.optional_type.elem_type
    return type_proto.HasField("sequence_type")


class AotcBackend(Backend):
    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device.upper().startswith("CPU")

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs) -> AotcRep:
        try:
            super().prepare(model, device, **kwargs)
        except onnx.checker.ValidationError:
            # onnx's checker refuses the ops onnxruntime adds to ONNX's domain, which the
            # importer lowers (and checks) itself
            if not uses_onnxruntime_extras(model):
                raise
        options = CompileOptions(
            name=kwargs.get("name", "model"),
            target=kwargs.get("target", "host"),
            opt_level=kwargs.get("opt_level", 2),
        )
        return AotcRep(model, options)

    @classmethod
    def run_model(cls, model, inputs, device="CPU", **kwargs):
        return cls.prepare(model, device, **kwargs).run(inputs)


def _numpy_dtype(type_proto: onnx.TypeProto):
    """The numpy dtype ONNX uses for an output's tensors (ml_dtypes types for bf16...)."""
    while type_proto.HasField("optional_type") or type_proto.HasField("sequence_type"):
        inner = type_proto.optional_type if type_proto.HasField("optional_type") else None
        type_proto = (inner or type_proto.sequence_type).elem_type
    tensor = type_proto.tensor_type if type_proto.HasField("tensor_type") else None
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
