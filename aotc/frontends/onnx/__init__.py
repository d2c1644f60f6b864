"""The ONNX frontend: `import_onnx(model) -> ir.Module`.

importer.py walks the graph; registry.py holds the lowering table; one module
per op family fills it (elementwise, activation, linalg, nn, norm, reduce,
shape_ops, constants).
"""

from .importer import import_onnx, uses_onnxruntime_extras

__all__ = ["import_onnx", "uses_onnxruntime_extras"]
