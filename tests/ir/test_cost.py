"""Counted work (aotc/ir/cost.py): what a fused kernel really computes."""

from __future__ import annotations

from aotc.ir.cost import evaluations, kernel_flops, module_flops
from aotc.ir.text import parse_module
from aotc.passes.pipeline import make_pipeline

MAX = """%max (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %m = f32[] maximum(f32[] %a, f32[] %b)
}
"""

# a 5x5 max pool of a 5x5 max pool, both inside one concatenate's loop (YOLO's SPPF)
POOL_OF_POOL = f"""HloModule m
{MAX}
%fused (x: f32[1,4,8,8]) -> f32[1,8,8,8] {{
  %x = f32[1,4,8,8]{{3,2,1,0}} parameter(0)
  %ninf = f32[] constant(-inf)
  %p1 = f32[1,4,8,8]{{3,2,1,0}} reduce-window(f32[1,4,8,8]{{3,2,1,0}} %x, f32[] %ninf), window={{size=1x1x5x5 pad=0_0x0_0x2_2x2_2}}, to_apply=%max
  %p2 = f32[1,4,8,8]{{3,2,1,0}} reduce-window(f32[1,4,8,8]{{3,2,1,0}} %p1, f32[] %ninf), window={{size=1x1x5x5 pad=0_0x0_0x2_2x2_2}}, to_apply=%max
  ROOT %c = f32[1,8,8,8]{{3,2,1,0}} concatenate(f32[1,4,8,8]{{3,2,1,0}} %p1, f32[1,4,8,8]{{3,2,1,0}} %p2), dimensions={{1}}
}}

ENTRY %main (x: f32[1,4,8,8]) -> f32[1,8,8,8] {{
  %x = f32[1,4,8,8]{{3,2,1,0}} parameter(0)
  ROOT %f = f32[1,8,8,8]{{3,2,1,0}} fusion(f32[1,4,8,8]{{3,2,1,0}} %x), kind=kLoop, calls=%fused
}}"""


def test_a_producer_read_through_a_window_is_computed_per_tap():
    module = parse_module(POOL_OF_POOL)
    fused = module.entry.root.called[0]
    counts = {i.name: c for i, c in ((i, evaluations(fused)[id(i)]) for i in fused.instructions)}
    elements = 4 * 8 * 8
    assert counts["c"] == 2 * elements
    assert counts["p2"] == elements  # its half of the concatenate
    assert counts["p1"] == elements + 25 * elements  # its half, and 25 taps per p2 element
    assert kernel_flops(module.entry.root) == 25 * counts["p1"] + 25 * counts["p2"]


SOFTMAX = (
    """HloModule m
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(f32[] %a, f32[] %b)
}
"""
    + MAX.replace("%max", "%mx")
    + """
ENTRY %main (x: f32[6,300]) -> f32[6,300] {
  %x = f32[6,300]{1,0} parameter(0)
  %ninf = f32[] constant(-inf)
  %m = f32[6]{0} reduce(f32[6,300]{1,0} %x, f32[] %ninf), dimensions={1}, to_apply=%mx
  %mb = f32[6,300]{1,0} broadcast(f32[6]{0} %m), dimensions={0}
  %d = f32[6,300]{1,0} subtract(f32[6,300]{1,0} %x, f32[6,300]{1,0} %mb)
  %e = f32[6,300]{1,0} exponential(f32[6,300]{1,0} %d)
  %zero = f32[] constant(0)
  %s = f32[6]{0} reduce(f32[6,300]{1,0} %e, f32[] %zero), dimensions={1}, to_apply=%add
  %sb = f32[6,300]{1,0} broadcast(f32[6]{0} %s), dimensions={0}
  ROOT %y = f32[6,300]{1,0} divide(f32[6,300]{1,0} %e, f32[6,300]{1,0} %sb)
}"""
)


def test_softmax_as_one_row_kernel_computes_each_value_once():
    module = parse_module(SOFTMAX)
    unfused = module_flops(module)
    assert unfused == 5 * 6 * 300  # max, subtract, exp, sum, divide
    make_pipeline(2).run(module)
    (fusion,) = [i for i in module.entry.instructions if i.op.text == "fusion"]
    # one kernel; the exponentials are kept in the output for the division
    assert module_flops(module) == unfused
    assert kernel_flops(fusion) == unfused
