"""The model boundary: graph inputs as entry parameters (or constants), graph outputs as
root-tuple elements, with sequences and optionals flattened into tensors.

A sequence of k tensors named NAME is k tensors "NAME.0" ... "NAME.{k-1}" (k is given by
`input_structure` for inputs, decided by the lowering for outputs); an optional holding a
value is that value; one holding nothing is no tensor at all.  `aotc.backend` flattens
and regroups Python values by the same names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import onnx

from ...errors import ModelError, UnsupportedError
from ...ir import Instruction, Shape
from ...ir.bounds import DimRange
from ...memory_limits import check_size
from .dtypes import to_dtype
from .map_inputs import map_keys
from .sequence import NO_VALUE, SequenceValue

if TYPE_CHECKING:
    from .importer import GraphLowering


@dataclass(frozen=True)
class ValueType:
    """An ONNX value type aotc can hold: a tensor, a sequence of them, either optional."""

    tensor: onnx.TypeProto.Tensor
    sequence: bool
    optional: bool


def value_type(type_proto: onnx.TypeProto, what: str) -> ValueType:
    optional = type_proto.HasField("optional_type")
    if optional:
        type_proto = type_proto.optional_type.elem_type
    sequence = type_proto.HasField("sequence_type")
    if sequence:
        type_proto = type_proto.sequence_type.elem_type
    if not type_proto.HasField("tensor_type"):
        raise UnsupportedError(f"{what} is not a tensor, a sequence of tensors or an optional")
    return ValueType(type_proto.tensor_type, sequence, optional)


def element_name(name: str, index: int) -> str:
    """The flat name of a sequence's tensor `index`."""
    return f"{name}.{index}"


class ModelBoundary:
    """Binds the top graph's inputs and collects its outputs (see the module docstring)."""

    def __init__(
        self,
        top: GraphLowering,
        input_shapes: Mapping[str, Sequence[int | DimRange]] | None,
        input_values: Mapping[str, np.ndarray] | None,
        input_structure: Mapping[str, int | None] | None,
        dim_extents: Mapping[str, int | DimRange] | None = None,
    ):
        self.top = top
        self.input_shapes = dict(input_shapes or {})
        self.input_values = dict(input_values or {})
        self.structure = dict(input_structure or {})
        self.dim_extents = dict(dim_extents or {})
        self.inputs = [i for i in top.graph.input if i.name not in top.initializers]

    def bind_inputs(self) -> list[str]:
        """Bind each graph input to parameters or constants; the parameters' names."""
        layout = {info.name: self._flat_inputs(info) for info in self.inputs}
        flat = [n for names in layout.values() if names is not None for n in names]
        self._check_names(flat, layout)
        b, values = self.top.b, self.top.values
        parameters: list[str] = []
        for info in self.inputs:
            names = layout[info.name]
            if names is None:
                values[info.name] = NO_VALUE
                continue
            if info.type.HasField("map_type"):  # a tensor of its values in key order
                param = self._map_parameter(info, len(parameters))
                parameters.append(info.name)
                values[info.name] = param
                continue
            kind = value_type(info.type, f"input '{info.name}'")
            tensors = []
            for name in names:
                if name in self.input_values:
                    tensors.append(self._constant(name, kind.tensor))
                    continue
                given = self.input_shapes.get(name)
                shape = input_shape(name, kind.tensor, given, dim_extents=self.dim_extents)
                dims = input_dims(name, kind.tensor, given, dim_extents=self.dim_extents)
                for d, dim in enumerate(dims):  # the least extents of bounded dims
                    if isinstance(dim, DimRange) and shape.is_dynamic(d) and dim.low:
                        b.module.input_lows[(len(parameters), d)] = dim.low
                param = b.parameter(len(parameters), shape, name=name)
                self.top.input_names[id(param)] = name
                parameters.append(name)
                tensors.append(param)
            values[info.name] = SequenceValue(tensors) if kind.sequence else tensors[0]
        return parameters

    def flat_outputs(self) -> tuple[list[Instruction], list[str]]:
        """The graph outputs' tensors, in order, and their names."""
        tensors: list[Instruction] = []
        names: list[str] = []
        for output in self.top.graph.output:
            value = self.top.lookup(output.name)
            if isinstance(value, Instruction):
                tensors.append(value)
                names.append(output.name)
            elif isinstance(value, SequenceValue):
                if not value and output.type.HasField("optional_type"):
                    raise UnsupportedError(
                        f"output '{output.name}' is an optional holding an empty sequence, "
                        "which the C API cannot tell from one holding nothing"
                    )
                elements = [element_name(output.name, i) for i in range(len(value))]
                self._check_clashes(elements)
                tensors.extend(value)
                names.extend(elements)
        return tensors, names

    def _map_parameter(self, info: onnx.ValueInfoProto, number: int) -> Instruction:
        """A map input whose readers fix its keys (`map_inputs.map_keys`) as the
        parameter of its values in their keys' order, the keys on the module (the header
        lists them)."""
        keys, elem_type = map_keys(self.top.graph, info)
        if info.name in self.input_shapes or info.name in self.input_values:
            raise ModelError(f"input '{info.name}' is a map: its shape is its keys'")
        shape = Shape(to_dtype(elem_type, f"input '{info.name}' values"), (len(keys),))
        b = self.top.b
        param = b.parameter(number, shape, name=info.name)
        self.top.input_names[id(param)] = info.name
        b.module.labels[info.name] = keys
        b.module.notes.append(
            f"input '{info.name}' is a map: give its values in the order of its "
            f"{len(keys)} keys, which the header lists (0 for a key it lacks)"
        )
        return param

    def _flat_inputs(self, info: onnx.ValueInfoProto) -> list[str] | None:
        """The tensors standing for graph input `info` (None: an optional with no value)."""
        if info.type.HasField("map_type"):
            return [info.name]
        kind = value_type(info.type, f"input '{info.name}'")
        if info.name not in self.structure:
            if kind.sequence:
                raise ModelError(
                    f"input '{info.name}' is a sequence: give its length (input_structure) "
                    f"and each tensor's shape as {element_name(info.name, 0)}, ..."
                )
            return [info.name]
        length = self.structure[info.name]
        if length is None:
            if not kind.optional:
                raise ModelError(f"input '{info.name}' is not optional: it needs a value")
            return None
        if not kind.sequence:
            raise ModelError(f"input '{info.name}' is a tensor, not a sequence")
        if length < 0:
            raise ModelError(f"input '{info.name}': negative sequence length {length}")
        return [element_name(info.name, i) for i in range(length)]

    def _check_names(self, flat: list[str], layout: dict[str, list[str] | None]) -> None:
        unknown = (set(self.input_shapes) | set(self.input_values)) - set(flat)
        unknown |= set(self.structure) - set(layout)
        if unknown:
            names = ", ".join(repr(n) for n in flat)
            raise ModelError(
                f"--input names no graph input: {', '.join(sorted(unknown))} "
                f"(the inputs are {names})"
            )
        self._check_clashes([n for n in flat if n not in layout])
        symbols = {
            d
            for info in self.inputs
            if not info.type.HasField("map_type")
            and value_type(info.type, f"input '{info.name}'").tensor.HasField("shape")
            for d in declared_dims(value_type(info.type, "").tensor) or ()
            if isinstance(d, str)
        }
        named = set(self.dim_extents) - symbols
        if named:
            listed = ", ".join(sorted(symbols)) or "none"
            raise ModelError(
                f"--dim names no symbolic dim of the inputs: {', '.join(sorted(named))} "
                f"(they are: {listed})"
            )

    def _check_clashes(self, elements: list[str]) -> None:
        """Refuse sequence tensor names that name another graph value (ambiguous regrouping)."""
        graph = self.top.graph
        clashes = {v.name for v in [*graph.input, *graph.output]} & set(elements)
        if clashes:
            listed = ", ".join(sorted(clashes))
            raise UnsupportedError(f"sequence tensor names {listed} are graph value names too")

    def _constant(self, name: str, tensor_type: onnx.TypeProto.Tensor) -> Instruction:
        """A graph input fixed to a given value (`input_values`, `--const`)."""
        value = np.asarray(self.input_values[name])
        dtype = to_dtype(tensor_type.elem_type, f"input '{name}'")
        given: Sequence | None = self.input_shapes.get(name)
        flag = "--input"
        if given is None:
            # --const's flat list takes the model's static shape (one value: a scalar)
            declared = declared_dims(tensor_type)
            static = declared is not None and all(isinstance(d, int) for d in declared)
            flat = value.ndim == 1 and static and len(declared or ()) != 1
            given, flag = (declared if flat else value.shape), "--const"
        shape = input_shape(name, tensor_type, given, flag)
        if not shape.is_static:
            raise ModelError(f"--const {name}: a constant's dims are static, not ranges")
        if shape.size != value.size:
            raise ModelError(
                f"--const {name}: {value.size} values given, the input has shape {list(shape.dims)}"
            )
        return self.top.b.constant(value.reshape(shape.dims), dtype, name=name)


def declared_dims(tensor: onnx.TypeProto.Tensor) -> list[int | str | None] | None:
    """A tensor type's dims as declared: a size, a dim_param's name, or None for an unknown
    dim; None without a shape.  A negative dim_value (paddle2onnx writes -1) is unknown,
    as onnxruntime reads it."""
    if not tensor.HasField("shape"):
        return None
    return [
        d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else d.dim_param or None
        for d in tensor.shape.dim
    ]


def input_shape(
    name: str,
    tensor: onnx.TypeProto.Tensor,
    given: Sequence | None,
    flag: str = "--input",
    dim_extents: Mapping[str, int | DimRange] | None = None,
) -> Shape:
    """A graph input's tensor type, its unknown dims taken from `given` (from `flag`),
    else its symbolic ones from `dim_extents` (--dim).  A dim given as a DimRange is
    bounded by its high end (Shape.dynamic), unless the range holds one extent."""
    dtype = to_dtype(tensor.elem_type, f"input '{name}'")
    return _addressable(
        name, _bounded_shape(dtype, input_dims(name, tensor, given, flag, dim_extents))
    )


def input_dims(
    name: str,
    tensor: onnx.TypeProto.Tensor,
    given: Sequence | None,
    flag: str = "--input",
    dim_extents: Mapping[str, int | DimRange] | None = None,
) -> list[int | DimRange]:
    """A graph input's dims as `input_shape` reads them: extents and DimRanges."""
    model_dims = declared_dims(tensor)
    if given is not None:
        given = list(given)
        if model_dims is not None and len(given) != len(model_dims):
            raise ModelError(
                f"{flag} {name}: rank {len(given)} given, "
                f"the model's input has rank {len(model_dims)} (a scalar's shape: --input {name}=)"
            )
        if any(_low(g) < 0 for g in given):
            raise ModelError(f"{flag} {name}: dims must not be negative, got {given}")
        for i, (g, m) in enumerate(zip(given, model_dims or given)):
            if isinstance(m, int) and g != m:
                raise ModelError(f"{flag} {name}: dim {i} is {g}, the model says {m}")
        return given
    if model_dims is None:
        raise ModelError(
            f"input '{name}' has no shape in the model; give one with --input {name}=DIMS"
        )
    extents = dim_extents or {}
    dims: list[int | DimRange] = []
    for i, declared in enumerate(model_dims):
        m = extents.get(declared, declared) if isinstance(declared, str) else declared
        if not isinstance(m, (int, DimRange)):
            example = "x".join(str(d) if isinstance(d, int) else "1" for d in model_dims)
            label = f"'{m}'" if m else "unknown"
            hint = f" or --dim {m}=N" if m else ""
            raise ModelError(
                f"input '{name}' dim {i} is {label}; give the shape with "
                f"--input {name}={example}{hint}"
            )
        dims.append(m)
    return dims


def _low(dim: int | DimRange) -> int:
    return dim.low if isinstance(dim, DimRange) else int(dim)


def _bounded_shape(dtype, dims: Sequence[int | DimRange]) -> Shape:
    """Extents and ranges as a shape: a range of one extent is that extent, others are
    bounded dims at their high ends."""
    bounds = [d.high if isinstance(d, DimRange) else int(d) for d in dims]
    flags = [isinstance(d, DimRange) and d.low != d.high for d in dims]
    return Shape(dtype, tuple(bounds), tuple(flags))


def _addressable(name: str, shape: Shape) -> Shape:
    """`shape`, refused where its bytes pass what any memory limit allows (2^62): the
    shapes computed from it would wrap in 64-bit arithmetic before the driver checks
    them against the memory limit (memory_limits.py)."""
    check_size(f"input '{name}'", shape)
    return shape
