"""The target-neutral LLVM layer that every backend builds on.

It turns IR instructions into LLVM IR (llvmlite) without knowing the target:

- `context.py`: the emission context (module, builder, rule table, math library) and
  the `Gen`/`Rule` types of element generators and opcode rules;
- `elemental.py` + `scalar.py` + `vmath.py`: per-element rules (elementwise ops,
  conversions, vectorizable math); `movement.py`, `gather.py`, `dynamic.py`,
  `reduce.py`, `dot_conv.py`: the other ops as element rules; `rules.py` joins
  them into `RULES` (and whole-kernel ops into `KERNELS`: `sort.py`,
  `scatter.py`, `rng.py`, on `kernels.py`'s plumbing);
- `lltypes.py` + `minifloat.py`: IR dtypes as LLVM types; `loops.py`: loops and
  branches as context managers; `window.py`: window arithmetic; `accumulate.py`:
  multiply-accumulate;
- `machine.py`: LLVM target machines; `elf.py`: patching sections of an ELF object.

`backends/cpu` and `backends/cuda` import this package and never each other.
"""
