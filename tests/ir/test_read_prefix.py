"""read_prefix: how far along a dim a sort's users read it (TopK's k), conservatively."""

from __future__ import annotations

import re

import pytest

from aotc.ir.read_prefix import read_prefix
from aotc.ir.text import parse_module

COMPARE = """
%lt (a: f32[], b: f32[], i: s32[], j: s32[]) -> pred[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  %i = s32[] parameter(2)
  %j = s32[] parameter(3)
  ROOT %c = pred[] compare(f32[] %a, f32[] %b), direction=LT
}
"""

SORT = """
  %x = f32[4,100]{1,0} parameter(0)
  %iota = s32[4,100]{1,0} iota(), iota_dimension=1
  %sort = (f32[4,100]{1,0}, s32[4,100]{1,0}) sort(f32[4,100]{1,0} %x, s32[4,100]{1,0} %iota), dimensions={1}, is_stable=true, to_apply=%lt
  %values = f32[4,100]{1,0} get-tuple-element((f32[4,100]{1,0}, s32[4,100]{1,0}) %sort), index=0
  %indices = s32[4,100]{1,0} get-tuple-element((f32[4,100]{1,0}, s32[4,100]{1,0}) %sort), index=1
"""


def prefix(body: str, fused: str = "") -> int:
    result = re.search(r"ROOT %\S+ = (.*?) [a-z-]+\(", body).group(1)  # the root's shape
    text = (
        f"HloModule m\n{COMPARE}{fused}\nENTRY %main (x: f32[4,100]) -> {result} {{{SORT}{body}}}\n"
    )
    module = parse_module(text)
    sort = next(i for i in module.entry.instructions if i.name == "sort")
    return read_prefix(sort, 1, module.entry.post_order())


# fused: the slice inside a fusion reads 5 of the indices' parameter
FUSED = """
%fused (p: s32[4,100]) -> s32[4,5] {
  %p = s32[4,100]{1,0} parameter(0)
  ROOT %s = s32[4,5]{1,0} slice(s32[4,100]{1,0} %p), slice={[0:4], [0:5]}
}
"""

CASES = {
    "slices of both elements: the longer": (
        """
  %v = f32[4,3]{1,0} slice(f32[4,100]{1,0} %values), slice={[0:4], [0:3]}
  %i = s32[4,7]{1,0} slice(s32[4,100]{1,0} %indices), slice={[0:4], [0:7]}
  ROOT %t = (f32[4,3]{1,0}, s32[4,7]{1,0}) tuple(f32[4,3]{1,0} %v, s32[4,7]{1,0} %i)
""",
        "",
        7,
    ),
    "a slice not from the start: up to its limit": (
        """
  ROOT %i = s32[4,3]{1,0} slice(s32[4,100]{1,0} %indices), slice={[0:4], [2:11:4]}
""",
        "",
        11,
    ),
    "a slice along another dim: everything": (
        """
  ROOT %i = s32[2,100]{1,0} slice(s32[4,100]{1,0} %indices), slice={[0:2], [0:100]}
""",
        "",
        100,
    ),
    "a slice inside a fusion": (
        """
  ROOT %f = s32[4,5]{1,0} fusion(s32[4,100]{1,0} %indices), kind=kLoop, calls=%fused
""",
        FUSED,
        5,
    ),
    "an element that is also read whole": (
        """
  %i = s32[4,7]{1,0} slice(s32[4,100]{1,0} %indices), slice={[0:4], [0:7]}
  %n = s32[4,100]{1,0} negate(s32[4,100]{1,0} %indices)
  ROOT %t = (s32[4,7]{1,0}, s32[4,100]{1,0}) tuple(s32[4,7]{1,0} %i, s32[4,100]{1,0} %n)
""",
        "",
        100,
    ),
    "an element returned (the root)": (
        """
  %i = s32[4,7]{1,0} slice(s32[4,100]{1,0} %indices), slice={[0:4], [0:7]}
  ROOT %t = (s32[4,7]{1,0}, f32[4,100]{1,0}) tuple(s32[4,7]{1,0} %i, f32[4,100]{1,0} %values)
""",
        "",
        100,
    ),
    "no element read": (
        """
  ROOT %r = f32[4,100]{1,0} negate(f32[4,100]{1,0} %x)
""",
        "",
        100,
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_read_prefix(name):
    body, fused, expected = CASES[name]
    assert prefix(body, fused) == expected
