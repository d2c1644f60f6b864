"""`onnx.backend.base.Backend` on top of the compiler.

`prepare(model)` compiles the model to an object, links a shared object and
loads it with cffi; `rep.run(inputs)` calls the compiled code.  This is how
the ONNX node conformance cases run against real generated code.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from .driver import CompileOptions, compile_model


class AotcRep(BackendRep):
    def __init__(self, loaded, output_names: list[str]):
        self._loaded = loaded
        self._outputs_type = namedtuple("Outputs", output_names, rename=True)

    def run(self, inputs, **kwargs):
        if isinstance(inputs, np.ndarray):
            inputs = [inputs]
        return self._outputs_type(*self._loaded.run(inputs))


class AotcBackend(Backend):
    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device.upper().startswith("CPU")

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs) -> AotcRep:
        super().prepare(model, device, **kwargs)
        options = CompileOptions(
            name=kwargs.get("name", "model"),
            input_shapes=kwargs.get("input_shapes", {}),
            target=kwargs.get("target", "host"),
            opt_level=kwargs.get("opt_level", 2),
        )
        compiled = compile_model(model, options)
        return AotcRep(compiled.load(), [o.name for o in model.graph.output])

    @classmethod
    def run_model(cls, model, inputs, device="CPU", **kwargs):
        return cls.prepare(model, device, **kwargs).run(inputs)


prepare = AotcBackend.prepare
run_model = AotcBackend.run_model
supports_device = AotcBackend.supports_device
