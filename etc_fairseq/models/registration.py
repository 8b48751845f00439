"""Registering every fairseq component etc-fairseq defines: the ``etc`` model and its architectures (this
package), the ``etc_pretraining`` task and ``cpc_mlm`` criterion, the ``roberta_window`` baseline model the
fine-tuning tasks share, and each fine-tuning dataset's task and criterion (``etc_<dataset>``). The datasets are found by name under ``etc_fairseq/finetune/``
(:func:`etc_fairseq.commands.dataset_modules`), as fairseq finds its own tasks, so a new dataset package
needs no line here. fairseq's registries then know them: loading a checkpoint needs its task registered."""
import importlib

from etc_fairseq.commands import dataset_modules
from etc_fairseq.pretraining import criterion as _pretraining_criterion  # noqa: F401  (criterion "cpc_mlm")
from etc_fairseq.pretraining import task as _pretraining_task  # noqa: F401  (task "etc_pretraining")


def register_components() -> None:
    """Import (once) the modules whose decorators register etc-fairseq's models, tasks and criterions with
    fairseq."""
    for module in ["etc_fairseq.finetune.common.roberta"] + dataset_modules("task") + dataset_modules("criterion"):
        importlib.import_module(module)
