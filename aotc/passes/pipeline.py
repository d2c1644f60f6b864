"""The pass pipeline: an ordered list of passes run over a module.

A pass is an object with a short `name` and `run(module) -> bool` (changed
or not), one per file in this package, like XLA's HloPassPipeline.  With
`dump_dir` set, the module is written after every pass as `NN-name.hlo`;
with `verify` set, the verifier runs after every pass.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from .. import progress
from ..ir import Module


class Pass(Protocol):
    name: str

    def run(self, module: Module) -> bool: ...


@dataclass
class Pipeline:
    passes: Sequence[Pass]
    dump_dir: Path | None = None
    verify: bool = False

    def run(self, module: Module) -> bool:
        from ..ir.text import print_module
        from ..ir.verify import verify

        changed = False
        self._dump(module, 0, "input", print_module)
        for number, p in enumerate(self.passes, start=1):
            progress.stage(f"pass {number}/{len(self.passes)} {p.name}")
            changed |= p.run(module)
            if self.verify:
                verify(module)
            self._dump(module, number, p.name, print_module)
        return changed

    def _dump(self, module: Module, number: int, name: str, printer: Callable) -> None:
        if self.dump_dir is None:
            return
        self.dump_dir.mkdir(parents=True, exist_ok=True)
        text = printer(module, elide_constants_over=64)
        (self.dump_dir / f"{number:02d}-{name}.hlo").write_text(text)


def make_pipeline(
    opt_level: int, dump_dir: Path | None = None, verify: bool = False, chains: bool = False
):
    """The passes for an optimization level (-O0: only what compiling needs); `chains`:
    the backend computes kChain fusions (attention block by block, after fusion)."""
    from .algsimp import AlgebraicSimplifier
    from .attention_chains import AttentionChains
    from .bounded_dims import BoundedDims
    from .clip_extents import ClipExtents
    from .conv_bands import ConvBands
    from .conv_frames import ConvFrames
    from .conv_layout import ConvLayoutAssignment
    from .conv_phases import ConvPhases
    from .cse import CommonSubexpressionElimination
    from .dce import DeadCodeElimination
    from .empty_arrays import EmptyArrays
    from .fold import ConstantFolding
    from .fusion import Fusion
    from .inline import CallInlining
    from .padding_taps import PaddingTaps
    from .scalefold import ScaleFolding
    from .separable_windows import SeparableWindows
    from .squared_distances import SquaredDistances
    from .transpose_fold import TransposeFolding

    # backends take no `call`, no bounded dims (padded to their bounds, inlined calls
    # included) and no kernel of an array without elements
    passes: list[Pass] = [CallInlining(), BoundedDims(), EmptyArrays()]
    if opt_level >= 1:
        # scale folding needs the batch-norm vectors folded first, and makes new
        # constant expressions (scaled weights) for the second folding; convolutions
        # are canonical first, so that their weights' transposes fold; stride phases
        # and dropped padding taps after scale folding (which needs the whole
        # convolution), so that the second folding computes their sub-kernels; output
        # bands after the padding taps, which leave fewer taps for them to weigh;
        # frames last (unit window dims to the batch, or merged), on the convolutions
        # the others leave, in the NC-spatial layout conv_layout gives those of over
        # 2 spatial dims, before the second folding reshapes their weights
        passes += [ConvLayoutAssignment(), DeadCodeElimination(), ConstantFolding()]
        passes += [ScaleFolding(), ConvPhases(), PaddingTaps(), ConvBands(), ConvFrames()]
        passes += [ConstantFolding()]
        passes += [AlgebraicSimplifier(), TransposeFolding(), SeparableWindows()]
        passes += [SquaredDistances()]  # on constants folded above
        passes += [CommonSubexpressionElimination(), DeadCodeElimination()]
        passes += [ClipExtents()]  # for what the simplifier made anew
    if opt_level >= 2:
        passes += [Fusion(), DeadCodeElimination()]
        if chains:
            passes += [AttentionChains()]
    return Pipeline(passes, dump_dir, verify)
