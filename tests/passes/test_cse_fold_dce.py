from pass_testing import check_pass

from aotc.passes.cse import CommonSubexpressionElimination
from aotc.passes.dce import DeadCodeElimination
from aotc.passes.fold import ConstantFolding

DUPLICATES = """HloModule m
ENTRY %main (x: f32[4], y: f32[4]) -> f32[4] {
  %x = f32[4]{0} parameter(0)
  %y = f32[4]{0} parameter(1)
  %a = f32[4]{0} add(f32[4]{0} %x, f32[4]{0} %y)
  %b = f32[4]{0} add(f32[4]{0} %y, f32[4]{0} %x)
  %e1 = f32[4]{0} exponential(f32[4]{0} %a)
  %e2 = f32[4]{0} exponential(f32[4]{0} %b)
  ROOT %m = f32[4]{0} multiply(f32[4]{0} %e1, f32[4]{0} %e2)
}"""

DEDUPLICATED = """HloModule m
ENTRY %main (x: f32[4], y: f32[4]) -> f32[4] {
  %x = f32[4]{0} parameter(0)
  %y = f32[4]{0} parameter(1)
  %a = f32[4]{0} add(f32[4]{0} %x, f32[4]{0} %y)
  %e1 = f32[4]{0} exponential(f32[4]{0} %a)
  ROOT %m = f32[4]{0} multiply(f32[4]{0} %e1, f32[4]{0} %e1)
}"""

NONCOMMUTATIVE = """HloModule m
ENTRY %main (x: f32[4], y: f32[4]) -> f32[4] {
  %x = f32[4]{0} parameter(0)
  %y = f32[4]{0} parameter(1)
  %a = f32[4]{0} subtract(f32[4]{0} %x, f32[4]{0} %y)
  %b = f32[4]{0} subtract(f32[4]{0} %y, f32[4]{0} %x)
  ROOT %m = f32[4]{0} multiply(f32[4]{0} %a, f32[4]{0} %b)
}"""


def test_cse_merges_commutative_duplicates():
    check_pass(CommonSubexpressionElimination(), DUPLICATES, DEDUPLICATED)


def test_cse_keeps_noncommutative_operand_order():
    check_pass(CommonSubexpressionElimination(), NONCOMMUTATIVE, None)


FOLDABLE = """HloModule m
ENTRY %main (x: f32[3]) -> f32[3] {
  %x = f32[3]{0} parameter(0)
  %c1 = f32[3]{0} constant({1, 2, 3})
  %c2 = f32[3]{0} constant({4, 5, 6})
  %s = f32[3]{0} multiply(f32[3]{0} %c1, f32[3]{0} %c2)
  ROOT %a = f32[3]{0} add(f32[3]{0} %x, f32[3]{0} %s)
}"""

FOLDED = """HloModule m
ENTRY %main (x: f32[3]) -> f32[3] {
  %x = f32[3]{0} parameter(0)
  %c = f32[3]{0} constant({4, 10, 18})
  ROOT %a = f32[3]{0} add(f32[3]{0} %x, f32[3]{0} %c)
}"""

# a broadcast of a scalar to 4 MB stays a broadcast: folding would bloat the weights
BIG_BROADCAST = """HloModule m
ENTRY %main (x: f32[1024,1024]) -> f32[1024,1024] {
  %x = f32[1024,1024]{1,0} parameter(0)
  %c = f32[] constant(2)
  %b = f32[1024,1024]{1,0} broadcast(f32[] %c), dimensions={}
  ROOT %a = f32[1024,1024]{1,0} add(f32[1024,1024]{1,0} %x, f32[1024,1024]{1,0} %b)
}"""


def test_fold_computes_constant_subexpressions():
    check_pass(ConstantFolding(), FOLDABLE, FOLDED)


def test_fold_does_not_bloat_weights():
    check_pass(ConstantFolding(), BIG_BROADCAST, None)


# doublings of one broadcast scalar: the chain reaches one 4-byte constant along 2^19
# paths, which must count once (counting each path would fold 256 KB into the weights)
SHARED_CHAIN = """HloModule m
ENTRY %main (x: f32[256,256]) -> f32[256,256] {
  %x = f32[256,256]{1,0} parameter(0)
  %c = f32[] constant(2)
  %d0 = f32[256,256]{1,0} broadcast(f32[] %c), dimensions={}
  %d1 = f32[256,256]{1,0} add(f32[256,256]{1,0} %d0, f32[256,256]{1,0} %d0)
  %d2 = f32[256,256]{1,0} add(f32[256,256]{1,0} %d1, f32[256,256]{1,0} %d1)
  %d3 = f32[256,256]{1,0} add(f32[256,256]{1,0} %d2, f32[256,256]{1,0} %d2)
  %d4 = f32[256,256]{1,0} add(f32[256,256]{1,0} %d3, f32[256,256]{1,0} %d3)
  %d5 = f32[256,256]{1,0} add(f32[256,256]{1,0} %d4, f32[256,256]{1,0} %d4)
  %d6 = f32[256,256]{1,0} add(f32[256,256]{1,0} %d5, f32[256,256]{1,0} %d5)
  %d7 = f32[256,256]{1,0} add(f32[256,256]{1,0} %d6, f32[256,256]{1,0} %d6)
  %d8 = f32[256,256]{1,0} add(f32[256,256]{1,0} %d7, f32[256,256]{1,0} %d7)
  %d9 = f32[256,256]{1,0} add(f32[256,256]{1,0} %d8, f32[256,256]{1,0} %d8)
  %d10 = f32[256,256]{1,0} add(f32[256,256]{1,0} %d9, f32[256,256]{1,0} %d9)
  %d11 = f32[256,256]{1,0} add(f32[256,256]{1,0} %d10, f32[256,256]{1,0} %d10)
  %d12 = f32[256,256]{1,0} add(f32[256,256]{1,0} %d11, f32[256,256]{1,0} %d11)
  %d13 = f32[256,256]{1,0} add(f32[256,256]{1,0} %d12, f32[256,256]{1,0} %d12)
  %d14 = f32[256,256]{1,0} add(f32[256,256]{1,0} %d13, f32[256,256]{1,0} %d13)
  %d15 = f32[256,256]{1,0} add(f32[256,256]{1,0} %d14, f32[256,256]{1,0} %d14)
  %d16 = f32[256,256]{1,0} add(f32[256,256]{1,0} %d15, f32[256,256]{1,0} %d15)
  %d17 = f32[256,256]{1,0} add(f32[256,256]{1,0} %d16, f32[256,256]{1,0} %d16)
  %d18 = f32[256,256]{1,0} add(f32[256,256]{1,0} %d17, f32[256,256]{1,0} %d17)
  %d19 = f32[256,256]{1,0} add(f32[256,256]{1,0} %d18, f32[256,256]{1,0} %d18)
  ROOT %a = f32[256,256]{1,0} add(f32[256,256]{1,0} %x, f32[256,256]{1,0} %d19)
}"""


def test_fold_counts_a_shared_constant_once():
    check_pass(ConstantFolding(), SHARED_CHAIN, None)


# two counters: each advances on its own, so CSE must not merge them (nor fold them)
TWO_COUNTERS = """HloModule m
ENTRY %main () -> (u64[2], u64[2]) {
  %a = u64[2]{0} rng-get-and-update-state(), delta=4
  %b = u64[2]{0} rng-get-and-update-state(), delta=4
  ROOT %t = (u64[2]{0}, u64[2]{0}) tuple(u64[2]{0} %a, u64[2]{0} %b)
}"""


def test_cse_and_fold_keep_side_effects():
    check_pass(CommonSubexpressionElimination(), TWO_COUNTERS, None)
    check_pass(ConstantFolding(), TWO_COUNTERS, None)


DEAD = """HloModule m
ENTRY %main (x: f32[3]) -> f32[3] {
  %x = f32[3]{0} parameter(0)
  %unused = f32[3]{0} exponential(f32[3]{0} %x)
  ROOT %n = f32[3]{0} negate(f32[3]{0} %x)
}"""

LIVE = """HloModule m
ENTRY %main (x: f32[3]) -> f32[3] {
  %x = f32[3]{0} parameter(0)
  ROOT %n = f32[3]{0} negate(f32[3]{0} %x)
}"""


def test_dce_removes_unused():
    check_pass(DeadCodeElimination(), DEAD, LIVE)


def test_dce_no_change():
    check_pass(DeadCodeElimination(), LIVE, None)
