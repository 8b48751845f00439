"""Fix for ``fairseq.distributed.utils.call_main`` (fairseq 0.12), through which ``fairseq-train``,
``fairseq-validate`` and ``fairseq-hydra-train`` run their ``main``.

fairseq lets every exception escape ``main``, so Python prints its traceback: a refusal of ours with a clear
one-line message (a checkpoint the safe loader refuses, a ``dict.txt`` with a repeated symbol, a length below
the prepared one) ends a screen of stack frames. The replacement prints an
:class:`~etc_fairseq.errors.EtcError`, or an ``OSError`` of the environment that names its file (a full disk,
a read-only directory: :func:`etc_fairseq.errors.environment_error`), as one line ``PROG: error: MESSAGE``
on stderr and exits with status 1, as the ``etc-*`` commands do. Any other exception is a bug and keeps
its traceback; so does a user error when ``ETC_FAIRSEQ_DEBUG=1`` is set.

This covers one process, and ``torchrun`` (``--distributed-no-spawn``), where each process runs ``main``
here; processes fairseq spawns itself report through ``torch.multiprocessing``.
"""
import functools

from etc_fairseq.guards import command_name, exit_if_user_error

from .patching import Patch


def _wrap(original):
    @functools.wraps(original)
    def call_main(cfg, main, **kwargs):
        try:
            return original(cfg, main, **kwargs)
        except Exception as e:  # noqa: BLE001 -- re-raised unless it is a user error
            exit_if_user_error(e, command_name())
            raise

    return call_main


PATCHES = (Patch("fairseq.distributed.utils", "call_main", _wrap),)
