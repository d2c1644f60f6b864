"""StableHLO frontend entry: MLIR text (or a jax.export artifact) -> ir.Module.

The text is read into functions (`syntax.py`), `@main` is lowered with its calls
inlined (`lowering.py`, `ops.py`), and the module is verified.  The inputs are
@main's arguments in order, the outputs its results (named by `jax.result_info`
where JAX wrote one).  A `.jaxexport` file is jax.export's flatbuffer: jax reads
it (the only use of jax here, and optional) and its `mlir_module()` is the text.
"""

from __future__ import annotations

import re
from pathlib import Path

from ...errors import AotcError, ModelError
from ...ir import Module, Op
from ...ir.verify import verify
from .lowering import Lowering, _plain
from .ops import ARITY, LOWERINGS
from .syntax import ModuleReader

_PREAMBLE = re.compile(rb"(?:\s+|//[^\n]*|#loc[^\n]*)*")
JAX_EXPORT_SUFFIX = ".jaxexport"


def is_stablehlo_text(head: bytes) -> bool:
    """Whether a file starting with `head` is MLIR text: `module` or `func.func` after
    space and comments."""
    rest = head[_PREAMBLE.match(head).end() :]  # type: ignore[union-attr]
    return rest.startswith((b"module", b"func.func"))


def parse_stablehlo(text: str) -> Module:
    """Lower StableHLO text to a verified Module; AotcError (one line, with the line
    number) for text it cannot read or ops it cannot compile."""
    reader = ModuleReader(text)
    functions = reader.functions()
    lowering = Lowering(reader, functions, LOWERINGS, ARITY)
    module = lowering.lower()
    verify(module)
    main = lowering.main()
    module.input_names = [_plain(name) for name, _ in main.arguments]
    assert module.entry is not None and module.entry.root is not None  # lower() built it
    root = module.entry.root
    outputs = root.operands if root.op is Op.TUPLE else [root]
    written = [n for n in main.result_names if n]
    if len(set(written)) == len(outputs) == len(main.result_names) and all(
        n.isidentifier() for n in written
    ):
        module.output_names = written
    else:
        module.output_names = [o.name for o in outputs]
    return module


def read_jax_export(path: Path) -> str:
    """The StableHLO text of a serialized jax.export artifact (needs jax)."""
    try:
        from jax import export  # an optional dependency: aotc[jax]
    except ImportError:
        raise AotcError(
            f"{path}: reading a jax.export artifact needs jax: pip install 'aotc[jax]'"
        ) from None
    try:
        exported = export.deserialize(bytearray(path.read_bytes()))
        return exported.mlir_module()
    except Exception as error:  # noqa: BLE001 - a damaged flatbuffer raises any class
        raise ModelError(f"{path}: not a jax.export artifact: {error}") from None


def import_stablehlo(path_or_text: str | Path, input_shapes: dict | None = None) -> Module:
    """Import a `.mlir` file, a `.jaxexport` file or StableHLO text itself; shapes
    are static in StableHLO, so `input_shapes` must be empty."""
    is_path = isinstance(path_or_text, Path) or not is_stablehlo_text(path_or_text.encode()[:4096])
    where = str(path_or_text) if is_path else "StableHLO text"
    if input_shapes:
        raise AotcError(f"{where}: --input does not apply to StableHLO (its shapes are static)")
    if is_path:
        path = Path(path_or_text)
        if path.suffix == JAX_EXPORT_SUFFIX:
            text = read_jax_export(path)
        else:
            try:
                text = path.read_text()
            except (OSError, UnicodeDecodeError) as error:
                raise ModelError(f"{path}: cannot read StableHLO text: {error}") from None
    else:
        text = str(path_or_text)
    try:
        return parse_stablehlo(text)
    except AotcError as error:
        raise error.with_context(where) from None
    except RecursionError:
        raise ModelError(f"{where}: nested too deeply") from None
