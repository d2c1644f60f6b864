"""PyTorch modules and JAX functions compiled in one call, through their own exporters.

`compile_torch(module, example_inputs)` exports the module to ONNX with torch's
exporter (the dynamo one first; the TorchScript one where that fails, as it does for
code dynamo cannot trace) at TORCH_OPSET, then compiles the ModelProto;
`compile_jax(fn, *example_args)` lowers the jitted function for the example arguments
and compiles the HLO text JAX prints.  Both return the driver's CompiledModel, as
`aotc.compile` does, its inputs and outputs in the framework's order (a JAX function's
arguments and results flattened as pytrees).  torch and jax are optional extras
(`pip install 'aotc[torch]'`, `'aotc[jax]'`); without them a call says what to install.
"""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path

from .driver import CompiledModel, CompileOptions, compile_model
from .errors import AotcError

# the opset the exports ask for: the dynamo exporter's own, which aotc lowers whole
TORCH_OPSET = 18
# the TorchScript exporter's: its symbolic functions are written up to 17 at most
LEGACY_TORCH_OPSET = 17


def _need(package: str, extra: str):
    try:
        return __import__(package)
    except ImportError:
        raise AotcError(f"this needs {package}: pip install 'aotc[{extra}]'") from None


def compile_torch(
    module,
    example_inputs: Sequence,
    *,
    name: str | None = None,
    target: str = "host",
    opt_level: int = 2,
    dynamo: bool | None = None,
) -> CompiledModel:
    """Compile a torch.nn.Module for inputs shaped as `example_inputs` (a tuple of
    tensors).  `dynamo`: True or False for one exporter only; None tries dynamo first."""
    torch = _need("torch", "torch")
    args = tuple(example_inputs)
    module = module.eval()
    tries = [True, False] if dynamo is None else [dynamo]
    failures = []
    options = CompileOptions(name=name, target=target, opt_level=opt_level)
    with tempfile.TemporaryDirectory(prefix="aotc-torch-") as folder:
        path = Path(folder) / f"{name or type(module).__name__}.onnx"
        for use_dynamo in tries:
            try:
                with torch.no_grad(), warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # the exporters' advice is for their users
                    _export_torch(torch, module, args, use_dynamo, path)
                break
            except Exception as error:  # noqa: BLE001 - the exporters raise any class
                kind = "dynamo" if use_dynamo else "TorchScript"
                failures.append(f"{kind} exporter: {type(error).__name__}: {error}")
        else:
            raise AotcError("torch could not export the module: " + "; ".join(failures))
        compiled = compile_model(path, options)
    compiled.source = f"torch {type(module).__name__}"
    return compiled


def _export_torch(torch, module, args: tuple, use_dynamo: bool, path: Path) -> None:
    """The module as an ONNX file at `path`, by the dynamo or the TorchScript exporter
    (the weights inside it: aotc puts them in the object anyway)."""
    names = [f"input_{i}" for i in range(len(args))]
    if use_dynamo:
        program = torch.onnx.export(
            module, args, dynamo=True, opset_version=TORCH_OPSET, input_names=names, verbose=False
        )
        program.save(str(path), external_data=False)
    else:
        torch.onnx.export(
            module,
            args,
            str(path),
            dynamo=False,
            opset_version=LEGACY_TORCH_OPSET,
            input_names=names,
        )


def compile_jax(
    fn, *example_args, name: str | None = None, target: str = "host", opt_level: int = 2
) -> CompiledModel:
    """Compile a JAX function for arguments shaped as `example_args` (arrays, or pytrees
    of them), through jax.jit's lowering."""
    jax = _need("jax", "jax")
    lowered = jax.jit(fn, keep_unused=True).lower(*example_args)
    text = lowered.as_text(dialect="hlo")
    name = name or _c_name(fn) or "jax_fn"
    with tempfile.TemporaryDirectory(prefix="aotc-jax-") as folder:
        path = Path(folder) / f"{name}.hlo"
        path.write_text(text)
        options = CompileOptions(name=name, target=target, opt_level=opt_level)
        return compile_model(path, options)


def _c_name(fn) -> str | None:
    """The function's own name where it is a plain identifier (lambdas get the default)."""
    found = getattr(fn, "__name__", "")
    return found if found.isidentifier() and found != "<lambda>" else None
