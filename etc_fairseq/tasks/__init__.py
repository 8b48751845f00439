"""ETC fairseq tasks. Importing this package imports every module in it, which registers the tasks
(``etc_pretraining``, and the fine-tuning tasks, one module per dataset)."""
import importlib
import pkgutil

for _m in pkgutil.iter_modules(__path__):
    if not _m.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_m.name}")
