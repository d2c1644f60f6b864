"""Map inputs whose keys the model fixes, as tensors (ModelBoundary's map parameters).

A C API cannot take an ONNX map, but a map that only DictVectorizer reads (its
vocabulary lists every key it looks at) or CastMap with map_form=SPARSE (keys 0 ..
max_map - 1) is as good as the vector of its values in key order, a missing key's value
0: that vector is the input, and the header lists the keys.
"""

from __future__ import annotations

import onnx

from ...errors import UnsupportedError
from .ml import ML

# the ops that fix the keys of a map they read: op type -> its keys, from the node
KEY_SETS = {
    "DictVectorizer": lambda node: (
        _attribute(node, "string_vocabulary") or _attribute(node, "int64_vocabulary")
    ),
    "CastMap": lambda node: (
        tuple(range(int(_attribute(node, "max_map") or 1)))
        if _attribute(node, "map_form") == "SPARSE"
        else None
    ),
}


def map_keys(graph: onnx.GraphProto, info: onnx.ValueInfoProto) -> tuple[tuple, int]:
    """(the keys, in the order of the input's entries; the values' ONNX element type) of
    the map input `info`, which every reader fixes alike; refused otherwise."""
    readers = [n for n in graph.node if info.name in n.input]
    found = {
        KEY_SETS[n.op_type](n) if n.domain == ML and n.op_type in KEY_SETS else None
        for n in readers
    }
    if not readers or None in found or len(found) != 1:
        raise UnsupportedError(
            f"input '{info.name}' is a map, which aotc takes only where every reader fixes "
            "its keys alike (DictVectorizer's vocabulary, CastMap with map_form=SPARSE)"
        )
    value_type = info.type.map_type.value_type
    if not value_type.HasField("tensor_type"):
        raise UnsupportedError(f"input '{info.name}' is a map of values that are not tensors")
    keys = found.pop()
    assert keys is not None  # refused above
    return tuple(keys), value_type.tensor_type.elem_type


def _attribute(node: onnx.NodeProto, name: str):
    """Attribute `name` of `node` as Python values (strings decoded), or None."""
    for attribute in node.attribute:
        if attribute.name == name:
            value = onnx.helper.get_attribute_value(attribute)
            if isinstance(value, bytes):
                return value.decode()
            if isinstance(value, list):
                return tuple(v.decode() if isinstance(v, bytes) else int(v) for v in value)
            return value
    return None
