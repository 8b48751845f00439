"""How a fix replaces one fairseq function: :class:`Patch` (which attribute of which module, and the
function that wraps the original), applied once, the original kept for the tests that show what the fix
changes (:func:`original`)."""
from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from typing import Any, Callable, Dict, Set, Tuple

_MARK = "__etc_fairseq_fix__"
_ORIGINALS: Dict[Tuple[str, str], Any] = {}
_APPLIED: Set[Tuple[str, str, str]] = set()


@dataclass(frozen=True)
class Patch:
    """``module.attribute`` replaced by ``wrap(original)``.

    Attributes:
        module: the fairseq (or torch_xla) module that defines the function.
        attribute: the function's name there (``Class.method`` for a method).
        wrap: takes the original, returns the replacement.
        imported_by: modules that imported the function by name (``from M import f``), where the
            replacement is put too when they are already imported.
    """

    module: str
    attribute: str
    wrap: Callable[[Any], Any]
    imported_by: Tuple[str, ...] = ()

    def apply(self, fix: str) -> None:
        """Replace the function (idempotent: once per fix and function in a process)."""
        if (fix, self.module, self.attribute) in _APPLIED:
            return
        owner, name = self._owner()
        current = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
        _ORIGINALS.setdefault((self.module, self.attribute), current)
        replacement = self.wrap(current)
        setattr(_unwrap(replacement), _MARK, fix)
        setattr(owner, name, replacement)
        for module_name in self.imported_by:
            module = sys.modules.get(module_name)
            if module is not None and hasattr(module, name):
                setattr(module, name, getattr(owner, name))
        _APPLIED.add((fix, self.module, self.attribute))

    def _owner(self):
        owner = importlib.import_module(self.module)
        *classes, name = self.attribute.split(".")
        for c in classes:
            owner = getattr(owner, c)
        return owner, name


def _unwrap(f: Any) -> Any:
    return f.__func__ if isinstance(f, (staticmethod, classmethod)) else f


def fix_of(function: Any) -> Any:
    """The name of the fix whose replacement ``function`` is, or None (fairseq's own)."""
    return getattr(_unwrap(function), _MARK, None)


def original(module: str, attribute: str) -> Any:
    """fairseq's own ``module.attribute`` as it was before the first fix replaced it (the current one if
    none did)."""
    if (module, attribute) in _ORIGINALS:
        return _unwrap(_ORIGINALS[(module, attribute)])
    owner = importlib.import_module(module)
    for part in attribute.split("."):
        owner = getattr(owner, part)
    return owner
