"""Attention chains: scores = a dot, a row fusion over them (softmax), a dot of its result.

After fusion, attention is three kernels: S = Q K^T (a dot, or an OUTPUT fusion of it:
a scale as its epilogue, reshapes and transposes of its operands), P = a row fusion
over S's last dim (softmax, with a mask or a scale read at S's index), O = P V (a dot
or an OUTPUT fusion of it).  A chain is those three when the rows of S are
independent of each other through to O: each row of P needs only the same row of S,
each row of O only the same row of P.  A backend may then compute a block of rows at
a time, S's block never leaving its cache (the CPU's attention.py), as one `kChain`
fusion whose body holds the three kernels as fusions (passes/attention_chains.py).

`attention_chain` finds a chain ending in a kernel of an entry computation;
`chain_parts` reads the three back from a kChain fusion's body.
"""

from __future__ import annotations

from dataclasses import dataclass

from .fusion_kinds import output_contractions
from .index_maps import row_values
from .module import Computation, Instruction
from .ops import Op
from .types import DType

# element types of the chain's values: the CPU's block kernel is f32 GEMMs
CHAIN_DTYPES = frozenset({DType.F32})


@dataclass(frozen=True)
class AttentionChain:
    """The three kernels of a chain, in order."""

    scores: Instruction  # S = Q K^T: a dot or an OUTPUT fusion of one
    rows: Instruction  # P: a row fusion over S's last dim
    values: Instruction  # O = P V: a dot or an OUTPUT fusion of one


def attention_chain(values: Instruction):
    """The chain ending in kernel `values`, or None."""
    dot = _the_dot(values)
    if dot is None:
        return None
    rows = _operand_of(values, dot, 0)
    if rows is None or rows.op is not Op.FUSION or rows.users != [values]:
        return None
    if values.operands.count(rows) != 1:
        return None
    scores = [o for o in rows.operands if o.shape == rows.shape and _the_dot(o) is not None]
    if len(scores) != 1 or scores[0].users != [rows] or rows.operands.count(scores[0]) > 1:
        return None
    chain = AttentionChain(scores[0], rows, values)
    return chain if _is_chain(chain) else None


def chain_parts(body: Computation) -> AttentionChain:
    """The chain of a kChain fusion's body (its fusions in order)."""
    scores, rows, values = [i for i in body.instructions if i.op is Op.FUSION]
    return AttentionChain(scores, rows, values)


def chain_dot(kernel: Instruction) -> Instruction:
    """The dot a chain's contraction kernel computes."""
    dot = _the_dot(kernel)
    assert dot is not None, kernel.name
    return dot


def score_parameter(chain: AttentionChain) -> Instruction:
    """The parameter of the row fusion's body that S is."""
    return chain.rows.called[0].parameters[chain.rows.operands.index(chain.scores)]


def _the_dot(kernel: Instruction) -> Instruction | None:
    """The one dot a kernel computes ahead of its epilogue (itself if a dot), or None."""
    found = output_contractions(kernel)
    if len(found) != 1 or found[0].op is not Op.DOT:
        return None
    return found[0]


def _operand_of(kernel: Instruction, dot: Instruction, k: int) -> Instruction | None:
    """The kernel operand that is the dot's operand `k` itself (in a fusion: a parameter
    read by the dot alone), or None."""
    if kernel is dot:
        return kernel.operands[k]
    operand = dot.operands[k]
    if operand.op is not Op.PARAMETER:
        return None
    if operand.users != [dot] or operand.index is None:
        return None
    return kernel.operands[operand.index]


def _is_chain(chain: AttentionChain) -> bool:
    """Whether the rows of S are independent through to O (and of a dtype chained)."""
    first, second = _the_dot(chain.scores), _the_dot(chain.values)
    assert first is not None and second is not None
    assert first.dot is not None and second.dot is not None  # the verifier's rule
    shapes = [first.array_shape, chain.rows.array_shape, second.array_shape]
    shapes += [o.array_shape for o in (*first.operands, *second.operands)]
    if any(s.dtype not in CHAIN_DTYPES for s in shapes):
        return False
    rank = chain.rows.array_shape.rank
    batch = len(first.dot.lhs_batch)
    # S's last dim is the keys (the rhs free dim), its rows the batch and query dims
    rhs_free = first.operands[1].array_shape.rank - batch - len(first.dot.rhs_contracting)
    if rhs_free != 1:
        return False
    # O's rows are P's: P's batch dims lead, its keys contracted
    dims = second.dot
    if dims.lhs_batch != tuple(range(batch)) or dims.lhs_contracting != (rank - 1,):
        return False
    row_rank, hoisted = row_values(chain.rows)
    return row_rank == rank - 1 and _read_in_its_row(chain, hoisted)


def _read_in_its_row(chain: AttentionChain, hoisted: list[Instruction]) -> bool:
    """Whether the row fusion reads S only at its own output index: through elementwise
    ops at S's shape, into reductions over the last dim (its row values)."""
    dims = chain.rows.array_shape.dims
    last = (len(dims) - 1,)
    row_ids = {id(v) for v in hoisted}
    work, seen = [score_parameter(chain)], set()
    while work:
        instr = work.pop()
        for user in instr.users:
            if id(user) in seen:
                continue
            seen.add(id(user))
            if user.op is Op.REDUCE and user.dimensions == last and id(user) in row_ids:
                continue
            if not user.op.is_elementwise or user.array_shape.dims != dims:
                return False
            work.append(user)
    return True
