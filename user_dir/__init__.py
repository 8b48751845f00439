"""fairseq ``--user-dir`` for etc-fairseq: importing it registers the ``etc`` model and its
architectures (and, as they land, the ETC tasks and criterions). All code lives in ``etc_fairseq``."""

import etc_fairseq.register  # noqa: F401
