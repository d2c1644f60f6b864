from pass_testing import check_pass

from aotc.passes.scalefold import ScaleFolding

# conv -> + bias -> * bn scale -> + bn shift, all per output channel
CONV_BN = """HloModule m
ENTRY %main (x: f32[1,2,5,5]) -> f32[1,3,3,3] {
  %x = f32[1,2,5,5]{3,2,1,0} parameter(0)
  %w = f32[3,2,3,3]{3,2,1,0} constant({ { { {1, 2, 3}, {4, 5, 6}, {7, 8, 9} }, { {1, 0, 1}, {0, 1, 0}, {1, 0, 1} } }, { { {2, 2, 2}, {2, 2, 2}, {2, 2, 2} }, { {1, 1, 1}, {1, 1, 1}, {1, 1, 1} } }, { { {0, 1, 0}, {1, 0, 1}, {0, 1, 0} }, { {3, 2, 1}, {2, 1, 2}, {1, 2, 3} } } })
  %c = f32[1,3,3,3]{3,2,1,0} convolution(f32[1,2,5,5]{3,2,1,0} %x, f32[3,2,3,3]{3,2,1,0} %w), window={size=3x3}, dim_labels=bf01_oi01->bf01
  %bias = f32[3]{0} constant({0.5, -1, 2})
  %bb = f32[1,3,3,3]{3,2,1,0} broadcast(f32[3]{0} %bias), dimensions={1}
  %a = f32[1,3,3,3]{3,2,1,0} add(f32[1,3,3,3]{3,2,1,0} %c, f32[1,3,3,3]{3,2,1,0} %bb)
  %s = f32[3]{0} constant({0.25, 2, -3})
  %sb = f32[1,3,3,3]{3,2,1,0} broadcast(f32[3]{0} %s), dimensions={1}
  %m = f32[1,3,3,3]{3,2,1,0} multiply(f32[1,3,3,3]{3,2,1,0} %a, f32[1,3,3,3]{3,2,1,0} %sb)
  %t = f32[3]{0} constant({1, 1, 1})
  %tb = f32[1,3,3,3]{3,2,1,0} broadcast(f32[3]{0} %t), dimensions={1}
  ROOT %r = f32[1,3,3,3]{3,2,1,0} add(f32[1,3,3,3]{3,2,1,0} %m, f32[1,3,3,3]{3,2,1,0} %tb)
}"""

CONV_BN_FOLDED = """HloModule m
ENTRY %main (x: f32[1,2,5,5]) -> f32[1,3,3,3] {
  %x = f32[1,2,5,5]{3,2,1,0} parameter(0)
  %w = f32[3,2,3,3]{3,2,1,0} constant({ { { {1, 2, 3}, {4, 5, 6}, {7, 8, 9} }, { {1, 0, 1}, {0, 1, 0}, {1, 0, 1} } }, { { {2, 2, 2}, {2, 2, 2}, {2, 2, 2} }, { {1, 1, 1}, {1, 1, 1}, {1, 1, 1} } }, { { {0, 1, 0}, {1, 0, 1}, {0, 1, 0} }, { {3, 2, 1}, {2, 1, 2}, {1, 2, 3} } } })
  %bias = f32[3]{0} constant({0.5, -1, 2})
  %s = f32[3]{0} constant({0.25, 2, -3})
  %t = f32[3]{0} constant({1, 1, 1})
  %bs = f32[3]{0} multiply(f32[3]{0} %bias, f32[3]{0} %s)
  %shift = f32[3]{0} add(f32[3]{0} %bs, f32[3]{0} %t)
  %tb = f32[1,3,3,3]{3,2,1,0} broadcast(f32[3]{0} %shift), dimensions={1}
  %ws = f32[3,2,3,3]{3,2,1,0} broadcast(f32[3]{0} %s), dimensions={0}
  %w2 = f32[3,2,3,3]{3,2,1,0} multiply(f32[3,2,3,3]{3,2,1,0} %w, f32[3,2,3,3]{3,2,1,0} %ws)
  %c = f32[1,3,3,3]{3,2,1,0} convolution(f32[1,2,5,5]{3,2,1,0} %x, f32[3,2,3,3]{3,2,1,0} %w2), window={size=3x3}, dim_labels=bf01_oi01->bf01
  ROOT %r = f32[1,3,3,3]{3,2,1,0} add(f32[1,3,3,3]{3,2,1,0} %c, f32[1,3,3,3]{3,2,1,0} %tb)
}"""


def test_batch_norm_folds_into_conv_weights_and_one_bias():
    check_pass(ScaleFolding(), CONV_BN, CONV_BN_FOLDED, rtol=1e-6)


# the scale runs along the dot's lhs rows, not a weight dim: nothing to fold
DOT_ROW_SCALE = """HloModule m
ENTRY %main (x: f32[2,3]) -> f32[2,4] {
  %x = f32[2,3]{1,0} parameter(0)
  %w = f32[3,4]{1,0} constant({ {1, 2, 3, 4}, {5, 6, 7, 8}, {9, 10, 11, 12} })
  %d = f32[2,4]{1,0} dot(f32[2,3]{1,0} %x, f32[3,4]{1,0} %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %s = f32[2]{0} constant({2, 3})
  %sb = f32[2,4]{1,0} broadcast(f32[2]{0} %s), dimensions={0}
  ROOT %m = f32[2,4]{1,0} multiply(f32[2,4]{1,0} %d, f32[2,4]{1,0} %sb)
}"""


def test_scale_along_lhs_rows_is_not_folded():
    check_pass(ScaleFolding(), DOT_ROW_SCALE, None)


DOT_COLUMN_SCALE = (
    DOT_ROW_SCALE.replace("f32[2]{0} constant({2, 3})", "f32[4]{0} constant({2, 3, 4, 5})")
    .replace("broadcast(f32[2]{0} %s), dimensions={0}", "broadcast(f32[4]{0} %s), dimensions={1}")
    .replace("%s = f32[2]{0}", "%s = f32[4]{0}")
)

DOT_COLUMN_FOLDED = """HloModule m
ENTRY %main (x: f32[2,3]) -> f32[2,4] {
  %x = f32[2,3]{1,0} parameter(0)
  %w = f32[3,4]{1,0} constant({ {1, 2, 3, 4}, {5, 6, 7, 8}, {9, 10, 11, 12} })
  %s = f32[4]{0} constant({2, 3, 4, 5})
  %ws = f32[3,4]{1,0} broadcast(f32[4]{0} %s), dimensions={1}
  %w2 = f32[3,4]{1,0} multiply(f32[3,4]{1,0} %w, f32[3,4]{1,0} %ws)
  ROOT %d = f32[2,4]{1,0} dot(f32[2,3]{1,0} %x, f32[3,4]{1,0} %w2), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}"""


def test_scale_along_dot_output_columns_folds_into_weights():
    check_pass(ScaleFolding(), DOT_COLUMN_SCALE, DOT_COLUMN_FOLDED, rtol=1e-6)
