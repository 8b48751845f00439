"""ETC fairseq tasks (importing this package registers them)."""
from etc_fairseq.tasks import pretraining  # noqa: F401  (task "etc_pretraining")
