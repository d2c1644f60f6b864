"""Fusion kinds (aotc/ir/fusion_kinds.py): what the fusion pass records, from the body."""

from __future__ import annotations

from aotc_testing import hlo_reducer, parsed_dot_fusion

from aotc.ir import FusionKind, Op
from aotc.ir.fusion_kinds import fusion_kind, output_contractions
from aotc.ir.text import parse_module, print_module
from aotc.passes.fusion import Fusion

# bias + ReLU on a dot, and a row sum of exponentials
ENTRY = """
ENTRY %main (x: f32[4,8], w: f32[8,16], b: f32[16]) -> (f32[4,16], f32[4]) {
  %x = f32[4,8]{1,0} parameter(0)
  %w = f32[8,16]{1,0} parameter(1)
  %b = f32[16]{0} parameter(2)
  %d = f32[4,16]{1,0} dot(f32[4,8]{1,0} %x, f32[8,16]{1,0} %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %bb = f32[4,16]{1,0} broadcast(f32[16]{0} %b), dimensions={1}
  %y = f32[4,16]{1,0} add(f32[4,16]{1,0} %d, f32[4,16]{1,0} %bb)
  %zero = f32[] constant(0)
  %r = f32[4,16]{1,0} maximum(f32[4,16]{1,0} %y, f32[4,16]{1,0} %bb)
  %e = f32[4,8]{1,0} exponential(f32[4,8]{1,0} %x)
  %s = f32[4]{0} reduce(f32[4,8]{1,0} %e, f32[] %zero), dimensions={1}, to_apply=%add
  ROOT %t = (f32[4,16]{1,0}, f32[4]{0}) tuple(f32[4,16]{1,0} %r, f32[4]{0} %s)
}"""
MODEL = "HloModule kinds\n" + hlo_reducer("add", "add") + ENTRY

PARSED = parsed_dot_fusion(4, 8, 16)


def _fusions(module):
    return [i for i in module.entry.instructions if i.op is Op.FUSION]


def test_the_pass_records_each_fusions_kind():
    module = parse_module(MODEL)
    assert Fusion().run(module)
    kinds = {i.called[0].root.op: i.fusion_kind for i in _fusions(module)}
    assert kinds == {Op.MAXIMUM: FusionKind.OUTPUT, Op.REDUCE: FusionKind.INPUT}
    for fusion in _fusions(module):
        assert fusion_kind(fusion.called[0]) is fusion.fusion_kind
    assert "kind=kOutput" in print_module(module)


def test_output_contractions_of_kernels():
    module = parse_module(MODEL)
    dot = next(i for i in module.entry.instructions if i.op is Op.DOT)
    assert output_contractions(dot) == [dot]
    Fusion().run(module)
    by_kind = {i.fusion_kind: i for i in _fusions(module)}
    (contraction,) = output_contractions(by_kind[FusionKind.OUTPUT])
    assert contraction.op is Op.DOT
    assert output_contractions(by_kind[FusionKind.INPUT]) == []


def test_a_recorded_kind_is_not_trusted():
    module = parse_module(PARSED)
    (fusion,) = _fusions(module)
    assert fusion.fusion_kind is FusionKind.LOOP  # as parsed
    assert fusion_kind(fusion.called[0]) is FusionKind.OUTPUT
    assert [c.op for c in output_contractions(fusion)] == [Op.DOT]
