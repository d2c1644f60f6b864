"""The StableHLO frontend: `import_stablehlo(path_or_text) -> ir.Module`.

tokens.py reads MLIR's text as tokens; values.py its attributes and tensor types;
syntax.py the module's functions, blocks and ops (pretty and generic forms);
lowering.py lowers @main (regions into computations, calls inlined) with the op
table of ops.py and chlo.py; importer.py names the inputs and outputs and reads
.jaxexport artifacts.
"""

from .importer import JAX_EXPORT_SUFFIX, import_stablehlo, is_stablehlo_text, parse_stablehlo

__all__ = ["JAX_EXPORT_SUFFIX", "import_stablehlo", "is_stablehlo_text", "parse_stablehlo"]
