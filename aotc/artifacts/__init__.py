"""Artifacts: what a compiled model is delivered as (NAME.h, NAME.o, libNAME.a), written
all or nothing.  Target-neutral; a backend whose artifacts differ (CUDA) writes its own
from these parts (aotc/backends/cuda/artifacts.py).

- specs.py: TensorSpec (a tensor's C name and type), MemoryStats, ArtifactPaths, Target;
- render.py: the header, the cffi declarations and the memory-plan SVG (the jinja2 user);
- tools.py: the C compiler and the archiver, found and run (the environment they read);
- runtime.py: the C runtime built for a target, and shared objects linked with it;
- staging.py: all-or-nothing writing of an output directory;
- library.py: `write_artifacts`, the header, object and library of a model using the
  C runtime;
- weights.py: NAME.weights, the weights outside the object (`--weights external`), and
  their checksum.
"""

from .library import elf_machine, write_artifacts
from .render import (
    RUNTIME_CDEF,
    c_comment,
    c_string,
    cffi_cdef,
    profile_cdef,
    render_header,
    render_memory_plan_svg,
    render_template,
    weights_cdef,
    wrap_params,
)
from .runtime import (
    LINK_LIBS,
    RUNTIME_CFLAGS,
    compile_runtime,
    finish_command,
    link_shared,
    runtime_objects,
)
from .specs import (
    RESERVED_NAMES,
    ArtifactPaths,
    MemoryStats,
    Target,
    TensorSpec,
    c_identifier,
    check_model_name,
    unique_specs,
)
from .staging import install, staged_write
from .tools import (
    cpu_flags,
    cross_compiler_name,
    find_archiver,
    find_compiler,
    host_arch,
    link_command,
    run_tool,
    runtime_compiler,
    target_arch,
)
from .weights import WEIGHTS_ALIGN, WEIGHTS_SUFFIX, WeightsFile, weights_checksum

__all__ = [
    "LINK_LIBS",
    "RESERVED_NAMES",
    "RUNTIME_CDEF",
    "RUNTIME_CFLAGS",
    "WEIGHTS_ALIGN",
    "WEIGHTS_SUFFIX",
    "ArtifactPaths",
    "MemoryStats",
    "Target",
    "TensorSpec",
    "WeightsFile",
    "c_comment",
    "c_identifier",
    "c_string",
    "cffi_cdef",
    "check_model_name",
    "compile_runtime",
    "cpu_flags",
    "cross_compiler_name",
    "elf_machine",
    "find_archiver",
    "find_compiler",
    "finish_command",
    "host_arch",
    "install",
    "link_command",
    "link_shared",
    "profile_cdef",
    "render_header",
    "render_memory_plan_svg",
    "render_template",
    "run_tool",
    "runtime_compiler",
    "runtime_objects",
    "staged_write",
    "target_arch",
    "unique_specs",
    "weights_cdef",
    "weights_checksum",
    "wrap_params",
    "write_artifacts",
]
