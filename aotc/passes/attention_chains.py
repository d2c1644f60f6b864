"""Attention chains as one fusion: S = Q K^T, P = softmax(S), O = P V computed together.

After fusion, attention is three kernels (aotc/ir/attention_chain.py), and the score
array S between them goes to memory and back three times: 54 MB per layer for
Whisper's 6 heads over 1,500 positions.  Where S is large, this pass replaces the
three kernels by one `kChain` fusion whose body holds them as fusions (a bare dot
wrapped in one), so that a backend computes a block of query rows at a time, S's
block staying in cache (the CPU's attention.py).  It runs after fusion, only for
backends that compute kChain fusions (`make_pipeline(chains=True)`); others keep the
three kernels.
"""

from __future__ import annotations

import dataclasses

from ..ir import ComputationBuilder, FusionKind, Instruction, Module, Op
from ..ir.attention_chain import AttentionChain, attention_chain
from ..ir.inline import copy_instruction
from .fusion import fusion_instruction

# chains whose score array is smaller stay three kernels: S then fits in the caches
# between the kernels (BERT's 12 heads x 128 x 128 are 786 KB), and a kernel per query
# block would repack K and V more often than it saves
MIN_SCORE_BYTES = 4 << 20


class AttentionChains:
    name = "attention-chains"

    def run(self, module: Module) -> bool:
        changed = False
        for computation in module.program_computations():
            chains: list[AttentionChain] = []
            taken: set[int] = set()
            for instr in computation.instructions:
                chain = attention_chain(instr)
                if chain is None or chain.rows.array_shape.nbytes < MIN_SCORE_BYTES:
                    continue
                kernels = {id(chain.scores), id(chain.rows), id(chain.values)}
                if not kernels & taken:  # one chain's output the next one's scores
                    chains.append(chain)
                    taken |= kernels
            if chains:
                # each chain's last kernel -> its kChain fusion, placed just before it
                fused = {chain.values: _outline(module, chain) for chain in chains}
                computation.place_before({last: [fusion] for last, fusion in fused.items()})
                computation.replace_uses(fused)
                computation.remove_dead()
                changed = True
        if changed:
            module.remove_unused_computations()
        return changed


def _outline(module: Module, chain: AttentionChain) -> Instruction:
    """A kChain fusion of the chain's three kernels, to read in its last one's place."""
    builder = ComputationBuilder(module, f"chained_{chain.values.name}")
    inside: dict[int, Instruction] = {}
    operands: list[Instruction] = []
    for kernel in (chain.scores, chain.rows, chain.values):
        for operand in kernel.operands:
            _parameter_for(builder, inside, operands, operand)
        part = _part(module, kernel, inside)
        builder.computation.instructions.append(part)
        inside[id(kernel)] = part
    body = builder.build(inside[id(chain.values)])
    return fusion_instruction(
        module, chain.values, operands, body, FusionKind.CHAIN, "fusion.attention"
    )


def _part(module: Module, kernel: Instruction, inside: dict[int, Instruction]) -> Instruction:
    """`kernel` in the chain's body, reading the values there (`inside`, by id) of its
    operands: a copy of it if a fusion, else (a bare dot) an OUTPUT fusion of it alone."""
    if kernel.op is Op.FUSION:
        return copy_instruction(module, kernel, [inside[id(o)] for o in kernel.operands])
    builder = ComputationBuilder(module, f"fused_{kernel.name}")
    params: dict[int, Instruction] = {}
    distinct: list[Instruction] = []
    for operand in kernel.operands:
        _parameter_for(builder, params, distinct, operand)
    dot = dataclasses.replace(
        kernel,
        operands=[params[id(o)] for o in kernel.operands],
        name=module.unique_name(kernel.name),
    )
    builder.computation.instructions.append(dot)
    body = builder.build(dot)
    reads = [inside[id(o)] for o in distinct]
    return fusion_instruction(module, kernel, reads, body, FusionKind.OUTPUT, "fusion")


def _parameter_for(
    builder: ComputationBuilder,
    params: dict[int, Instruction],
    operands: list[Instruction],
    operand: Instruction,
) -> None:
    """The body's parameter standing for `operand`, made once (the fusion's next operand)."""
    if id(operand) not in params:
        number = len(operands)
        params[id(operand)] = builder.parameter(number, operand.array_shape, f"param_{number}")
        operands.append(operand)
