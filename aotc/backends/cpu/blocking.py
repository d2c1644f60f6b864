"""The blocks of a GEMM, in the BLIS/GotoBLAS style: K in slices of kc, A in MR-row
panels over MB rows, B in NR-column panels over NB columns.

`blocking` sizes them for an M x N x K shape from the target's cache budgets (the A
micro-panel, kc x MR, in L1; the B block, kc x NB, in L2; the A block, MB x kc, in L3)
and picks, of the target's register tiles, the one that pads M and N least.  A
`Blocking` also sizes the packing regions of the workspace.
"""

from __future__ import annotations

from dataclasses import dataclass

from .gemm_config import FEWER_ACCUMULATORS_COST, GemmConfig
from .tiles import edge_columns, edge_cost

WORKSPACE_ALIGNMENT = 64


@dataclass(frozen=True)
class Blocking:
    """The blocks of one GEMM shape."""

    config: GemmConfig
    m: int
    n: int
    k: int
    mr: int
    nr: int
    kc: int
    mb: int
    nb: int

    @property
    def edge(self) -> int:
        """N's last columns past whole NR panels that the edge kernel takes (0: none)."""
        return edge_columns(self.config, self.mr, self.nr, self.n)

    @property
    def a_bytes(self) -> int:
        return aligned(self.mb * self.kc * self.config.itemsize)

    @property
    def b_bytes(self) -> int:
        return aligned(self.kc * self.nb * self.config.itemsize)

    @property
    def workspace_bytes(self) -> int:
        """Packed A block, then packed B block."""
        return self.a_bytes + self.b_bytes

    def region_bytes(self, packed: tuple[bool, bool]) -> tuple[int, int]:
        """Bytes of the A and B packing regions: none for a pre-packed operand."""
        return (0 if packed[0] else self.a_bytes), (0 if packed[1] else self.b_bytes)


def blocking(config: GemmConfig, m: int, n: int, k: int, edges: bool = True) -> Blocking:
    """Blocks for an M x N x K product: the register tile that pads M and N least
    (narrower for small M/N; `edges`: N's last columns may take the edge kernel, else
    they are a whole tile's); K, M and N slices balanced so that none is a sliver."""
    blocks, size = config.blocks, config.itemsize
    mr, nr = min(
        (_tile(config, rows, vectors, m, n) for rows, vectors in blocks.tiles),
        key=lambda tile: _padded_cost(config, tile, m, n, edges),
    )
    kc = balanced(k, max(blocks.l1 // (mr * size), 1), 1)
    nb = balanced(n, max(blocks.l2 // (kc * size) // nr, 1) * nr, nr)
    mb = balanced(m, max(blocks.l3 // (kc * size) // mr, 1) * mr, mr)
    return Blocking(config, m, n, k, mr, nr, kc, mb, nb)


def _tile(config: GemmConfig, rows: int, vectors: int, m: int, n: int) -> tuple[int, int]:
    """(MR, NR) of a register tile shape, cut down to M and N."""
    return min(rows, m), min(vectors * config.lanes, round_up(n, config.lanes))


def _padded_cost(config: GemmConfig, tile: tuple[int, int], m: int, n: int, edges: bool) -> float:
    """Multiply-adds of the M x N product padded to whole tiles (or with the edge
    kernel's column vectors, where `edges`), weighted by the tile's efficiency."""
    mr, nr = tile
    rows, vectors = config.blocks.tiles[0]
    edge = edge_columns(config, mr, nr, n) if edges else 0
    edge_lanes = edge_cost(config, mr, edge) * config.lanes / mr if edge else 0  # per row of C
    cost = round_up(m, mr) * (round_up(n - edge, nr) + edge_lanes)
    full = min(rows, m) * min(vectors, -(-n // config.lanes))
    return cost if mr * -(-nr // config.lanes) >= full else cost * FEWER_ACCUMULATORS_COST


def balanced(total: int, limit: int, multiple: int) -> int:
    """The block size splitting `total` into the fewest even blocks of at most `limit`,
    rounded up to `multiple`."""
    count = -(-max(total, 1) // limit)
    return round_up(-(-max(total, 1) // count), multiple)


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def aligned(size: int) -> int:
    return round_up(size, WORKSPACE_ALIGNMENT)
