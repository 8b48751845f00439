"""The checks every command makes on what it reads and what it writes, defined once:

- argparse value types for numeric flags (:func:`positive_int`, :func:`non_negative_int`, ...);
- outputs against inputs (:func:`check_outputs_against_inputs`): no output may be an input, hold an input,
  or be a directory where a file is written; an existing output directory is replaced only when the command
  wrote it (:func:`check_replaceable_directory`);
- opening input files (:func:`read_input_bytes`, :func:`iter_input_lines`, :func:`load_json_file`): a missing
  file, a directory, a truncated gzip/bz2 stream and bytes that are not UTF-8 each give one
  :class:`InputFormatError` line naming the file (and the line where there is one);
- record ids that must be unique within a file (:class:`UniqueIds`);
- one-line messages for errors the user can fix (:func:`one_line_error`).

A leaf module (standard library and :mod:`etc_fairseq.errors` only), so any layer (data readers,
converters, the CLIs) may use it.
"""
from __future__ import annotations

import argparse
import bz2
import errno
import gzip
import json
import lzma
import os
import re
import sys
import zlib
from pathlib import Path
from typing import Any, Dict, Hashable, Iterable, Iterator, Mapping, Optional, Sequence, Tuple, Union

from etc_fairseq.errors import (  # noqa: F401  (raised here; importable from here)
    InputFormatError,
    MissingFileError,
    OutputRefusedError,
    OutputWriteError,
)

PathLike = Union[str, "os.PathLike[str]"]




# ---------------------------------------------------------------------------------------------------------
# argparse value types
# ---------------------------------------------------------------------------------------------------------
def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (sizes, lengths, counts of workers or examples)."""
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0 (where 0 means "none" or "off", as the flag's help says)."""
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def fraction(text: str) -> float:
    """argparse type: a float in [0, 1)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {value}")
    return value


# ---------------------------------------------------------------------------------------------------------
# outputs versus inputs
# ---------------------------------------------------------------------------------------------------------
def _resolved(path: PathLike) -> Path:
    return Path(path).expanduser().resolve()


def _is_within(inner: Path, outer: Path) -> bool:
    return inner == outer or outer in inner.parents


def check_outputs_against_inputs(
    outputs: Mapping[str, PathLike], inputs: Mapping[str, PathLike], file_outputs: Sequence[str] = ()
) -> None:
    """Refuse an output location that would destroy or hide an input, compared on resolved paths (so
    ``d/./x``, ``d/../d/x`` and symbolic links are the same file).

    Args:
        outputs: option name (e.g. ``--out``) -> path the command writes (a file, or a directory it replaces).
        inputs: option name -> path the command reads (files or directories; absent ones are skipped).
        file_outputs: the option names in ``outputs`` that name a file: an existing directory there is refused.
            For every output, an existing file or directory inside an input directory is refused.
    Raises:
        OutputRefusedError: one line naming both options and paths.
    """
    seen: Dict[Path, str] = {}
    for out_flag, out in outputs.items():
        if out is None:
            continue
        out_r = _resolved(out)
        if out_r in seen:
            raise OutputRefusedError(f"{out_flag} {out} is also {seen[out_r]}: give each output its own path")
        seen[out_r] = out_flag
        check_output_location(out_flag, out)
        if out_flag in file_outputs and out_r.is_dir():
            raise OutputRefusedError(f"{out_flag} {out}: is a directory; give the file to write")
        for in_flag, path in inputs.items():
            if path is None or not os.path.lexists(Path(path).expanduser()):
                continue
            in_r = _resolved(path)
            if in_r == out_r:
                raise OutputRefusedError(
                    f"{out_flag} {out} is the input {in_flag} {path}: an output may never replace an input; "
                    "write elsewhere"
                )
            if _is_within(in_r, out_r):
                raise OutputRefusedError(
                    f"{out_flag} {out} holds the input {in_flag} {path}: replacing it would delete the input; "
                    "write elsewhere"
                )
            if in_r.is_dir() and out_r.exists() and _is_within(out_r, in_r):
                # A new file or directory inside an input directory is fine (DATA/preds.json); an existing one
                # may be something the command reads (DATA/dict.txt), so it is never replaced.
                raise OutputRefusedError(
                    f"{out_flag} {out} already exists inside the input {in_flag} {path}: it may be one of the "
                    "input's files; write elsewhere or delete it first"
                )


def check_output_location(flag: str, path: PathLike) -> None:
    """Refuse, before any work is done, an output whose directory cannot be made or written: an existing
    ancestor that is a file (``x.json/out``), or one this user may not write into.

    Raises:
        OutputWriteError: naming ``path`` and the ancestor at fault (``errno`` ENOTDIR or EACCES).
    """
    path = Path(path).expanduser()
    ancestor = path.parent
    while not os.path.lexists(ancestor) and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise OutputWriteError(errno.ENOTDIR, f"cannot write {flag} here: {ancestor} is not a directory", str(path))
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise OutputWriteError(errno.EACCES, f"cannot write {flag} here: {ancestor} is not writable", str(path))


def path_arguments(args: argparse.Namespace, skip: Iterable[str] = ()) -> Dict[str, Path]:
    """Every path-valued option of ``args`` (a ``Path`` or a list of them) as ``{--flag[i]: path}``."""
    skip = set(skip)
    found: Dict[str, Path] = {}
    for dest, value in vars(args).items():
        if dest in skip or dest.startswith("_"):
            continue
        flag = "--" + dest.replace("_", "-")
        if isinstance(value, Path):
            found[flag] = value
        elif isinstance(value, (list, tuple)):
            paths = [v for v in value if isinstance(v, Path)]
            for i, v in enumerate(paths):
                found[flag if len(paths) == 1 else f"{flag}[{i}]"] = v
    return found


#: options that name what a command writes: directories it replaces, and files
OUTPUT_DIR_OPTIONS = ("out",)
OUTPUT_FILE_OPTIONS = ("output", "report")


def check_command_outputs(args: argparse.Namespace, file_outputs: Sequence[str] = OUTPUT_FILE_OPTIONS,
                          dir_outputs: Sequence[str] = OUTPUT_DIR_OPTIONS) -> None:
    """:func:`check_outputs_against_inputs` for a parsed command line: the output options named by
    ``file_outputs`` / ``dir_outputs`` (dests) against every other path-valued option."""
    out_dests = [d for d in (*dir_outputs, *file_outputs) if isinstance(getattr(args, d, None), Path)]
    outputs = {"--" + d.replace("_", "-"): getattr(args, d) for d in out_dests}
    inputs = path_arguments(args, skip=out_dests)
    check_outputs_against_inputs(outputs, inputs, file_outputs=["--" + d.replace("_", "-") for d in file_outputs])


def check_replaceable_directory(dest: PathLike, marker: str, command: str = "etc-prepare") -> None:
    """Allow ``--overwrite`` to replace ``dest`` only when it is an empty directory or one that ``command``
    wrote (it holds ``marker``, the file such a run writes last).

    Raises:
        OutputRefusedError: ``dest`` is a file, or a directory without ``marker`` (names it).
    """
    dest = Path(dest)
    if not dest.exists():
        return
    if not dest.is_dir():
        raise OutputRefusedError(
            f"{dest}: exists and is not a directory {command} wrote; --overwrite replaces only those"
        )
    if (dest / marker).is_file() or not any(dest.iterdir()):
        return
    raise OutputRefusedError(
        f"{dest}: exists and was not written by {command} (no {marker}); --overwrite replaces only "
        f"{command} outputs: remove it yourself or write elsewhere"
    )


# ---------------------------------------------------------------------------------------------------------
# reading inputs
# ---------------------------------------------------------------------------------------------------------
#: what decompressors raise on a cut or corrupt stream
_STREAM_ERRORS = (EOFError, zlib.error, gzip.BadGzipFile, lzma.LZMAError)


def check_input_file(path: Path, what: str) -> None:
    """Refuse a directory or a missing path where ``what`` (an input file) is expected, in one line."""
    if path.is_dir():
        raise InputFormatError(f"{path}: is a directory, expected {what}")
    if not path.exists():
        raise MissingFileError(f"{path}: no such file ({what} expected)")


def _open_decompressed(path: Path):
    with open(path, "rb") as f:
        head = f.read(3)
    if head[:2] == b"\x1f\x8b":
        return gzip.open(path, "rb")
    if head == b"BZh":
        return bz2.open(path, "rb")
    return open(path, "rb")


def _stream_error(path: Path, e: BaseException) -> InputFormatError:
    return InputFormatError(f"{path}: compressed data is truncated or corrupt ({type(e).__name__}: {e}); "
                      "download the file again")


def read_input_bytes(path: PathLike, what: str = "a file") -> bytes:
    """The whole (gzip/bz2-decompressed) content of an input file.

    Raises:
        MissingFileError, InputFormatError: one line naming the file.
    """
    path = Path(path)
    check_input_file(path, what)
    try:
        with _open_decompressed(path) as f:
            return f.read()
    except _STREAM_ERRORS as e:
        raise _stream_error(path, e) from None
    except OSError as e:
        if isinstance(e, gzip.BadGzipFile):
            raise _stream_error(path, e) from None
        raise


def decode_utf8(data: bytes, where: str) -> str:
    """``data`` as UTF-8, or an :class:`InputFormatError` naming ``where`` and the byte offset."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputFormatError(f"{where}: not UTF-8 text ({e.reason} at byte {e.start + 1})") from None


def read_input_text(path: PathLike, what: str = "a UTF-8 text file") -> str:
    """The whole content of a (possibly gzip/bz2-compressed) UTF-8 input file; errors name the file and,
    for bytes that are not UTF-8, the line."""
    data = read_input_bytes(path, what)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise InputFormatError(f"{path}:{line}: not UTF-8 text ({e.reason} at byte {e.start + 1} of the file)") from None


def iter_input_lines(path: PathLike, what: str = "a UTF-8 text file") -> Iterator[Tuple[int, str]]:
    """Yield ``(line number from 1, line)`` of a (possibly gzip/bz2-compressed) UTF-8 file, streaming; a
    line that is not UTF-8 or a stream cut short stops with one :class:`InputFormatError` line naming the file."""
    path = Path(path)
    check_input_file(path, what)
    try:
        with _open_decompressed(path) as f:
            for line_no, raw in enumerate(f, 1):
                yield line_no, decode_utf8(raw, f"{path}:{line_no}")
    except _STREAM_ERRORS as e:
        raise _stream_error(path, e) from None
    except gzip.BadGzipFile as e:
        raise _stream_error(path, e) from None


#: a ``\uD800``-``\uDFFF`` escape: the only way a lone surrogate (half of a UTF-16 pair, not a character)
#: gets into parsed JSON, since UTF-8 input cannot hold one
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def parse_json(text: str, where: str, what: Optional[str] = None) -> Any:
    """``json.loads(text)`` for input read from ``where`` (``FILE`` or ``FILE:LINE``), refusing in one
    :class:`InputFormatError` line: text that is not JSON (with the line and column), nesting deeper than
    Python's parser can follow (its ``RecursionError``), and a string holding a lone surrogate (``"\udc80"``:
    not text; tokenizers and UTF-8 writers fail on it), named by its field path. ``what``: what was expected,
    for the message."""
    expected = f"; {what} expected" if what else ""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        at = f"line {e.lineno}, column {e.colno}" if "\n" in text.strip() else f"column {e.colno}"
        raise InputFormatError(f"{where}: not valid JSON ({e.msg.removesuffix(' at')} at {at}{expected})") from None
    except RecursionError:
        raise InputFormatError(f"{where}: JSON nested too deeply (arrays/objects inside each other beyond what "
                               f"Python's JSON reader follows, about {sys.getrecursionlimit()} levels{expected})") from None
    if _SURROGATE_ESCAPE.search(text):
        found = _lone_surrogate(value, "")
        if found is not None:
            field, char = found
            field = field.encode("utf-8", "backslashreplace").decode("utf-8")
            raise InputFormatError(f"{where}: {'field ' + field if field else 'the value'}: holds \\u{ord(char):04x}, "
                                   "half of a UTF-16 surrogate pair without its other half (not a character); "
                                   "expected text")
    return value


def _lone_surrogate(value: Any, field: str) -> Optional[Tuple[str, str]]:
    """(field path such as ``words[3]``, the surrogate) of the first string in ``value`` holding a lone
    surrogate, or None. Iterative, so that any depth the JSON parser accepted is walked."""
    stack = [(value, field)]
    while stack:
        v, f = stack.pop()
        if isinstance(v, str):
            bad = next((c for c in v if "\ud800" <= c <= "\udfff"), None)
            if bad is not None:
                return f, bad
        elif isinstance(v, dict):
            for k, x in reversed(list(v.items())):
                name = f"{f}.{k}" if f else str(k)
                stack.append((x, name))
                stack.append((k, f"{name} (its name)"))
        elif isinstance(v, list):
            stack.extend((x, f"{f}[{i}]") for i, x in reversed(list(enumerate(v))))
    return None


def load_json_file(path: PathLike, what: str = "a JSON file") -> Any:
    """Parse a whole (possibly compressed) UTF-8 JSON input file (:func:`parse_json`); errors name the file
    (and line, column)."""
    return parse_json(read_input_text(path, what), str(path), what)


def iter_json_lines(path: PathLike, what: str) -> Iterator[Tuple[str, Any]]:
    """``(where, value)`` for every non-blank line of a (possibly compressed) JSONL input file, ``where``
    being ``FILE:LINE``; each line parsed by :func:`parse_json`."""
    for line_no, line in iter_input_lines(path, what):
        if line.strip():
            where = f"{path}:{line_no}"
            yield where, parse_json(line, where)


class UniqueIds:
    """Record ids that must be unique within one input file: :meth:`add` refuses a repeat, naming both
    records.

    Example::

        ids = UniqueIds("_id")
        for i, rec in enumerate(records):
            ids.add(rec["_id"], f"{path}: record {i}")
    """

    def __init__(self, field: str):
        self.field = field
        self._first: Dict[Hashable, str] = {}

    def add(self, rid: Hashable, where: str) -> None:
        """Remember ``rid`` (seen at ``where``, e.g. ``file:line``); InputFormatError if it was seen before."""
        try:
            first = self._first.get(rid)
        except TypeError:  # unhashable: the record's own check names the type
            return
        if first is not None:
            raise InputFormatError(f"{where}: field {self.field!r}: duplicate id {rid!r} (first at {first}); "
                             "ids must be unique within a file")
        self._first[rid] = where

    def __len__(self) -> int:
        return len(self._first)


# ---------------------------------------------------------------------------------------------------------
# messages
# ---------------------------------------------------------------------------------------------------------
def one_line_error(e: BaseException) -> str:
    """The message of a user error on one line; an ``OSError`` as ``PATH: reason``."""
    if isinstance(e, OSError) and e.strerror and e.filename is not None and not isinstance(e, gzip.BadGzipFile):
        text = f"{e.filename}: {e.strerror}"
        if e.filename2 is not None:
            text = f"{e.filename} -> {e.filename2}: {e.strerror}"
    else:
        text = str(e) or type(e).__name__
        if isinstance(e, KeyError) and e.args:
            text = str(e.args[0])
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def command_name(default: str = "fairseq") -> str:
    """The command the user ran, for ``PROG: error: ...``: ``fairseq-train`` for the console script and for
    ``python -m fairseq_cli.train`` (``sys.argv[0]`` is then ``.../fairseq_cli/train.py``)."""
    import sys

    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if argv0 is None:
        return default
    if argv0.suffix == ".py" and argv0.parent.name == "fairseq_cli":
        return "fairseq-" + argv0.stem.replace("_", "-")
    return argv0.name or default


#: set to 1 to see the traceback of user errors in ``fairseq-train`` / ``fairseq-validate`` with the plugin
#: (the ``etc-*`` commands take ``--debug``)
DEBUG_VARIABLE = "ETC_FAIRSEQ_DEBUG"


def exit_if_user_error(e: BaseException, prog: str) -> None:
    """For a user error (:func:`etc_fairseq.errors.is_user_error`): print it as ``PROG: error: MESSAGE`` on
    stderr and exit with status 1, as every command does. Returns for anything else (a bug: the caller
    re-raises it, keeping its traceback), and when ``ETC_FAIRSEQ_DEBUG=1`` asks for tracebacks."""
    import sys

    from etc_fairseq.errors import is_user_error

    if not is_user_error(e) or os.environ.get(DEBUG_VARIABLE, "") not in ("", "0"):
        return
    print(f"{prog}: error: {one_line_error(e)}", file=sys.stderr, flush=True)
    raise SystemExit(1) from None
