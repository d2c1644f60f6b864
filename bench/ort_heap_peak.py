"""onnxruntime's heap peak while it runs a model, outputs excluded (bench/memory.py).

    LD_PRELOAD=libheap_peak.so python bench/ort_heap_peak.py MODEL.onnx [--arena]

prints bytes.  One thread and the memory pattern on (onnxruntime's plan: one block
for the run's intermediates, laid out at the second run).  By default the CPU arena
is off, so that every tensor is a malloc of its own, counted by heap_peak.c: after
two warm-up runs, the peak of live heap bytes during a third, less what was live
before it and the outputs it returns (the tightest figure for onnxruntime's plan).
With --arena, its default allocator: the peak over three runs from the session's
creation on, less what the session held before the first and the outputs, which is
what its arena reserves for running the model.
"""

from __future__ import annotations

import ctypes
import gc
import sys

import numpy as np
import onnxruntime as ort

NUMPY = {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(int32)": np.int32}


def main(path: str, arena: bool) -> None:
    heap = ctypes.CDLL(None)  # heap_peak.c's counters, preloaded
    heap.aotc_heap_live.restype = heap.aotc_heap_peak.restype = ctypes.c_int64
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.enable_cpu_mem_arena = arena
    options.enable_mem_pattern = True
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {}
    for value in session.get_inputs():
        dims = [d if isinstance(d, int) else 1 for d in value.shape]
        dtype = NUMPY[value.type]
        values = rng.standard_normal(dims) if dtype is np.float32 else np.zeros(dims)
        feeds[value.name] = values.astype(dtype)
    gc.collect()
    warm_ups = 0 if arena else 2
    for _ in range(warm_ups):
        session.run(None, feeds)
    gc.collect()
    heap.aotc_heap_reset_peak()
    before = heap.aotc_heap_live()
    for _ in range(3 - warm_ups):
        outputs = session.run(None, feeds)
    print(heap.aotc_heap_peak() - before - sum(o.nbytes for o in outputs))


if __name__ == "__main__":
    main(sys.argv[1], "--arena" in sys.argv[2:])
