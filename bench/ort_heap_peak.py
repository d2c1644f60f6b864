"""onnxruntime's heap peak during one run of a model, outputs excluded (bench/memory.py).

    LD_PRELOAD=libheap_peak.so python bench/ort_heap_peak.py MODEL.onnx   (prints bytes)

One thread, the CPU arena off (every tensor a malloc of its own, counted by
heap_peak.c) and the memory pattern on (onnxruntime's plan: one block for the run's
intermediates, laid out at the second run): after two warm-up runs, the peak of live
heap bytes during a third, less what was live before it and the outputs it returns.
"""

from __future__ import annotations

import ctypes
import gc
import sys

import numpy as np
import onnxruntime as ort

NUMPY = {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(int32)": np.int32}


def main(path: str) -> None:
    heap = ctypes.CDLL(None)  # heap_peak.c's counters, preloaded
    heap.aotc_heap_live.restype = heap.aotc_heap_peak.restype = ctypes.c_int64
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.enable_cpu_mem_arena = False
    options.enable_mem_pattern = True
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {}
    for value in session.get_inputs():
        dims = [d if isinstance(d, int) else 1 for d in value.shape]
        dtype = NUMPY[value.type]
        values = rng.standard_normal(dims) if dtype is np.float32 else np.zeros(dims)
        feeds[value.name] = values.astype(dtype)
    for _ in range(2):
        session.run(None, feeds)
    gc.collect()
    heap.aotc_heap_reset_peak()
    before = heap.aotc_heap_live()
    outputs = session.run(None, feeds)
    print(heap.aotc_heap_peak() - before - sum(o.nbytes for o in outputs))


if __name__ == "__main__":
    main(sys.argv[1])
