"""ETC fairseq criterions. Importing this package imports every module in it, which registers the
criterions (``cpc_mlm``, and one per fine-tuning task); ``--user-dir`` alone does not."""
import importlib
import pkgutil

for _m in pkgutil.iter_modules(__path__):
    if not _m.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_m.name}")
