"""aotc: an ahead-of-time compiler for neural networks.

Usage:

    import aotc
    compiled = aotc.compile("model.onnx", input_shapes={"input": (1, 3, 224, 224)})
    compiled.write("build")          # build/model.h, model.o, libmodel.a
    outputs = compiled.load()(x)     # run it from Python (cffi)
"""

from __future__ import annotations

from ._version import __version__ as __version__


def compile(model, *, name=None, input_shapes=None, target="host", opt_level=2):
    """Compile an ONNX model (path or ModelProto) or HLO text file; see driver.CompiledModel."""
    from .driver import CompileOptions, compile_model

    options = CompileOptions(
        name=name, input_shapes=dict(input_shapes or {}), target=target, opt_level=opt_level
    )
    return compile_model(model, options)
