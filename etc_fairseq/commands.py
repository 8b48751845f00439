"""The ``etc-*`` subcommand record and where each command finds its dataset subcommands (a leaf: standard
library only, so that library code defines its subcommands without importing ``etc_fairseq.cli``).

A fine-tuning dataset is the package ``etc_fairseq/finetune/<name>/``; it contributes one subcommand to each
command in :data:`DATASET_ROLES`, defined in the module of its package named there::

    etc-prepare <name>    etc_fairseq.finetune.<name>.convert.PREPARE
    etc-predict <name>    etc_fairseq.finetune.<name>.decode.PREDICT
    etc-evaluate <name>   etc_fairseq.finetune.<name>.metrics.EVALUATE

Modules are imported by name only when a command runs, so ``etc-prepare --help`` does not import torch or
fairseq unless a module does at top level. ``etc_fairseq.cli`` builds the parsers from these records.
"""
from __future__ import annotations

import argparse
import importlib
import pkgutil
from dataclasses import dataclass
from typing import Callable, Dict, List, Sequence, Tuple

#: the package whose subpackages (except ``common``) are the fine-tuning datasets
FINETUNE_PACKAGE = "etc_fairseq.finetune"

#: command -> (module of a dataset package, attribute holding the command's :class:`Subcommand`)
DATASET_ROLES: Dict[str, Tuple[str, str]] = {
    "etc-prepare": ("convert", "PREPARE"),
    "etc-predict": ("decode", "PREDICT"),
    "etc-evaluate": ("metrics", "EVALUATE"),
}


@dataclass
class Subcommand:
    """One subcommand of an ``etc-*`` command.

    Attributes:
        name: the word on the command line.
        help: one line for ``COMMAND --help``.
        description: the text at the top of ``COMMAND NAME --help``.
        add_arguments: adds the subcommand's options to its parser.
        run: does the work; returns the exit status.
    """

    name: str
    help: str
    description: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def load_subcommands(modules: Sequence[str], attribute: str) -> List[Subcommand]:
    """Import ``module.ATTRIBUTE`` (a :class:`Subcommand`) from each module name, in order."""
    out = []
    for name in modules:
        sc = getattr(importlib.import_module(name), attribute)
        if not isinstance(sc, Subcommand):
            raise TypeError(f"{name}.{attribute} must be a Subcommand, got {type(sc).__name__}")
        out.append(sc)
    return out


def finetune_datasets() -> List[str]:
    """Names of the fine-tuning dataset packages under ``etc_fairseq/finetune/``, sorted."""
    package = importlib.import_module(FINETUNE_PACKAGE)
    return sorted(m.name for m in pkgutil.iter_modules(package.__path__) if m.ispkg and m.name != "common")


def dataset_modules(role: str) -> List[str]:
    """Module names holding each dataset's ``role`` (``"task"``, ``"convert"``, ...), in dataset order."""
    return [f"{FINETUNE_PACKAGE}.{name}.{role}" for name in finetune_datasets()]


def dataset_subcommands(command: str) -> List[Subcommand]:
    """Every dataset's subcommand of ``command`` (a key of :data:`DATASET_ROLES`)."""
    if command not in DATASET_ROLES:
        raise KeyError(f"{command!r} has no dataset subcommands; known: {sorted(DATASET_ROLES)}")
    role, attribute = DATASET_ROLES[command]
    return load_subcommands(dataset_modules(role), attribute)
