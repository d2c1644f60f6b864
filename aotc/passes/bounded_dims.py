"""Bounded dims padded to their bounds: the entry of a module whose inputs have bounded
dims (`Shape.dynamic`, `f32[<=8,128]`) becomes a static program over buffers at the
bounds, with the inputs' actual extents as one more input.

A bounded array is stored as its bound: its values at the first extents of each dim,
the rest of the buffer padding whose bytes are unspecified.  The pass runs first, as
XLA's dynamic padder does, in three steps:

- sizes: each bounded dim of each instruction gets an s32 scalar instruction that
  computes its extent at run time (`Sizes`), from the entry's new last parameter
  (`input_dims`: the extents of the inputs' bounded dims, in order) through its op's row
  of SIZE_RULES: an elementwise op keeps its operands' extents, a reshape scales the
  major dim of a run, a dot takes its batch and free dims' from its operands...;
- masks: where an op combines values along a bounded dim (a reduce, the contracting
  dims of a dot), its operands' padding is replaced by the reduction's init value (zero
  for a dot) on the way in, so that no padding reaches a value (`MASKED`);
- the shapes become static, and the root gains an output (`output_dims`: the extents
  of the outputs' bounded dims), which `Module.bounds` describes with the inputs'.

The shape rules (ir/shapes.py) already refuse the ops whose index maps would read the
extent of a bounded dim (slicing, padding, reversing, sorting along it...); an op with
no row here that meets a bounded dim is refused by name.  Everything after the pass
(the other passes, buffer assignment, the backends) sees static shapes: the buffers
are planned at the bounds, so NAME_SCRATCH_BYTES covers every call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..errors import UnsupportedError
from ..ir import Computation, ComputationBuilder, GatherDims, Instruction, Module, Op
from ..ir.extents import extent_of
from ..ir.inline import copy_instruction
from ..ir.module import Bounds
from ..ir.ops import PADDED_OPS, Direction
from ..ir.relayout import relayout
from ..ir.shapes import reshape_groups, reshape_moves_values
from ..ir.types import DType, Shape, TupleShape
from .rewrite import InsertingBuilder

SIZE = DType.S32  # the type of an extent at run time
INPUT_DIMS, OUTPUT_DIMS = "input_dims", "output_dims"

# an instruction's extents: per dim, its s32 scalar (None for a static dim); a tuple's
# per element
Extents = list


@dataclass
class BoundedDims:
    name: str = "bounded-dims"

    def run(self, module: Module) -> bool:
        entry = module.entry
        if entry is None:
            return False
        sized = any(i.op is Op.SET_DIMENSION_SIZE for i in entry.instructions)
        if not sized and not any(_bounded(p.shape) for p in entry.parameters):
            return _static_sizes(module)
        _check_no_bounded_callees(module)
        Sizes(module).pad()
        return True


def _static_sizes(module: Module) -> bool:
    """A module without bounded dims: its get-dimension-size of static dims become
    constants; a set-dimension-size outside the entry is refused."""
    changed = False
    for comp in module.computations:
        b = InsertingBuilder(module, comp)
        for instr in list(comp.instructions):
            if instr.op is Op.SET_DIMENSION_SIZE:
                raise UnsupportedError(_where(instr, "needs bounded inputs (--dim, --input)"))
            if instr.op is Op.GET_DIMENSION_SIZE:
                assert instr.dimensions is not None
                extent = instr.operands[0].array_shape.dims[instr.dimensions[0]]
                comp.replace_all_uses(instr, b.scalar(extent, SIZE))
                changed = True
        if changed:
            comp.remove_dead()
            comp.sort_topologically()
    return changed


class Sizes:
    """The run-time extents of the entry's bounded dims, and the padding rewrite."""

    def __init__(self, module: Module):
        assert module.entry is not None
        self.module = module
        self.entry = module.entry
        self.b = InsertingBuilder(module, module.entry)
        self.extents: dict[int, Extents] = {}
        # per instruction, the bounded dims whose padding a reader uses (a mask's, a
        # sort key's...): computed whole, whatever their extents
        self.whole: dict[int, set[int]] = {}
        # per masked reduce or dot: {dim of its first operand: the extent it masked}
        self.reduced: dict[int, dict[int, Instruction]] = {}

    def size(self, instr: Instruction, dim: int, element: int | None = None) -> Instruction:
        """The s32 scalar that holds the extent of `instr`'s bounded dim `dim`."""
        extents = self.extents[id(instr)]
        found = (extents if element is None else extents[element])[dim]
        assert found is not None, (instr, dim)
        return found

    def pad(self) -> None:
        params = self.entry.parameters
        inputs = [(_number(p), d, p.array_shape.dims[d]) for p in params for d in _dims(p.shape)]
        # input_dims where an input is bounded (a count the data gives needs none)
        dims_param = None
        if inputs:
            shape = Shape(SIZE, (len(inputs),))
            dims_param = self.b.parameter(len(params), shape, self.module.unique_name(INPUT_DIMS))
        for position, (number, dim, _) in enumerate(inputs):
            assert dims_param is not None
            param = params[number]
            element = self.b.reshape(self.b.slice(dims_param, [position], [position + 1]), [])
            extents = self.extents.setdefault(id(param), [None] * param.array_shape.rank)
            extents[dim] = element
        for instr in list(self.entry.instructions):
            if instr.op is Op.PARAMETER or instr is dims_param or id(instr) in self.extents:
                continue
            if instr.op in PADDED_OPS:
                self._size_op(instr)
                continue
            if instr.op is Op.CONCATENATE and _concatenates_bounded(instr):
                self._concatenate_extents(instr)
                continue
            if instr.op is Op.SORT and _sorts_bounded(instr):
                self._sort_padding_last(instr)
                continue
            if instr.op in (Op.RESHAPE, Op.BITCAST) and reshape_moves_values(
                instr.operands[0].array_shape, instr.array_shape
            ):
                self._relayout(instr)
                continue
            if not (_bounded(instr.shape) or any(_bounded(o.shape) for o in instr.operands)):
                continue
            rule = SIZE_RULES.get(instr.op)
            if rule is None:
                raise UnsupportedError(_where(instr, "does not take bounded dims yet"))
            mask = MASKED.get(instr.op)
            if mask is not None:
                mask(self, instr)
            self.extents[id(instr)] = rule(self, instr)
        outputs = self._output_dims()
        self._record_extents(dims_param)
        self._make_static()
        for instr in list(self.entry.instructions):
            if instr.op is Op.SET_DIMENSION_SIZE:  # its values are its operand's
                self.entry.replace_all_uses(instr, instr.operands[0])
        self.entry.remove_dead()
        self.entry.sort_topologically()
        names = self.module.input_names
        if names and dims_param is not None:
            names.append(INPUT_DIMS)
        if dims_param is None and not outputs:
            return  # the extents stay inside: the signature is static
        output_dims = self._outputs() - 1 if outputs else None
        input_dims = None if dims_param is None else _number(dims_param)
        lows = tuple(self.module.input_lows.get((n, d), 0) for n, d, _ in inputs)
        self.module.bounds = Bounds(
            tuple(inputs), tuple(outputs), input_dims, output_dims, lows if any(lows) else ()
        )

    def _record_extents(self, dims_param: Instruction | None) -> None:
        """`Instruction.extents` for each array whose extents read only input_dims
        (ir/extents.py), its dims in `whole` left out: what the kernels may clip to; and
        for each sort of several arrays, their common extents (`_sort_extents`)."""
        for instr in self.entry.instructions:
            extents = self.extents.get(id(instr))
            whole = self.whole.get(id(instr), set())
            if instr.op is Op.SORT and isinstance(instr.shape, TupleShape) and extents:
                extents, whole = self._sort_extents(instr, instr.users)
            elif not isinstance(instr.shape, Shape):
                continue
            if not extents:
                continue
            found = tuple(
                None if e is None or d in whole else extent_of(e, dims_param)
                for d, e in enumerate(extents)
            )
            if any(e is not None for e in found):
                instr.extents = found
        for instr in self.entry.instructions:
            masked = self.reduced.get(id(instr))
            if masked:
                rank = instr.operands[0].array_shape.rank
                reads = [masked.get(d) for d in range(rank)]
                found = tuple(None if e is None else extent_of(e, dims_param) for e in reads)
                if any(e is not None for e in found):
                    instr.reduced_extents = found

    def _sort_extents(self, sort: Instruction, users: list[Instruction]):
        """(extents, whole dims) of a sort of several arrays, which share their dims and
        extents: whole where a reader uses the padding of one of them; none (None) when
        something else than its elements' reads takes the tuple."""
        if not all(u.op is Op.GET_TUPLE_ELEMENT for u in users):
            return None, set()
        whole = set(self.whole.get(id(sort), set()))
        for user in users:
            whole |= self.whole.get(id(user), set())
        return self.extents[id(sort)][0], whole

    def _whole(self, instr: Instruction, dim: int) -> None:
        """A reader uses `instr`'s padding along `dim`: its kernel computes all of it."""
        self.whole.setdefault(id(instr), set()).add(dim)

    def _relayout(self, instr: Instruction) -> None:
        """A reshape that moves values in the padded layout (a merge of bounded dims,
        or of one under a static dim) as a gather (ir/relayout.py)."""
        x = instr.operands[0]
        b, shape, out = self.b, x.array_shape, instr.array_shape
        extents = _reshape(self, instr)
        out_sizes = [e if e is not None else b.scalar(d, SIZE) for e, d in zip(extents, out.dims)]
        in_sizes = [
            self.size(x, d) if shape.is_dynamic(d) else b.scalar(shape.dims[d], SIZE)
            for d in range(shape.rank)
        ]
        moved = relayout(b, x, in_sizes, out.dims, out_sizes)
        moved.shape = instr.shape  # static at the end, like every shape
        self.extents[id(moved)] = extents
        self.entry.replace_all_uses(instr, moved)

    def _concatenate_extents(self, instr: Instruction) -> None:
        """A concatenation along a bounded dim: the pieces' values at their extents one
        after another, at the first extents of the result (the sum of theirs).  Result
        position p lies in piece j (the number of the pieces' running extents not
        above p, less one), at p less their running extent, read from the pieces
        concatenated at their bounds (where piece j starts at `starts[j]`)."""
        assert instr.dimensions is not None
        axis = instr.dimensions[0]
        b, pieces = self.b, instr.operands
        out = instr.array_shape
        whole = b.add(Op.CONCATENATE, pieces, dimensions=(axis,))  # at the bounds
        sizes = [
            self.size(x, axis) if _is_dynamic(x, axis) else b.scalar(x.array_shape.dims[axis], SIZE)
            for x in pieces
        ]
        total, before = b.scalar(0, SIZE), []
        for size in sizes:
            before.append(total)
            total = b.binary(Op.ADD, total, size)
        grid = (out.dims[axis],)
        position = b.iota(Shape(SIZE, grid), 0)
        piece = b.broadcast(b.scalar(-1, SIZE), [], grid)
        one = b.broadcast(b.scalar(1, SIZE), [], grid)
        zero = b.broadcast(b.scalar(0, SIZE), [], grid)
        for start in before:
            reached = b.compare(position, b.broadcast(start, [], grid), Direction.GE)
            piece = b.binary(Op.ADD, piece, b.select(reached, one, zero))
        running = b.concatenate([b.reshape(s, [1]) for s in before], 0)
        starts = b.constant(
            [sum(x.array_shape.dims[axis] for x in pieces[:j]) for j in range(len(pieces))],
            SIZE,
        )
        pick = GatherDims((), (0,), (0,), 1, (1,))
        at = b.reshape(piece, (*grid, 1))
        source = b.binary(
            Op.ADD,
            b.gather(starts, at, pick),
            b.binary(Op.SUBTRACT, position, b.gather(running, at, pick)),
        )
        # rows of the whole concatenation along the axis, every other dim taken whole
        others = [d for d in range(out.rank) if d != axis]
        slice_sizes = tuple(1 if d == axis else out.dims[d] for d in range(out.rank))
        dims = GatherDims(tuple(others), (axis,), (axis,), 1, slice_sizes)
        # (the offset dims around the axis: the gathered one lands at the axis)
        moved = b.gather(whole, b.reshape(source, (*grid, 1)), dims)
        moved.shape = instr.shape  # static at the end, like every shape
        extents = [
            total if d == axis else _first_bounded_or_none(self, pieces, d) for d in range(out.rank)
        ]
        self.extents[id(moved)] = extents
        self.extents[id(whole)] = extents
        self._whole(whole, axis)  # the pieces sit at their bounds' offsets in it
        self.entry.replace_all_uses(instr, moved)

    def _sort_padding_last(self, instr: Instruction) -> None:
        """A sort along a bounded dim, with a first key: whether an element is padding
        (0 or 1), so the values at the first extents sort first, in the order the
        comparator gives, and the padding after them."""
        assert instr.dimensions is not None
        dim, x = instr.dimensions[0], instr.operands[0]
        b, shape = self.b, x.array_shape
        merged = _sort(self, instr)
        extents = merged if isinstance(instr.shape, Shape) else merged[0]
        extent = extents[dim]
        assert extent is not None
        inside = b.compare(
            b.iota(Shape(SIZE, shape.dims), dim),
            b.broadcast(extent, [], shape.dims),
            Direction.LT,
        )
        padding = b.select(
            inside,
            b.broadcast(b.scalar(0, SIZE), [], shape.dims),
            b.broadcast(b.scalar(1, SIZE), [], shape.dims),
        )
        self.extents[id(padding)] = extents
        self._whole(padding, dim)  # the sort reads the padding's keys too
        comparator = _padding_first(self.module, instr.called[0])
        sort = b.sort([padding, *instr.operands], dim, comparator, instr.is_stable)
        results = [b.get_tuple_element(sort, k + 1) for k in range(len(instr.operands))]
        for r in results:
            self.extents[id(r)] = extents
        replacement = results[0] if len(results) == 1 else b.tuple(results)
        self.extents[id(sort)] = [extents] * (len(results) + 1)
        if replacement is not results[0]:
            self.extents[id(replacement)] = [extents] * len(results)
        self.entry.replace_all_uses(instr, replacement)

    def _size_op(self, instr: Instruction) -> None:
        """get-dimension-size: its uses read the extent instead; set-dimension-size: its
        dim's extent is its size operand (the op itself goes once shapes are static)."""
        assert instr.dimensions is not None
        x, dim = instr.operands[0], instr.dimensions[0]
        if instr.op is Op.GET_DIMENSION_SIZE:
            bounded = _is_dynamic(x, dim)
            extent = self.size(x, dim) if bounded else self.b.scalar(x.array_shape.dims[dim], SIZE)
            self.entry.replace_all_uses(instr, extent)
            return
        extents = list(self.extents.get(id(x)) or [None] * x.array_shape.rank)
        if extents[dim] is not instr.operands[1]:
            self._whole(x, dim)  # its readers read it to the new extent
        extents[dim] = instr.operands[1]
        self.extents[id(instr)] = extents

    # -- the root ---------------------------------------------------------------------

    def _output_dims(self) -> list[tuple[int, int, int]]:
        """Append `output_dims` to the root where an output has bounded dims; the
        (output, dim, bound) of each of its entries."""
        root = self.entry.root
        assert root is not None
        elements = list(root.operands) if root.op is Op.TUPLE else [root]
        found, sizes = [], []
        for number, element in enumerate(elements):
            for dim in _dims(element.shape):
                found.append((number, dim, element.array_shape.dims[dim]))
                sizes.append(self.b.reshape(self.size(element, dim), [1]))
        if not sizes:
            return found
        dims = sizes[0] if len(sizes) == 1 else self.b.concatenate(sizes, 0)
        self.entry.root = self.b.tuple([*elements, dims])
        if self.module.output_names:
            self.module.output_names.append(OUTPUT_DIMS)
        return found

    def _outputs(self) -> int:
        root = self.entry.root
        assert root is not None
        return len(root.operands) if root.op is Op.TUPLE else 1

    def _make_static(self) -> None:
        for comp in self.module.computations:
            for instr in comp.instructions:
                instr.shape = _static(instr.shape)

    # -- masks ------------------------------------------------------------------------

    def masked(self, x: Instruction, dims, fill: Instruction) -> Instruction:
        """`x` with the padding along its bounded `dims` replaced by the scalar `fill`."""
        shape = x.array_shape
        keep = None
        for dim in dims:
            iota = self.b.iota(Shape(SIZE, shape.dims), dim)
            extent = self.b.broadcast(self.size(x, dim), [], shape.dims)
            inside = self.b.compare(iota, extent, Direction.LT)
            keep = inside if keep is None else self.b.binary(Op.AND, keep, inside)
        if keep is None:
            return x
        filled = self.b.broadcast(fill, [], shape.dims)
        masked = self.b.select(keep, x, filled)
        self.extents[id(masked)] = self.extents[id(x)]
        for dim in dims:  # its reader sums the fill there
            self._whole(masked, dim)
        return masked


def _mask_reduce(sizes: Sizes, instr: Instruction) -> None:
    """A reduce's inputs with their padding along reduced bounded dims set to their init
    values (the reducer's identity), so the padding adds nothing."""
    half = len(instr.operands) // 2
    inputs, inits = instr.operands[:half], instr.operands[half:]
    assert instr.dimensions is not None
    for k, (x, init) in enumerate(zip(inputs, inits)):
        bounded = [d for d in instr.dimensions if x.array_shape.is_dynamic(d)]
        masked = sizes.masked(x, bounded, init)
        instr.operands = [masked if n == k else o for n, o in enumerate(instr.operands)]
        if k == 0:  # the inputs share their dims
            sizes.reduced[id(instr)] = {d: sizes.size(x, d) for d in bounded}


def _mask_dot(sizes: Sizes, instr: Instruction) -> None:
    """A dot's operands with their padding along bounded contracting dims set to zero
    (both: padding may hold infinities, and 0 x inf is NaN)."""
    d = instr.dot
    assert d is not None
    for k, contracting in ((0, d.lhs_contracting), (1, d.rhs_contracting)):
        x = instr.operands[k]
        bounded = [dim for dim in contracting if _is_dynamic(x, dim)]
        if bounded:
            zero = sizes.b.scalar(0, x.array_shape.dtype)
            masked = sizes.masked(x, bounded, zero)
            instr.operands = [masked if n == k else o for n, o in enumerate(instr.operands)]
            if k == 0:  # the rhs contracting dims pair with these
                sizes.reduced[id(instr)] = {dim: sizes.size(x, dim) for dim in bounded}


# op -> how its operands' padding is masked before it reads them
MASKED: dict[Op, Callable[[Sizes, Instruction], None]] = {
    Op.REDUCE: _mask_reduce,
    Op.DOT: _mask_dot,
}


# -- extents of results -----------------------------------------------------------------


def _same_dims(sizes: Sizes, instr: Instruction) -> Extents:
    """Dim d's extent is that of dim d of an operand bounded there (elementwise ops, and
    those the shape rules let through only where they keep a bounded dim as it is)."""
    return _by_dim(instr, lambda d: _first_bounded(sizes, instr.operands, d))


def _first_bounded(sizes: Sizes, operands, dim: int) -> Instruction:
    for operand in operands:
        if isinstance(operand.shape, Shape) and _is_dynamic(operand, dim):
            return sizes.size(operand, dim)
    raise UnsupportedError(f"no operand gives bounded dim {dim} its extent")


def _broadcast(sizes: Sizes, instr: Instruction) -> Extents:
    x = instr.operands[0]
    assert instr.dimensions is not None
    mapped = {d: i for i, d in enumerate(instr.dimensions)}
    return _by_dim(instr, lambda d: sizes.size(x, mapped[d]))


def _transpose(sizes: Sizes, instr: Instruction) -> Extents:
    x, perm = instr.operands[0], instr.dimensions
    assert perm is not None
    return _by_dim(instr, lambda d: sizes.size(x, perm[d]))


def _reshape(sizes: Sizes, instr: Instruction) -> Extents:
    """In each run of dims (`reshape_groups`), the bounded operand dim's extent times
    the run's other operand dims, over the run's other result dims (exact on every
    input the reshape is defined for)."""
    x, out = instr.operands[0].array_shape, instr.array_shape
    extents: Extents = [None] * out.rank
    for ins, outs in reshape_groups(x.dims, out.dims):
        bounded = [i for i in ins if x.is_dynamic(i)]
        if not bounded:
            continue
        major = next(j for j in outs if out.is_dynamic(j))
        others_in = _product(x.dims[i] for i in ins if i not in bounded)
        others_out = _product(out.dims[j] for j in outs if j != major)
        extent = sizes.size(instr.operands[0], bounded[0])
        for i in bounded[1:]:
            extent = sizes.b.binary(Op.MULTIPLY, extent, sizes.size(instr.operands[0], i))
        extents[major] = _scaled(sizes, extent, others_in, others_out)
    return extents


def _scaled(sizes: Sizes, extent: Instruction, times: int, over: int) -> Instruction:
    """extent x times / over, in s32."""
    b = sizes.b
    if times % over == 0 and times != over:
        return b.binary(Op.MULTIPLY, extent, b.scalar(times // over, SIZE))
    if over % times == 0 and times != over:
        return b.binary(Op.DIVIDE, extent, b.scalar(over // times, SIZE))
    if times == over:
        return extent
    scaled = b.binary(Op.MULTIPLY, extent, b.scalar(times, SIZE))
    return b.binary(Op.DIVIDE, scaled, b.scalar(over, SIZE))


def _reduce(sizes: Sizes, instr: Instruction) -> Extents:
    half = len(instr.operands) // 2
    assert instr.dimensions is not None
    kept = [d for d in range(instr.operands[0].array_shape.rank) if d not in instr.dimensions]
    inputs = instr.operands[:half]

    def element(shape: Shape | TupleShape) -> Extents:
        assert isinstance(shape, Shape)  # a reduce's results are arrays
        return [
            _first_bounded(sizes, inputs, kept[i]) if shape.is_dynamic(i) else None
            for i in range(shape.rank)
        ]

    if isinstance(instr.shape, TupleShape):
        return [element(e) for e in instr.shape.elements]
    return element(instr.array_shape)


def _dot(sizes: Sizes, instr: Instruction) -> Extents:
    lhs, rhs = instr.operands
    d = instr.dot
    assert d is not None
    sources = [
        (lhs, a) if _is_dynamic(lhs, a) else (rhs, b) for a, b in zip(d.lhs_batch, d.rhs_batch)
    ]
    for x, used in ((lhs, d.lhs_batch + d.lhs_contracting), (rhs, d.rhs_batch + d.rhs_contracting)):
        sources += [(x, i) for i in range(x.array_shape.rank) if i not in used]
    return _by_dim(instr, lambda k: sizes.size(*sources[k]))


def _convolution(sizes: Sizes, instr: Instruction) -> Extents:
    c = instr.conv
    assert c is not None
    return _by_dim(instr, lambda d: sizes.size(instr.operands[0], c.input_batch))


def _gather(sizes: Sizes, instr: Instruction) -> Extents:
    g = instr.gather
    assert g is not None
    operand, indices = instr.operands
    batch = [i for i in range(indices.array_shape.rank) if i != g.index_vector_dim]
    out_batch = [i for i in range(instr.array_shape.rank) if i not in g.offset_dims]
    removed = set(g.collapsed_slice_dims) | set(g.operand_batching_dims)
    kept = [i for i in range(operand.array_shape.rank) if i not in removed]
    source = {d: (indices, i) for d, i in zip(out_batch, batch)}
    source.update({d: (operand, i) for d, i in zip(g.offset_dims, kept)})
    return _by_dim(instr, lambda d: sizes.size(*source[d]))


def _tuple(sizes: Sizes, instr: Instruction) -> Extents:
    return [sizes.extents.get(id(o)) or [None] * _rank(o.shape) for o in instr.operands]


def _get_tuple_element(sizes: Sizes, instr: Instruction) -> Extents:
    assert instr.index is not None
    return sizes.extents[id(instr.operands[0])][instr.index]


def _slice(sizes: Sizes, instr: Instruction) -> Extents:
    """A prefix of a bounded dim: its extent, at most the slice's limit."""
    x, s = instr.operands[0], instr.slice
    assert s is not None

    def extent(d: int) -> Instruction:
        size = sizes.size(x, d)
        if s.limits[d] >= x.array_shape.dims[d]:
            return size
        return sizes.b.binary(Op.MINIMUM, size, sizes.b.scalar(s.limits[d], SIZE))

    return _by_dim(instr, extent)


def _sort(sizes: Sizes, instr: Instruction) -> Extents:
    """Every result takes the extents of the operands (of equal dims) that are bounded."""
    rank = _rank(instr.operands[0].shape)
    extents = [None] * rank
    for operand in instr.operands:
        for d, e in enumerate(sizes.extents.get(id(operand)) or ()):
            extents[d] = extents[d] or e
    return extents if isinstance(instr.shape, Shape) else [list(extents) for _ in instr.operands]


def _concatenates_bounded(instr: Instruction) -> bool:
    assert instr.dimensions is not None
    return any(_is_dynamic(o, instr.dimensions[0]) for o in instr.operands)


def _first_bounded_or_none(sizes: Sizes, operands, dim: int) -> Instruction | None:
    for operand in operands:
        if _is_dynamic(operand, dim):
            return sizes.size(operand, dim)
    return None


def _sorts_bounded(instr: Instruction) -> bool:
    assert instr.dimensions is not None
    return any(_is_dynamic(o, instr.dimensions[0]) for o in instr.operands)


def _padding_first(module: Module, comparator: Computation) -> Computation:
    """`comparator` with a first pair of s32 keys (padding or not) before its own:
    lower keys first, the comparator's order among equal ones."""
    b = ComputationBuilder(module, f"{comparator.name}.padding_last")
    scalar = Shape(SIZE, ())
    pa, pb = b.parameter(0, scalar, "pad_a"), b.parameter(1, scalar, "pad_b")
    copies: dict[int, Instruction] = {}
    for p in comparator.parameters:
        copies[id(p)] = b.parameter(_number(p) + 2, p.array_shape, p.name)
    for instr in comparator.post_order():
        if instr.op is Op.PARAMETER:
            continue
        copy = copy_instruction(module, instr, [copies[id(o)] for o in instr.operands])
        b.computation.instructions.append(copy)
        copies[id(instr)] = copy
    assert comparator.root is not None
    before = b.compare(pa, pb, Direction.LT)
    tied = b.binary(Op.AND, b.compare(pa, pb, Direction.EQ), copies[id(comparator.root)])
    return b.build(b.binary(Op.OR, before, tied))


# op -> the extents of its result's bounded dims
SIZE_RULES: dict[Op, Callable[[Sizes, Instruction], Extents]] = {
    **{op: _same_dims for op in Op if op.is_elementwise},
    Op.SELECT: _same_dims,
    Op.CLAMP: _same_dims,
    Op.CONVERT: _same_dims,
    Op.BITCAST_CONVERT: _same_dims,
    Op.COMPARE: _same_dims,
    Op.SLICE: _slice,
    Op.PAD: _same_dims,
    Op.REVERSE: _same_dims,
    Op.CONCATENATE: _same_dims,
    Op.REDUCE_WINDOW: _same_dims,
    Op.SORT: _sort,  # along a static dim (along a bounded one: _sort_padding_last)
    Op.BROADCAST: _broadcast,
    Op.TRANSPOSE: _transpose,
    Op.RESHAPE: _reshape,
    Op.BITCAST: _reshape,
    Op.REDUCE: _reduce,
    Op.DOT: _dot,
    Op.CONVOLUTION: _convolution,
    Op.GATHER: _gather,
    Op.TUPLE: _tuple,
    Op.GET_TUPLE_ELEMENT: _get_tuple_element,
}


# -- helpers ----------------------------------------------------------------------------


def _by_dim(instr: Instruction, extent: Callable[[int], Instruction]) -> Extents:
    shape = instr.array_shape
    return [extent(d) if shape.is_dynamic(d) else None for d in range(shape.rank)]


def _bounded(shape) -> bool:
    if isinstance(shape, TupleShape):
        return any(_bounded(e) for e in shape.elements)
    return not shape.is_static


def _is_dynamic(x: Instruction, dim: int) -> bool:
    return isinstance(x.shape, Shape) and x.shape.is_dynamic(dim)


def _number(param: Instruction) -> int:
    """A parameter's number (every parameter has one)."""
    assert param.index is not None
    return param.index


def _dims(shape) -> tuple[int, ...]:
    return shape.bounded_dims if isinstance(shape, Shape) else ()


def _rank(shape) -> int:
    return shape.rank if isinstance(shape, Shape) else 0


def _product(values) -> int:
    result = 1
    for v in values:
        result *= v
    return result


def _static(shape):
    if isinstance(shape, TupleShape):
        return TupleShape(tuple(_static(e) for e in shape.elements))
    return shape.static()


def _where(instr: Instruction, message: str) -> str:
    origin = f" (from {instr.origin})" if instr.origin else ""
    return f"{instr.op.text} {instr.name}{origin} {message}"


def _check_no_bounded_callees(module: Module) -> None:
    """Bounded dims stay in the entry: a control-flow body over them would need its
    extents threaded through its parameters."""
    for comp in module.computations:
        if comp is module.entry:
            continue
        for instr in comp.instructions:
            if _bounded(instr.shape):
                raise UnsupportedError(_where(instr, f"in {comp.name} has bounded dims"))
    assert module.entry is not None
    for instr in module.entry.instructions:
        if instr.op.is_control_flow and any(_bounded(o.shape) for o in instr.operands):
            raise UnsupportedError(_where(instr, "takes bounded dims into control flow"))
