"""fairseq ``--user-dir`` for etc-fairseq: importing it registers the ``etc`` model and its
architectures, the ``etc_pretraining`` task and ``cpc_mlm`` criterion, and every fine-tuning task and
criterion (``etc_hotpotqa``, ``etc_wikihop``, ``etc_nq``, ``etc_openkp``). All code lives in
``etc_fairseq``; this folder only exists because fairseq imports a user dir by path."""

import etc_fairseq.register  # noqa: F401
