from pass_testing import check_pass

from aotc.passes.transpose_fold import TransposeFolding

X_WT = """HloModule m
ENTRY %main (x: f32[2,3], w: f32[4,3]) -> f32[2,4] {
  %x = f32[2,3]{1,0} parameter(0)
  %w = f32[4,3]{1,0} parameter(1)
  %t = f32[3,4]{1,0} transpose(f32[4,3]{1,0} %w), dimensions={1,0}
  ROOT %d = f32[2,4]{1,0} dot(f32[2,3]{1,0} %x, f32[3,4]{1,0} %t), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}"""

X_WT_FOLDED = """HloModule m
ENTRY %main (x: f32[2,3], w: f32[4,3]) -> f32[2,4] {
  %x = f32[2,3]{1,0} parameter(0)
  %w = f32[4,3]{1,0} parameter(1)
  ROOT %d = f32[2,4]{1,0} dot(f32[2,3]{1,0} %x, f32[4,3]{1,0} %w), lhs_contracting_dims={1}, rhs_contracting_dims={1}
}"""


def test_transposed_weights_fold_into_contracting_dims():
    check_pass(TransposeFolding(), X_WT, X_WT_FOLDED)


Q_KT = """HloModule m
ENTRY %main (q: f32[2,5,8], k: f32[2,5,8]) -> f32[2,5,5] {
  %q = f32[2,5,8]{2,1,0} parameter(0)
  %k = f32[2,5,8]{2,1,0} parameter(1)
  %kt = f32[2,8,5]{2,1,0} transpose(f32[2,5,8]{2,1,0} %k), dimensions={0,2,1}
  ROOT %s = f32[2,5,5]{2,1,0} dot(f32[2,5,8]{2,1,0} %q, f32[2,8,5]{2,1,0} %kt), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
}"""

Q_KT_FOLDED = """HloModule m
ENTRY %main (q: f32[2,5,8], k: f32[2,5,8]) -> f32[2,5,5] {
  %q = f32[2,5,8]{2,1,0} parameter(0)
  %k = f32[2,5,8]{2,1,0} parameter(1)
  ROOT %s = f32[2,5,5]{2,1,0} dot(f32[2,5,8]{2,1,0} %q, f32[2,5,8]{2,1,0} %k), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={2}
}"""


def test_batched_q_k_transpose_folds():
    check_pass(TransposeFolding(), Q_KT, Q_KT_FOLDED)


# swapping the two free dims of the lhs would change the output's dim order
FREE_DIMS_SWAPPED = """HloModule m
ENTRY %main (x: f32[3,2,4], w: f32[4,5]) -> f32[2,3,5] {
  %x = f32[3,2,4]{2,1,0} parameter(0)
  %w = f32[4,5]{1,0} parameter(1)
  %t = f32[2,3,4]{2,1,0} transpose(f32[3,2,4]{2,1,0} %x), dimensions={1,0,2}
  ROOT %d = f32[2,3,5]{2,1,0} dot(f32[2,3,4]{2,1,0} %t, f32[4,5]{1,0} %w), lhs_contracting_dims={2}, rhs_contracting_dims={0}
}"""


def test_transpose_that_reorders_free_dims_stays():
    check_pass(TransposeFolding(), FREE_DIMS_SWAPPED, None)
