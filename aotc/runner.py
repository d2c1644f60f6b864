"""Calling compiled code from Python: link a shared object, load it with cffi.

Used by `aotc.backend`, `aotc profile` and the tests.  Arrays are converted to the
bytes the C API expects (bf16 as uint16 bit patterns) and back.  A profiled build's
counters are read as numpy arrays.  External weights (`--weights external`) are copied
into an aligned buffer once and handed over with NAME_set_weights.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import cffi
import numpy as np

from . import artifacts
from .buffers import Blob
from .errors import AotcError
from .ir.types import from_storage, to_storage


class LoadedModel:
    """A compiled model loaded into this process; call it with numpy arrays."""

    def __init__(self, compiled):
        self.name = compiled.name
        self.inputs = compiled.inputs
        self.outputs = compiled.outputs
        # a model with bounded dims: its entry's last input and output are the actual
        # extents (ir/bounds.py), which `run` fills in and reads
        self.bounds = compiled.module.bounds
        self.profile_kernels: tuple[str, ...] = compiled.profile_kernels
        self._ffi = cffi.FFI()
        self._ffi.cdef(artifacts.cffi_cdef(compiled.name, compiled.inputs, compiled.outputs))
        if self.profile_kernels:
            self._ffi.cdef(artifacts.profile_cdef(compiled.name, len(self.profile_kernels)))
        if compiled.weights_file is not None:
            self._ffi.cdef(artifacts.weights_cdef(compiled.name))
        with tempfile.TemporaryDirectory(prefix="aotc-load-") as tmp:
            obj = Path(tmp) / f"{compiled.name}.o"
            compiled.object.write_file(obj)
            so = artifacts.link_shared(obj, Path(tmp) / f"lib{compiled.name}.so")
            # the loaded image stays mapped after the file is removed
            self._lib = self._ffi.dlopen(str(so))
        self._run = getattr(self._lib, f"{compiled.name}_run_generic")
        self._scratch = _aligned_zeros(max(compiled.plan.scratch_bytes, 1), compiled.plan.alignment)
        if compiled.weights_file is not None:
            self.set_weights(compiled.weights_file.data)

    def set_weights(self, data: bytes | Blob) -> None:
        """Hand an external-weights build its weights (a copy, kept with the model);
        AotcError where NAME_set_weights refuses them."""
        weights = _aligned_zeros(len(data), artifacts.WEIGHTS_ALIGN)
        weights[:] = np.frombuffer(bytes(data), np.uint8)
        setter = getattr(self._lib, f"{self.name}_set_weights")
        status = setter(self._ffi.from_buffer(weights), len(data))
        if status != 0:
            why = SET_WEIGHTS_STATUS.get(status, "unknown status")
            raise AotcError(f"{self.name}_set_weights returned {status}: {why}")
        self._weights = weights  # the kernels read it from now on

    def __call__(self, *args, **kwargs) -> list[np.ndarray]:
        return self.run(list(args) if args else kwargs)

    @property
    def model_inputs(self) -> list[artifacts.TensorSpec]:
        """The inputs a caller passes: all but a bounded model's extents."""
        if self.bounds is None or self.bounds.input_dims is None:
            return self.inputs
        return self.inputs[:-1]

    @property
    def model_outputs(self) -> list[artifacts.TensorSpec]:
        """The outputs `run` returns: all but a bounded model's extents."""
        if self.bounds is None or self.bounds.output_dims is None:
            return self.outputs
        return self.outputs[:-1]

    def run(self, inputs: Sequence[np.ndarray] | Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """Run once; inputs by position or by name, outputs as a list in order.  A
        model with bounded dims takes any extents within its bounds, and its outputs
        come back at their actual extents."""
        if self.bounds is None:
            return self._run_once(inputs)
        arrays = self._positional(inputs, self.model_inputs)
        try:
            padded = self.bounds.padded_args([t.dims for t in self.model_inputs], arrays)
        except ValueError as error:
            raise AotcError(f"{self.name}: {error}") from None
        return self.bounds.actual_outputs(self._run_once(padded))

    def _run_once(self, inputs) -> list[np.ndarray]:
        call, raw_outputs = self._bound_call(inputs)
        call()
        return [from_storage(raw, spec.dtype) for spec, raw in zip(self.outputs, raw_outputs)]

    def repeater(
        self, inputs: Sequence[np.ndarray] | Mapping[str, np.ndarray]
    ) -> Callable[[], None]:
        """A call that runs the model on `inputs` again and again, converted once (for
        timing: each call costs the model's run and cffi's call only)."""
        return self._bound_call(inputs)[0]

    def set_num_threads(self, threads: int) -> None:
        """NAME_set_num_threads (a profiled build's cffi declarations have it)."""
        getattr(self._lib, f"{self.name}_set_num_threads")(threads)

    def reset_profile(self) -> None:
        """Zero a profiled build's counters."""
        getattr(self._lib, f"{self.name}_profile_reset")()

    def profile_counters(self) -> tuple[np.ndarray, np.ndarray]:
        """(nanoseconds, calls) of each kernel of `profile_kernels` so far (copies)."""
        if not self.profile_kernels:
            raise AotcError(f"{self.name} was compiled without profile counters")
        return self._counter("profile_ns"), self._counter("profile_calls")

    def _counter(self, suffix: str) -> np.ndarray:
        address = self._ffi.addressof(self._lib, f"{self.name}_{suffix}")
        values = np.frombuffer(self._ffi.buffer(address), np.int64)
        return values[: len(self.profile_kernels)].copy()

    def _bound_call(self, inputs) -> tuple[_BoundRun, list[np.ndarray]]:
        """A call of NAME_run_generic on `inputs` (checked, converted once) and the
        arrays its outputs are written to."""
        inputs = self._positional(inputs, self.inputs)
        raw_inputs = [self._to_raw(spec, value) for spec, value in zip(self.inputs, inputs)]
        # every element a call needs is written (a bounded output's padding is cut away)
        raw_outputs = [np.empty(spec.dims, spec.dtype.storage) for spec in self.outputs]
        ffi = self._ffi
        in_ptrs = ffi.new("void *[]", [ffi.from_buffer(a) for a in raw_inputs] or [ffi.NULL])
        out_ptrs = ffi.new("void *[]", [ffi.from_buffer(a) for a in raw_outputs] or [ffi.NULL])
        arguments = (in_ptrs, out_ptrs, ffi.from_buffer(self._scratch))
        arrays = [*raw_inputs, *raw_outputs]
        return _BoundRun(self.name, self._run, arguments, arrays, self), raw_outputs

    def _positional(self, inputs, specs) -> list:
        """`inputs` by position or by name as a list in the order of `specs`."""
        if isinstance(inputs, Mapping):
            missing = [t.name for t in specs if t.name not in inputs]
            if missing:
                raise AotcError(f"{self.name}: missing inputs {missing}")
            inputs = [inputs[t.name] for t in specs]
        if len(inputs) != len(specs):
            raise AotcError(f"{self.name}: expected {len(specs)} inputs, got {len(inputs)}")
        return list(inputs)

    @staticmethod
    def _to_raw(spec, value) -> np.ndarray:
        array = np.asarray(value)
        if tuple(array.shape) != tuple(spec.dims):
            raise AotcError(f"input '{spec.name}': shape {array.shape} != {tuple(spec.dims)}")
        raw = to_storage(array, spec.dtype)
        # keep a 1-element buffer for empty tensors so the pointer is valid
        return np.ascontiguousarray(raw) if raw.size else np.zeros(1, spec.dtype.storage)


# NAME_run's nonzero results (program.py's `_checked_call`)
RUN_STATUS = {
    1: "the scratch buffer is not aligned",
    2: "the system refuses the AMX tile state that the kernels use",
    4: "no weights are set (NAME_set_weights)",
}
# NAME_set_weights's nonzero results (aotc_runtime.c's aotc_set_weights)
SET_WEIGHTS_STATUS = {
    1: "not the size of the model's weights",
    2: "the weights are not aligned to 64 bytes",
    3: "not the model's weights (another checksum)",
}


def _aligned_zeros(size: int, alignment: int) -> np.ndarray:
    """`size` zero bytes starting at a multiple of `alignment` (a view of a bigger array)."""
    raw = np.zeros(size + alignment, np.uint8)
    start = (-raw.ctypes.data) % alignment
    return raw[start : start + size]


@dataclass(frozen=True)
class _BoundRun:
    """NAME_run_generic with its arguments made once; calling it runs the model."""

    name: str
    run: Callable[..., int]
    arguments: tuple  # the input and output pointer tables, the scratch pointer
    arrays: list[np.ndarray]  # what the pointers point into: kept alive with them
    # the model: its scratch, its external weights and its library outlive the call too
    model: LoadedModel

    def __call__(self) -> None:
        status = self.run(*self.arguments)
        if status != 0:
            why = RUN_STATUS.get(status, "unknown status")
            raise AotcError(f"{self.name}_run returned {status}: {why}")
