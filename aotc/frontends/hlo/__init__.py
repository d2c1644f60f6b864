"""The HLO text frontend: `import_hlo(path) -> ir.Module`.

importer.py reads the file and names the entry's inputs and outputs;
dialect.py extends the IR's canonical parser to XLA's dumps (`parse_hlo`);
expansions.py rewrites the XLA opcodes the IR lacks into IR ops.
"""

from .dialect import parse_hlo
from .importer import import_hlo, is_hlo_text

__all__ = ["import_hlo", "is_hlo_text", "parse_hlo"]
