"""HLO text: the printer of XLA's text form, and the parser re-exported from `parser`.

`print_module` writes the canonical form (`%` sigils, operand shapes inline,
default layouts, callees before callers, ENTRY last); `parse_module` reads it
back exactly.  Attributes print in XLA's spelling, with fields at their
defaults left out as XLA does.  What XLA, JAX and TensorFlow dump beyond this
form is read by the HLO frontend (`frontends/hlo/dialect.py`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from .attrs import ConvDims, PaddingConfig, SliceSpec, Window
from .module import Computation, Instruction, Module, sanitize_name
from .ops import Op
from .parser import parse_module
from .types import AnyShape, DType, Shape, cast_array

__all__ = [
    "dim_labels_text",
    "literal_text",
    "padding_text",
    "parse_module",
    "print_computation",
    "print_instruction",
    "print_module",
    "slice_text",
    "window_text",
]

# -- printing ---------------------------------------------------------------------


def print_module(module: Module, *, elide_constants_over: int | None = None) -> str:
    """The module as canonical HLO text; constants over N elements print as `{...}`."""
    parts = [_module_header(module)]
    for comp in module.computations_in_call_order():
        text = print_computation(
            comp, entry=comp is module.entry, elide_constants_over=elide_constants_over
        )
        parts.append("\n" + text)
    return "\n".join(parts) + "\n"


def print_computation(
    comp: Computation, *, entry: bool = False, elide_constants_over: int | None = None
) -> str:
    """One computation: its signature line, one line per instruction, `}`."""
    params = sorted(
        (i for i in comp.instructions if i.op is Op.PARAMETER), key=lambda p: p.index or 0
    )
    signature = ", ".join(f"{p.name}: {_shape_text(p.shape, layout=False)}" for p in params)
    result = _shape_text(comp.root.shape if comp.root else None, layout=False)
    lines = [f"{'ENTRY ' if entry else ''}%{comp.name} ({signature}) -> {result} {{"]
    for instr in comp.instructions:
        prefix = "  ROOT " if instr is comp.root else "  "
        lines.append(prefix + print_instruction(instr, elide_constants_over=elide_constants_over))
    lines.append("}")
    return "\n".join(lines)


def print_instruction(instr: Instruction, *, elide_constants_over: int | None = None) -> str:
    """`%name = shape opcode(operands), attributes` on one line (no ROOT marker)."""
    if instr.op is Op.PARAMETER:
        args = "" if instr.index is None else str(instr.index)
    elif instr.op is Op.CONSTANT:
        args = _constant_text(instr, elide_constants_over)
    else:
        args = ", ".join(f"{_shape_text(o.shape)} %{o.name}" for o in instr.operands)
    head = f"%{instr.name} = {_shape_text(instr.shape)} {instr.op.text}({args})"
    attributes = [text for printer in _ATTRIBUTE_PRINTERS for text in printer(instr)]
    return ", ".join([head, *attributes])


def literal_text(array: np.ndarray, dtype: DType) -> str:
    """An evaluator array as an HLO literal: `1.5`, `{1, 2}`, `{ {1, 2}, {3, 4} }`."""
    array = np.asarray(array)
    flat = _format_scalars(array.reshape(-1), dtype)
    if array.ndim == 0:
        return flat[0]
    return _nest(flat, array.shape, 0, 0)


def _module_header(module: Module) -> str:
    header = f"HloModule {sanitize_name(module.name or 'module')}"
    entry = module.entry
    if entry is None or entry.root is None:
        return header
    params = sorted(
        (i for i in entry.instructions if i.op is Op.PARAMETER), key=lambda p: p.index or 0
    )
    layout = ", ".join(_shape_text(p.shape) for p in params)
    return f"{header}, entry_computation_layout={{({layout})->{_shape_text(entry.root.shape)}}}"


def _shape_text(shape: AnyShape | None, layout: bool = True) -> str:
    # tolerate a missing shape: the verifier prints malformed instructions too
    return "<no shape>" if shape is None else shape.text(layout)


def _constant_text(instr: Instruction, elide_over: int | None) -> str:
    if instr.literal is None:
        return ""
    if elide_over is not None and instr.literal.size > elide_over:
        return "{...}"
    dtype = instr.shape.dtype if isinstance(instr.shape, Shape) else DType.F64
    return literal_text(instr.literal, dtype)


def _nest(flat: list[str], dims: tuple[int, ...], depth: int, offset: int) -> str:
    count = dims[depth]
    if depth == len(dims) - 1:
        return "{" + ", ".join(flat[offset : offset + count]) + "}"
    if count == 0:
        return "{}"
    stride = math.prod(dims[depth + 1 :])
    parts = [_nest(flat, dims, depth + 1, offset + k * stride) for k in range(count)]
    return "{ " + ", ".join(parts) + " }"


def _format_scalars(values: np.ndarray, dtype: DType) -> list[str]:
    if dtype is DType.PRED:
        return ["true" if v else "false" for v in values.tolist()]
    if dtype.is_int:
        return [str(int(v)) for v in values.tolist()]
    if dtype is DType.BF16:
        return _format_bf16(values)
    if dtype.minifloat is not None:  # few bits: Python's repr of the exact value reads back
        return [_float_text(v, repr(v)) for v in values.astype(np.float64).tolist()]
    # numpy's str() and Python's repr() give the shortest digits that read back exactly;
    # repr(float(...)) then writes them as Python does (16777216, not 1.6777216e+07)
    scalar = {DType.F16: np.float16, DType.F32: np.float32, DType.F64: float}[dtype]
    return [
        _float_text(v, repr(float(str(scalar(v))))) for v in values.astype(dtype.numpy).tolist()
    ]


def _format_bf16(values: np.ndarray) -> list[str]:
    """Shortest decimal per value that reads back (via `_literal_array`) to the same bf16."""
    values = cast_array(values, DType.BF16).astype(np.float64)
    texts: list[str | None] = [None] * len(values)
    pending = list(range(len(values)))
    for digits in range(1, 10):
        candidates = [repr(float(f"{values[i]:.{digits}g}")) for i in pending]
        back = cast_array(np.array([float(c) for c in candidates]), DType.BF16)
        still = []
        for i, text, value in zip(pending, candidates, back.tolist()):
            if value == values[i] or math.isnan(values[i]):
                texts[i] = _float_text(values[i], text)
            else:
                still.append(i)
        pending = still
    assert not pending, "bf16 values must print within 9 digits"
    return texts


def _float_text(value: float, text: str) -> str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    # XLA writes integral floats without ".0"
    return text.removesuffix(".0")


def _ints(values) -> str:
    return "{" + ",".join(str(v) for v in values) + "}"


def _by_x(values) -> str:
    return "x".join(str(v) for v in values)


def window_text(w: Window) -> str:
    """`{size=3x3 stride=2x2 pad=1_1x1_1 ...}`, fields at their default omitted as XLA does."""
    if w.rank == 0:
        return "{}"
    fields = [f"size={_by_x(w.size)}"]
    if any(s != 1 for s in w.stride):
        fields.append(f"stride={_by_x(w.stride)}")
    if any(w.pad_low) or any(w.pad_high):
        fields.append("pad=" + "x".join(f"{lo}_{hi}" for lo, hi in zip(w.pad_low, w.pad_high)))
    if any(d != 1 for d in w.lhs_dilation):
        fields.append(f"lhs_dilate={_by_x(w.lhs_dilation)}")
    if any(d != 1 for d in w.rhs_dilation):
        fields.append(f"rhs_dilate={_by_x(w.rhs_dilation)}")
    return "{" + " ".join(fields) + "}"


def padding_text(p: PaddingConfig) -> str:
    """`lo_hi` per dim joined by `x`, with `_interior` only when some dim has any (as XLA)."""
    if not p.low:
        return "{}"
    interior = any(p.interior)
    return "x".join(
        f"{lo}_{hi}" + (f"_{n}" if interior else "") for lo, hi, n in zip(p.low, p.high, p.interior)
    )


def slice_text(s: SliceSpec) -> str:
    """`{[start:limit], [start:limit:stride]}`, stride 1 omitted as XLA does."""
    bounds = [
        f"[{a}:{b}]" if c == 1 else f"[{a}:{b}:{c}]"
        for a, b, c in zip(s.starts, s.limits, s.strides)
    ]
    return "{" + ", ".join(bounds) + "}"


def dim_labels_text(c: ConvDims) -> str:
    """`b01f_01io->b01f`: where batch, feature and each spatial dim sit in each operand."""

    def labels(first: tuple[int, str], second: tuple[int, str], spatial) -> str:
        chars = [""] * (len(spatial) + 2)
        for position, char in (first, second):
            chars[position] = char
        for i, position in enumerate(spatial):
            chars[position] = str(i)
        return "".join(chars)

    lhs = labels((c.input_batch, "b"), (c.input_feature, "f"), c.input_spatial)
    rhs = labels((c.kernel_input_feature, "i"), (c.kernel_output_feature, "o"), c.kernel_spatial)
    out = labels((c.output_batch, "b"), (c.output_feature, "f"), c.output_spatial)
    return f"{lhs}_{rhs}->{out}"


_PRINT_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _quote(text: str) -> str:
    out = []
    for ch in text:
        if ch in _PRINT_ESCAPES:
            out.append(_PRINT_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\{ord(ch):03o}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


# One printer per attribute family, in the order XLA prints them; each returns
# the `name=value` texts it has for the instruction (none when unset).


def _print_index(i: Instruction) -> list[str]:
    if i.index is None or i.op is Op.PARAMETER:
        return []
    return [f"delta={i.index}" if i.op is Op.RNG_GET_AND_UPDATE_STATE else f"index={i.index}"]


def _print_dimensions(i: Instruction) -> list[str]:
    if i.dimensions is None:
        return []
    if i.op is Op.IOTA and len(i.dimensions) == 1:
        return [f"iota_dimension={i.dimensions[0]}"]
    return [f"dimensions={_ints(i.dimensions)}"]


def _print_slice(i: Instruction) -> list[str]:
    return [] if i.slice is None else [f"slice={slice_text(i.slice)}"]


def _print_dynamic_slice_sizes(i: Instruction) -> list[str]:
    sizes = i.dynamic_slice_sizes
    return [] if sizes is None else [f"dynamic_slice_sizes={_ints(sizes)}"]


def _print_padding(i: Instruction) -> list[str]:
    return [] if i.padding is None else [f"padding={padding_text(i.padding)}"]


def _print_window(i: Instruction) -> list[str]:
    return [] if i.window is None else [f"window={window_text(i.window)}"]


def _print_conv(i: Instruction) -> list[str]:
    return [] if i.conv is None else [f"dim_labels={dim_labels_text(i.conv)}"]


def _print_groups(i: Instruction) -> list[str]:
    counts = (
        ("feature_group_count", i.feature_group_count),
        ("batch_group_count", i.batch_group_count),
    )
    return [f"{name}={n}" for name, n in counts if n != 1]


def _print_dot(i: Instruction) -> list[str]:
    d = i.dot
    if d is None:
        return []
    fields = [
        ("lhs_batch_dims", d.lhs_batch),
        ("lhs_contracting_dims", d.lhs_contracting),
        ("rhs_batch_dims", d.rhs_batch),
        ("rhs_contracting_dims", d.rhs_contracting),
    ]
    return [f"{name}={_ints(v)}" for name, v in fields if v or "contracting" in name]


def _print_gather(i: Instruction) -> list[str]:
    g = i.gather
    if g is None:
        return []
    texts = [
        f"offset_dims={_ints(g.offset_dims)}",
        f"collapsed_slice_dims={_ints(g.collapsed_slice_dims)}",
        f"start_index_map={_ints(g.start_index_map)}",
    ]
    if g.operand_batching_dims:
        texts.append(f"operand_batching_dims={_ints(g.operand_batching_dims)}")
    if g.start_indices_batching_dims:
        texts.append(f"start_indices_batching_dims={_ints(g.start_indices_batching_dims)}")
    texts.append(f"index_vector_dim={g.index_vector_dim}")
    texts.append(f"slice_sizes={_ints(g.slice_sizes)}")
    return texts


def _print_scatter(i: Instruction) -> list[str]:
    s = i.scatter
    if s is None:
        return []
    texts = [
        f"update_window_dims={_ints(s.update_window_dims)}",
        f"inserted_window_dims={_ints(s.inserted_window_dims)}",
        f"scatter_dims_to_operand_dims={_ints(s.scatter_dims_to_operand_dims)}",
    ]
    if s.input_batching_dims:
        texts.append(f"input_batching_dims={_ints(s.input_batching_dims)}")
    if s.scatter_indices_batching_dims:
        texts.append(f"scatter_indices_batching_dims={_ints(s.scatter_indices_batching_dims)}")
    texts.append(f"index_vector_dim={s.index_vector_dim}")
    return texts


def _print_direction(i: Instruction) -> list[str]:
    return [] if i.direction is None else [f"direction={i.direction.value}"]


def _print_is_stable(i: Instruction) -> list[str]:
    return ["is_stable=true"] if i.is_stable else []


def _print_kind(i: Instruction) -> list[str]:
    return [] if i.fusion_kind is None else [f"kind={i.fusion_kind.value}"]


def _print_called(i: Instruction) -> list[str]:
    if not i.called:
        return []
    names = [f"%{c.name}" for c in i.called]
    if i.op is Op.WHILE and len(names) == 2:
        return [f"condition={names[0]}", f"body={names[1]}"]
    if i.op is Op.CONDITIONAL:
        selector = i.operands[0].shape if i.operands else None
        if len(names) == 2 and getattr(selector, "dtype", None) is DType.PRED:
            return [f"true_computation={names[0]}", f"false_computation={names[1]}"]
        return ["branch_computations={" + ", ".join(names) + "}"]
    name = "calls" if i.op is Op.FUSION else "to_apply"
    if len(i.called) == 1:
        return [f"{name}={names[0]}"]
    return [f"{name}={{" + ", ".join(names) + "}"]


def _print_metadata(i: Instruction) -> list[str]:
    return [] if i.origin is None else [f"metadata={{op_name={_quote(i.origin)}}}"]


_ATTRIBUTE_PRINTERS: tuple[Callable[[Instruction], list[str]], ...] = (
    _print_index,
    _print_dimensions,
    _print_slice,
    _print_dynamic_slice_sizes,
    _print_padding,
    _print_window,
    _print_conv,
    _print_groups,
    _print_dot,
    _print_gather,
    _print_scatter,
    _print_direction,
    _print_is_stable,
    _print_kind,
    _print_called,
    _print_metadata,
)
