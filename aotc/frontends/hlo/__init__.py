"""The HLO text frontend: `import_hlo(path) -> ir.Module`.

importer.py reads the file and names the entry's inputs and outputs.
"""

from .importer import import_hlo, is_hlo_text

__all__ = ["import_hlo", "is_hlo_text"]
