"""Fusion never multiplies the work: the optimized module's counted FLOPs stay within
10% of the unoptimized module's, over the ONNX node cases (aotc/ir/cost.py counts a
fused kernel's members as often as it evaluates them)."""

from __future__ import annotations

import numpy as np
import pytest

from aotc.conformance import load_cases
from aotc.errors import AotcError
from aotc.frontends.onnx import import_onnx
from aotc.ir.cost import module_flops
from aotc.ir.text import parse_module
from aotc.passes.pipeline import make_pipeline

LIMIT = 1.1

# cases over the limit, with why: strict, a listed case within it fails the test
OVER_LIMIT = {
    "test_attention_local_window_ext_cache_rank3_head_mask": (
        "a row kernel with two max reductions over one chain of adds evaluates the chain "
        "in each reduction's loop; the pass estimates one"
    ),
    "test_attention_local_window_ext_cache_rank3_head_mask_expanded": "as the case above",
    "test_attention_4d_diff_heads_mask4d_padded_kv": "as the case above",
    "test_attention_4d_causal_padded_kv_bf16": "as the case above",
    "test_attention_4d_causal_padded_kv_bf16_expanded": "as the case above",
    "test_attention_4d_padded_kv_bf16": "as the case above",
}


def _input_shapes(case) -> dict[str, tuple[int, ...]] | None:
    inputs, _ = case.data_sets[0]
    shapes = {}
    for info, value in zip(case.model.graph.input, inputs):
        if not isinstance(value, np.ndarray):
            return None  # sequences, optionals: shapes depend on more than arrays
        shapes[info.name] = value.shape
    return shapes


def _flops(case, shapes, opt_level: int) -> int:
    module = import_onnx(case.model, shapes)
    make_pipeline(opt_level).run(module)
    return module_flops(module)


def test_fusion_keeps_the_node_cases_work():
    over, measured = {}, 0
    for case in load_cases():
        shapes = _input_shapes(case)
        if shapes is None:
            continue
        try:
            before, after = _flops(case, shapes, 0), _flops(case, shapes, 2)
        except (AotcError, ValueError, KeyError, TypeError):
            continue  # cases the importer refuses (their own tests say why)
        measured += 1
        if after > LIMIT * before:
            over[case.name] = after / max(before, 1)
    assert measured > 1000, f"only {measured} node cases measured"
    unexpected = {n: round(r, 3) for n, r in over.items() if n not in OVER_LIMIT}
    assert not unexpected, f"fusion multiplies the work: {unexpected}"
    fixed = set(OVER_LIMIT) - set(over)
    assert not fixed, f"within the limit now, remove from OVER_LIMIT: {sorted(fixed)}"


MAX = """%max (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %m = f32[] maximum(f32[] %a, f32[] %b)
}"""

# YOLO's SPPF block: chained 5x5 max pools (stride 1, padding 2) and their concatenate
SPPF = f"""HloModule m
{MAX}

ENTRY %main (x: f32[1,16,10,10]) -> f32[1,64,10,10] {{
  %x = f32[1,16,10,10]{{3,2,1,0}} parameter(0)
  %ninf = f32[] constant(-inf)
  %p1 = f32[1,16,10,10]{{3,2,1,0}} reduce-window(f32[1,16,10,10]{{3,2,1,0}} %x, f32[] %ninf), window={{size=1x1x5x5 pad=0_0x0_0x2_2x2_2}}, to_apply=%max
  %p2 = f32[1,16,10,10]{{3,2,1,0}} reduce-window(f32[1,16,10,10]{{3,2,1,0}} %p1, f32[] %ninf), window={{size=1x1x5x5 pad=0_0x0_0x2_2x2_2}}, to_apply=%max
  %p3 = f32[1,16,10,10]{{3,2,1,0}} reduce-window(f32[1,16,10,10]{{3,2,1,0}} %p2, f32[] %ninf), window={{size=1x1x5x5 pad=0_0x0_0x2_2x2_2}}, to_apply=%max
  ROOT %c = f32[1,64,10,10]{{3,2,1,0}} concatenate(f32[1,16,10,10]{{3,2,1,0}} %x, f32[1,16,10,10]{{3,2,1,0}} %p1, f32[1,16,10,10]{{3,2,1,0}} %p2, f32[1,16,10,10]{{3,2,1,0}} %p3), dimensions={{1}}
}}"""


@pytest.mark.parametrize("opt_level", [1, 2])
def test_chained_pools_are_not_recomputed_in_their_concatenate(opt_level):
    module = parse_module(SPPF)
    before = module_flops(module)
    make_pipeline(opt_level).run(module)
    assert module_flops(module) <= before
    # each pool is its own kernel (one per window dim, passes/separable_windows.py)
    for fusion in (i for i in module.entry.instructions if i.op.text == "fusion"):
        assert not any(i.op.text == "reduce-window" for i in fusion.called[0].instructions)
