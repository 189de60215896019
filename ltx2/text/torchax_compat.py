"""Import shim that lets torchax 0.0.13 load under torch 2.13.

Why: torch 2.13 removed the named-tensor (``Dimname``) overloads of several aten ops
(``aten.prod.dim_Dimname``, ``aten.std.names_dim``, ``aten.unbind.Dimname``, ...), and
torchax 0.0.10-0.0.13 reference them while building lookup tables at import time, so
``import torchax`` raises ``AttributeError``. Nothing we run calls those overloads (named
tensors are not used by Gemma-3), so the shim answers such lookups with a hashable
placeholder that raises if it is ever called.

When it can go: as soon as the pinned torchax stops referencing removed ``Dimname`` /
``names`` overloads (check: ``import torchax`` without this module under the pinned torch).
Only :func:`import_torchax` should be used to import torchax in this package.
"""

from __future__ import annotations

import re
from types import ModuleType
from typing import Any

# Overload names of the removed named-tensor variants, e.g. "dim_Dimname", "Dimname_Scalar",
# "dimname", "names_dim", "correction_names_out". Anything else keeps raising AttributeError.
_REMOVED_OVERLOAD = re.compile(r"(^|_)(dimname|names)(_|$)", re.IGNORECASE)


class RemovedOverload:
    """Stand-in for an aten overload that the installed torch no longer has."""

    def __init__(self, qualified_name: str):
        self.qualified_name = qualified_name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{self.qualified_name} was removed in torch 2.13 (named tensors)")

    def __repr__(self) -> str:
        return f"RemovedOverload({self.qualified_name})"


_placeholders: dict[str, RemovedOverload] = {}


def apply() -> None:
    """Patch ``torch._ops.OpOverloadPacket.__getattr__`` once (idempotent)."""
    from torch._ops import OpOverloadPacket

    original = OpOverloadPacket.__getattr__
    if getattr(original, "_ltx2_torchax_shim", False):
        return

    def getattr_with_removed(self: OpOverloadPacket, key: str) -> Any:
        try:
            return original(self, key)
        except AttributeError:
            if not _REMOVED_OVERLOAD.search(key):
                raise
            name = f"{self._qualified_op_name}.{key}"
            return _placeholders.setdefault(name, RemovedOverload(name))

    getattr_with_removed._ltx2_torchax_shim = True  # type: ignore[attr-defined]
    OpOverloadPacket.__getattr__ = getattr_with_removed  # type: ignore[method-assign]


def import_torchax() -> ModuleType:
    """``import torchax`` with the shim applied first; returns the module."""
    apply()
    import torchax

    return torchax
