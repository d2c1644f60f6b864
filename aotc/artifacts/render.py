"""The text of the artifacts: NAME.h (templates/model.h.j2), the cffi declarations of a
model, the memory plan as SVG, and `render_template` for the other writers (the CUDA
backend's).  The only jinja2 user; C strings and comments in templates go through the
`c_string` and `c_comment` filters.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import jinja2

from .._version import __version__
from ..buffers.heap import align_up
from ..errors import UnsupportedError
from ..ir import DType
from ..resources import resource_dir
from .specs import MemoryStats, Target, TensorSpec, check_model_name, unique_specs
from .tools import cross_compiler_name, target_arch
from .weights import WEIGHTS_ALIGN, WeightsFile


def c_string(text: str) -> str:
    """A C string literal for any text: UTF-8 bytes, non-printables and `?` escaped.

    `?` is escaped because `??/` and friends are trigraphs in strict C99; octal escapes
    because a hex escape would swallow the hex digits that follow it.
    """
    out = []
    for byte in text.encode("utf-8"):
        char = chr(byte)
        if char in '"\\?':
            out.append("\\" + char)
        elif 0x20 <= byte < 0x7F:
            out.append(char)
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def c_comment(text: str) -> str:
    """Text safe inside a block comment: printable ASCII, no comment delimiters."""
    text = "".join(c if " " <= c < "\x7f" else "?" for c in text)
    text = text.replace("*/", "* /").replace("/*", "/ *")
    while "??" in text:  # trigraphs (`??/` could splice lines)
        text = text.replace("??", "? ?")
    return text


@functools.cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(resource_dir("templates"))),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["c_string"] = c_string
    env.filters["c_comment"] = c_comment
    return env


def render_template(template: str, **values) -> str:
    """Render templates/`template` (for a backend's own writer; c_string and c_comment filters)."""
    return _environment().get_template(template).render(version=__version__, **values)


def render_header(
    name: str,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    stats: MemoryStats,
    target: Target | str,
    source: str,
    profile_kernels: Sequence[str] | None = None,
    weights_file: WeightsFile | None = None,
) -> str:
    """The text of NAME.h.  `source` is shown as given: pass a relative path or a file
    name if the header should not depend on where the model was compiled.  `target` is
    a Target (recorded as NAME_TARGET_TRIPLE / NAME_TARGET_CPU) or just a description.
    `profile_kernels`: a profiled build's kernels, whose counters the header declares.
    `weights_file`: external weights, whose size, checksum and setters it declares."""
    check_model_name(name)
    inputs, outputs = unique_specs(inputs, outputs)
    tensors = [*inputs, *outputs]
    bounded = bounded_api(inputs, outputs, stats.scratch_bytes)
    upper = name.upper()
    stated = {f"{upper}_SCRATCH_BYTES": stats.scratch_bytes}
    if bounded is not None:
        stated[f"{upper}_BOUNDED_SCRATCH_BYTES"] = bounded.scratch_bytes
    for t in tensors:
        stated[f"{upper}_{t.c_name.upper()}_BYTES"] = t.nbytes
        stated[f"{upper}_{t.c_name.upper()}_SIZE"] = t.size
    check_stated_sizes(stated)
    params = [f"const {t.c_type} *{t.c_name}" for t in inputs]
    params += [f"{t.c_type} *{t.c_name}" for t in outputs]
    template = _environment().get_template("model.h.j2")
    return template.render(
        name=name,
        upper=upper,
        version=__version__,
        source=source,
        target=target if isinstance(target, str) else target.describe(),
        triple=None if isinstance(target, str) else target.triple,
        cpu=None if isinstance(target, str) else target.cpu,
        amx=getattr(target, "has_amx_int8", False),
        cross_cc=cross_compiler_name(target_arch(target)),
        inputs=inputs,
        outputs=outputs,
        stats=stats,
        scratch_bytes=stats.scratch_bytes,
        params=wrap_params(f"int {name}_run(", [*params, "void *scratch"]),
        call_args=", ".join([*(t.c_name for t in tensors), "scratch"]),
        width=max((len(t.c_name) for t in tensors), default=0),
        type_width=max((len(t.type_text) for t in tensors), default=0),
        has_16bit_floats=any(t.dtype in (DType.F16, DType.BF16) for t in tensors),
        profile_kernels=list(profile_kernels or ()),
        bounded=bounded,
        weights_file=weights_file,
        weights_align=WEIGHTS_ALIGN,
    )


# what a size in a header may reach: C's size_t and int64_t hold it on 64-bit targets
LARGEST_STATED_SIZE = 2**63 - 1


def check_stated_sizes(sizes: dict[str, int]) -> None:
    """Refuse, in one line, a header that would state a size its type cannot hold."""
    for macro, size in sizes.items():
        if size > LARGEST_STATED_SIZE:
            raise UnsupportedError(
                f"{macro} would be {size}, past the {LARGEST_STATED_SIZE} that a 64-bit "
                "target's size_t and int64_t hold"
            )


@dataclass(frozen=True)
class BoundedApi:
    """NAME_run_bounded of a model with bounded dims (runtime_c/aotc_bounded.h): the
    model's own inputs and outputs (NAME_run's less input_dims and output_dims), whether
    it returns output_dims, the scratch it needs, and the runtime's declarations."""

    inputs: Sequence[TensorSpec]
    outputs: Sequence[TensorSpec]
    has_input_dims: bool
    has_output_dims: bool
    scratch_bytes: int
    declarations: str


def bounded_api(inputs, outputs, model_scratch: int) -> BoundedApi | None:
    """The bounded entry of a model with bounded inputs or outputs, else None.  The
    padder (passes/bounded_dims.py) makes input_dims, where an input is bounded, the
    last input and output_dims, where an output is bounded, the last output."""
    has_input_dims = any(t.bounded for t in inputs)
    has_output_dims = any(t.bounded for t in outputs)
    if not (has_input_dims or has_output_dims):
        return None
    model_inputs = list(inputs[:-1] if has_input_dims else inputs)
    model_outputs = list(outputs[:-1] if has_output_dims else outputs)
    # aotc_bounded.c's layout: the model's scratch, then each padded buffer and the two
    # extent arrays, each rounded up to ALIGN
    total = align_up(model_scratch, BOUNDED_ALIGN)
    for group in (model_inputs, model_outputs):
        total += sum(align_up(t.nbytes, BOUNDED_ALIGN) for t in group)
        total += align_up(4 * sum(sum(t.bounded) for t in group), BOUNDED_ALIGN)
    text = (resource_dir("runtime_c") / "aotc_bounded.h").read_text(encoding="utf-8")
    return BoundedApi(model_inputs, model_outputs, has_input_dims, has_output_dims, total, text)


BOUNDED_ALIGN = 64  # aotc_bounded.c's ALIGN


def wrap_params(opening: str, params: Sequence[str], width: int = 92) -> str:
    """Parameters on one line if the prototype fits in `width`, else one per line."""
    one_line = ", ".join(params)
    if len(opening) + len(one_line) + 2 <= width:
        return one_line
    return "\n    " + ",\n    ".join(params)


def cffi_cdef(name: str, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec]) -> str:
    """Declarations of NAME_run and NAME_run_generic that cffi can parse."""
    check_model_name(name)
    inputs, outputs = unique_specs(inputs, outputs)
    params = [f"const {t.c_type} *{t.c_name}" for t in inputs]
    params += [f"{t.c_type} *{t.c_name}" for t in outputs]
    return (
        f"int {name}_run({', '.join([*params, 'void *scratch'])});\n"
        f"int {name}_run_generic(void *const *inputs, void *const *outputs, void *scratch);\n"
    )


def weights_cdef(name: str) -> str:
    """The declaration of an external-weights build's NAME_set_weights, for cffi."""
    check_model_name(name)
    return f"int {name}_set_weights(const void *weights, size_t size);\n"


def profile_cdef(name: str, kernels: int) -> str:
    """Declarations of a profiled build's counters (backends/cpu/profile_counters.py) and
    of NAME_set_num_threads, for cffi."""
    check_model_name(name)
    count = max(kernels, 1)
    return (
        f"extern int64_t {name}_profile_ns[{count}];\n"
        f"extern int64_t {name}_profile_calls[{count}];\n"
        f"void {name}_profile_reset(void);\n"
        f"void {name}_set_num_threads(int n);\n"
    )


# the runtime's controls, for one cdef per FFI (declaring them twice is an error in cffi)
RUNTIME_CDEF = "void aotc_set_num_threads(int n);\nint aotc_get_num_threads(void);\n"


def render_memory_plan_svg(title: str, plan, width: int = 1000, height: int = 600) -> str:
    """The plan as SVG: time across, arena offset down, one labelled rectangle per buffer."""
    steps = max(len(plan.schedule), 1)
    arena = max(plan.arena_bytes, 1)
    rects = []
    for n, b in enumerate(plan.buffers):
        label = b.name + ("" if not b.shape_index else str(list(b.shape_index)))
        rects.append(
            {
                "x": width * b.start / steps,
                "w": width * (b.end + 1 - b.start) / steps,
                "y": height * b.slice.offset / arena,
                "h": max(height * b.slice.size / arena, 0.5),
                "label": label,
                "hue": (n * 47) % 360,
                "start": b.start,
                "end": b.end,
                "begin": b.slice.offset,
                "stop": b.slice.offset + b.slice.size,
            }
        )
    return (
        _environment()
        .get_template("memory_plan.svg.j2")
        .render(
            title=title,
            rects=rects,
            width=width,
            height=height,
            margin=20,
            steps=steps,
            arena=plan.arena_bytes,
            lower=plan.lower_bound,
            naive=plan.naive_total,
        )
    )
