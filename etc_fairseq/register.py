"""Import this module to register everything etc-fairseq adds to fairseq (``user_dir`` does)."""

from etc_fairseq import models  # noqa: F401  (model "etc" + architectures)
from etc_fairseq import tasks  # noqa: F401  (task "etc_pretraining")
from etc_fairseq import criterions  # noqa: F401  (criterion "cpc_mlm")
from etc_fairseq import fairseq_compat  # noqa: F401  (narrow fairseq fixes: safe checkpoint loading, CPU distributed)
