"""ETC fairseq criterions (importing this package registers them; ``--user-dir`` does not do it alone)."""
from etc_fairseq.criterions import cpc_mlm  # noqa: F401  (criterion "cpc_mlm")
