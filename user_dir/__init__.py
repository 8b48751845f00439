"""fairseq ``--user-dir`` for etc-fairseq: importing it registers the ``etc`` model and its
architectures, the ``etc_pretraining`` task and the ``cpc_mlm`` criterion. All code lives in
``etc_fairseq``; this folder only exists because fairseq imports a user dir by path."""

import etc_fairseq.register  # noqa: F401
