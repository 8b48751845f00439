"""Import this module to register everything etc-fairseq adds to fairseq (``user_dir`` does): the ``etc``
model and its architectures, the ``etc_pretraining`` task and ``cpc_mlm`` criterion, and every fine-tuning
dataset's task and criterion (``etc_<dataset>``, from ``etc_fairseq/finetune/<dataset>/{task,criterion}.py``)."""
import importlib

from etc_fairseq import models  # noqa: F401  (model "etc" + architectures)
from etc_fairseq.commands import dataset_modules
from etc_fairseq.pretraining import criterion as _pretraining_criterion  # noqa: F401  (criterion "cpc_mlm")
from etc_fairseq.pretraining import task as _pretraining_task  # noqa: F401  (task "etc_pretraining")

for _module in dataset_modules("task") + dataset_modules("criterion"):
    importlib.import_module(_module)

from etc_fairseq import fairseq_compat  # noqa: E402,F401  (narrow fairseq fixes: safe checkpoint loading, CPU distributed)
