"""The exceptions that mean "bad input or arguments" rather than "bug", for one-line CLI error messages."""
from __future__ import annotations

from .binarize import BinarizeError
from .documents import InputFormatError
from .mlm import OutputExistsError
from .sample_data import SampleDataError
from .spm import SpmTrainingError

# DumpFormatError is an InputFormatError; OutputExistsError a FileExistsError. ValueError covers bad
# split/size arguments and too little data after filtering, and the guards' InputFormatError / OutputRefusedError;
# OSError a missing, unreadable or unwritable path (a full disk, a read-only directory, a path under a file).
# `etc-prepare --debug` shows the traceback.
USER_ERRORS = (
    InputFormatError,
    SampleDataError,
    SpmTrainingError,
    BinarizeError,
    OutputExistsError,
    FileNotFoundError,
    FileExistsError,
    ValueError,
    OSError,
)
