"""Call inlining as a pass: first in every pipeline, -O0 included, since backends take
no `call` (see `aotc.ir.inline`)."""

from __future__ import annotations

from ..ir import Module
from ..ir.inline import inline_calls


class CallInlining:
    name = "inline"

    def run(self, module: Module) -> bool:
        return inline_calls(module)
