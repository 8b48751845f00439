"""What fairseq's ``--user-dir`` imports (``user_dir/__init__.py``): registers every component etc-fairseq
adds to fairseq (:func:`etc_fairseq.models.registration.register_components`: the ``etc`` model and its
architectures, the ``etc_pretraining`` task and ``cpc_mlm`` criterion, every fine-tuning dataset's task and
criterion) and installs the narrow fairseq fixes (:func:`etc_fairseq.fairseq_fixes.install`)."""
from etc_fairseq import fairseq_fixes
from etc_fairseq.models.registration import register_components

register_components()
fairseq_fixes.install()
