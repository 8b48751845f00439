"""Narrow fixes to fairseq 0.12 code paths that etc-fairseq relies on, one module per fix, each naming the
fairseq function it replaces and why (``tests/test_fairseq_fixes.py`` shows, for each, fairseq's own function
failing where the replacement works).

Importing this package changes nothing. :func:`install` applies the fixes; it is called by
:mod:`etc_fairseq.register` (what fairseq's ``--user-dir`` imports, i.e. ``fairseq-train`` / ``fairseq-validate``
with the plugin) and by the project's own commands that run fairseq's training or loading code. Each fix
replaces one function by a wrapper that changes only what its module describes and otherwise calls
fairseq's function. Nothing here switches torch's safe loading off: no ``weights_only=False``, no
``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD``.

Installed always (fairseq 0.12 with torch >= 2.6, on CUDA or CPU):

- :mod:`.checkpoint_load`       ``checkpoint_utils.load_checkpoint_to_cpu``: the gates of the safe loader
  first, weights-only loading, the task of an ``etc-lift`` output from the command line;
  ``load_model_ensemble_and_task``: the file named in a tensor refusal
- :mod:`.checkpoint_copy`       ``file_io.PathManager.copy``: ``checkpoint_last.pt`` written atomically
- :mod:`.training_start`        ``checkpoint_utils.load_checkpoint``: no silent start at update 0 over
  existing checkpoints, a vocabulary mismatch named in one line
- :mod:`.checkpoint_broadcast`  ``distributed.utils._broadcast_object_slow``: multi-process resume with
  weights-only loading
- :mod:`.unused_parameters`     ``models.DistributedFairseqModel``: ``--find-unused-parameters`` with task
  heads refused in one line
- :mod:`.yaml_architecture`     ``dataclass.initialize.add_defaults``: a yaml ``model: {_name: etc_tiny}``
  builds etc_tiny
- :mod:`.one_line_errors`       ``distributed.utils.call_main``: a user error (an ``EtcError``: every refusal of
  the safe loader, of our tasks and data readers) as one line and exit status 1, not a traceback

Opt-in, for environments the project does not ship, named in ``ETC_FAIRSEQ_FIXES`` (comma-separated):

- ``cpu_distributed`` (:mod:`.cpu_distributed`): multi-process training on CPU (docs/distributed.md)
- ``xla`` (:mod:`.xla`): fairseq's ``--tpu`` loop on torch-xla 2.x (docs/tpu.md)
"""
import importlib
import os
from typing import List, Sequence

from etc_fairseq.errors import ConfigError

#: the fixes :func:`install` always applies, in order
DEFAULT_FIXES = (
    "checkpoint_load",
    "checkpoint_copy",
    "training_start",
    "checkpoint_broadcast",
    "unused_parameters",
    "yaml_architecture",
    "one_line_errors",
)
#: the fixes applied only when named in :data:`ENVIRONMENT_VARIABLE`
OPT_IN_FIXES = ("cpu_distributed", "xla")
ENVIRONMENT_VARIABLE = "ETC_FAIRSEQ_FIXES"


def requested_fixes(value: str = None) -> List[str]:
    """The opt-in fixes named in ``value`` (default: the ``ETC_FAIRSEQ_FIXES`` environment variable).

    Raises:
        ConfigError: a name that is not an opt-in fix.
    """
    value = os.environ.get(ENVIRONMENT_VARIABLE, "") if value is None else value
    names = [n.strip() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in OPT_IN_FIXES]
    if unknown:
        raise ConfigError(f"{ENVIRONMENT_VARIABLE}={value!r}: unknown fix {unknown[0]!r}; the opt-in fixes are "
                          f"{', '.join(OPT_IN_FIXES)}")
    return names


def install(extra: Sequence[str] = None) -> None:
    """Apply :data:`DEFAULT_FIXES`, then the opt-in fixes of ``extra`` (default: those named in
    ``ETC_FAIRSEQ_FIXES``). Idempotent."""
    for name in list(DEFAULT_FIXES) + list(requested_fixes() if extra is None else extra):
        if name not in DEFAULT_FIXES + OPT_IN_FIXES:
            raise ConfigError(f"unknown fairseq fix {name!r}; known: {', '.join(DEFAULT_FIXES + OPT_IN_FIXES)}")
        for patch in importlib.import_module(f"{__name__}.{name}").PATCHES:
            patch.apply(name)
