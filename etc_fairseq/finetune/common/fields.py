"""The one field checker of every dataset's record schema: typed access to a decoded JSON record whose
errors are one :class:`~etc_fairseq.errors.InputFormatError` line,
``{where}: field {name!r}: expected {what}, got {value}`` (``where``: file and line or record, plus the
record's id once it is known; ``value`` as JSON, cut at 80 characters, or ``nothing`` when the field is missing).
"""
from __future__ import annotations

import json
from typing import Any, Callable, Optional, Union

from etc_fairseq.errors import InputFormatError

#: ``default`` of :meth:`RecordFields.get` when the field is required
REQUIRED: Any = object()


def shown(value: Any) -> str:
    """A short JSON rendering of a value for an error message (80 characters at most)."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = type(value).__name__
    return text if len(text) <= 80 else text[:77] + "..."


def is_kind(value: Any, kind) -> bool:
    """``isinstance`` for JSON values, where ``True`` is no integer: ``int`` excludes bools, ``float`` takes any
    number but a bool, ``bool`` also takes 0 and 1; ``kind`` may be a tuple of those."""
    if isinstance(kind, tuple):
        return any(is_kind(value, k) for k in kind)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is bool:
        return isinstance(value, bool) or (isinstance(value, int) and value in (0, 1))
    return isinstance(value, kind)


class RecordFields:
    """Checked access to the fields of one record.

    Args:
        where: what the messages start with, e.g. ``data/dev.json: record 3`` or ``train.jsonl:12``;
            :meth:`identify` appends the record's id once it is read.
    """

    def __init__(self, where: str):
        self.where = where

    def identify(self, label: str, value: Any) -> None:
        """Name the record in later messages: ``where (label value)``."""
        self.where = f"{self.where} ({label} {value})"

    def fail(self, name: str, expected: str, got: Any = REQUIRED) -> InputFormatError:
        """The error for field ``name`` (``got`` left out: the field is missing)."""
        return InputFormatError(
            f"{self.where}: field {name!r}: expected {expected}, got {'nothing' if got is REQUIRED else shown(got)}"
        )

    def record(self, obj: Any) -> dict:
        """``obj`` itself, which must be a JSON object."""
        if not isinstance(obj, dict):
            raise InputFormatError(f"{self.where}: expected a JSON object, got {shown(obj)}")
        return obj

    def get(
        self,
        container: Any,
        key: Union[str, int],
        kind,
        expected: str,
        name: Optional[str] = None,
        default: Any = REQUIRED,
        check: Optional[Callable[[Any], bool]] = None,
    ) -> Any:
        """``container[key]``, checked.

        Args:
            container: a JSON object (or list, with an int ``key``).
            kind: the JSON type(s) wanted (:func:`is_kind`).
            expected: what the message says was expected (``"a non-empty string"``).
            name: the field's name in messages (default ``key``; e.g. ``annotations[2].long_answer``).
            default: returned when the field is absent (and, for ``default=None``, when it is null); without
                it the field is required.
            check: a further condition on the value (e.g. non-empty).
        """
        name = str(key) if name is None else name
        if isinstance(key, str):
            if not isinstance(container, dict):
                raise self.fail(name, expected)
            absent = key not in container or (container[key] is None and default is None)
            if absent:
                if default is not REQUIRED:
                    return default
                raise self.fail(name, expected)
        value = container[key]
        if not is_kind(value, kind) or (check is not None and not check(value)):
            raise self.fail(name, expected, value)
        return value

    def str_list(self, container: Any, key: str, non_empty_items: bool = False) -> list:
        """``container[key]``, a list of strings (each non-empty after stripping, with ``non_empty_items``);
        a bad item is named ``key[j]``."""
        value = self.get(container, key, list, "a list of strings")
        for j, item in enumerate(value):
            if not isinstance(item, str) or (non_empty_items and not item.strip()):
                raise self.fail(f"{key}[{j}]", "a non-empty string" if non_empty_items else "a string", item)
        return value
