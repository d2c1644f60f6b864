"""aotc: an ahead-of-time compiler for neural networks.

Usage:

    import aotc
    compiled = aotc.compile("model.onnx", input_shapes={"input": (1, 3, 224, 224)})
    compiled = aotc.compile_torch(torch_module, (example_input,))   # aotc[torch]
    compiled = aotc.compile_jax(jax_function, example_x, example_y)  # aotc[jax]
    compiled.write("build")          # build/model.h, model.o, libmodel.a
    outputs = compiled.load()(x)     # run it from Python (cffi)
    kernels = aotc.profile("model.onnx")  # its kernels, slowest first (aotc profile)
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


def compile_torch(module, example_inputs, *, name=None, target="host", opt_level=2):
    """Compile a torch.nn.Module through torch's ONNX exporter (aotc.frameworks)."""
    from .frameworks import compile_torch as compile_module

    return compile_module(module, example_inputs, name=name, target=target, opt_level=opt_level)


def compile_jax(fn, *example_args, name=None, target="host", opt_level=2):
    """Compile a JAX function through jax.jit's lowering (aotc.frameworks)."""
    from .frameworks import compile_jax as compile_function

    return compile_function(fn, *example_args, name=name, target=target, opt_level=opt_level)


def profile(model, *, input_shapes=None, target="host", opt_level=2, threads=1, runs=10):
    """Run an instrumented build of the model here on random inputs; its kernels, slowest
    first, each with its time, calls, bytes, FLOPs and share of this machine's bound
    (`aotc.profiling.KernelProfile`; `profiling.profile_model` gives the whole profile)."""
    from .driver import CompileOptions
    from .profiling import profile_model

    options = CompileOptions(
        input_shapes=dict(input_shapes or {}),
        target=target,
        opt_level=opt_level,
        threads=threads,
    )
    return profile_model(model, options, runs).kernels
