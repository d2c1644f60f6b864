"""Calling compiled code from Python: link a shared object, load it with cffi.

Used by `aotc.backend` and the tests.  Arrays are converted to the bytes the
C API expects (bf16 as uint16 bit patterns) and back.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import cffi
import numpy as np

from . import artifacts
from .errors import AotcError
from .ir.types import from_storage, to_storage


class LoadedModel:
    """A compiled model loaded into this process; call it with numpy arrays."""

    def __init__(self, compiled):
        self.name = compiled.name
        self.inputs = compiled.inputs
        self.outputs = compiled.outputs
        self._ffi = cffi.FFI()
        self._ffi.cdef(artifacts.cffi_cdef(compiled.name, compiled.inputs, compiled.outputs))
        with tempfile.TemporaryDirectory(prefix="aotc-load-") as tmp:
            obj = Path(tmp) / f"{compiled.name}.o"
            obj.write_bytes(compiled.object_bytes)
            so = artifacts.link_shared(obj, Path(tmp) / f"lib{compiled.name}.so")
            # the loaded image stays mapped after the file is removed
            self._lib = self._ffi.dlopen(str(so))
        self._run = getattr(self._lib, f"{compiled.name}_run_generic")
        scratch_bytes = max(compiled.plan.scratch_bytes, 1)
        self._scratch_raw = np.zeros(scratch_bytes + compiled.plan.alignment, np.uint8)
        start = (-self._scratch_raw.ctypes.data) % compiled.plan.alignment
        self._scratch = self._scratch_raw[start : start + scratch_bytes]

    def __call__(self, *args, **kwargs) -> list[np.ndarray]:
        return self.run(list(args) if args else kwargs)

    def run(self, inputs: Sequence[np.ndarray] | Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """Run once; inputs by position or by name, outputs as a list in order."""
        if isinstance(inputs, Mapping):
            missing = [t.name for t in self.inputs if t.name not in inputs]
            if missing:
                raise AotcError(f"{self.name}: missing inputs {missing}")
            inputs = [inputs[t.name] for t in self.inputs]
        if len(inputs) != len(self.inputs):
            raise AotcError(f"{self.name}: expected {len(self.inputs)} inputs, got {len(inputs)}")
        raw_inputs = [self._to_raw(spec, value) for spec, value in zip(self.inputs, inputs)]
        raw_outputs = [np.zeros(spec.dims, spec.dtype.storage) for spec in self.outputs]
        ffi = self._ffi
        in_ptrs = ffi.new("void *[]", [ffi.from_buffer(a) for a in raw_inputs] or [ffi.NULL])
        out_ptrs = ffi.new("void *[]", [ffi.from_buffer(a) for a in raw_outputs] or [ffi.NULL])
        status = self._run(in_ptrs, out_ptrs, ffi.from_buffer(self._scratch))
        if status != 0:
            raise AotcError(f"{self.name}_run returned {status}")
        return [from_storage(raw, spec.dtype) for spec, raw in zip(self.outputs, raw_outputs)]

    @staticmethod
    def _to_raw(spec, value) -> np.ndarray:
        array = np.asarray(value)
        if tuple(array.shape) != tuple(spec.dims):
            raise AotcError(f"input '{spec.name}': shape {array.shape} != {tuple(spec.dims)}")
        raw = to_storage(array, spec.dtype)
        # keep a 1-element buffer for empty tensors so the pointer is valid
        return np.ascontiguousarray(raw) if raw.size else np.zeros(1, spec.dtype.storage)
