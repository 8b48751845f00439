"""Fine-tuning, one package per dataset, plus what they share.

Each dataset package ``etc_fairseq/finetune/<name>/`` holds everything about that dataset:

- ``schema.py``     its records (reading and validating the official files), answer types and stored
                    fields, declared once
- ``convert.py``    the official files -> prepared splits (``etc-prepare <name>``, ``PREPARE``)
- ``heads.py``      (only where a dataset needs its own heads, e.g. OpenKP) its heads and their loss as plain
                    PyTorch, no fairseq import; datasets that need none use :mod:`etc_fairseq.encoder.heads`
- ``task.py``       the fairseq task ``etc_<name>`` (heads, dataset)
- ``criterion.py``  the fairseq criterion ``etc_<name>`` (losses, logged official metrics)
- ``decode.py``     heads' outputs -> official predictions, used by the criterion and ``etc-predict <name>``
                    (``PREDICT``)
- ``metrics.py``    the official metric (``etc-evaluate <name>``, ``EVALUATE``)
- ``builder.py``    (``structured`` only: the dataset whose records the user writes) building those records
                    from plain Python, no fairseq import

:mod:`.common` holds what the datasets share (converter pipeline, base task, ``etc-predict`` runner, span
decoding, the field checker every ``schema.py`` validates records with, the ``etc-evaluate`` options).
A new dataset is a new package here: :mod:`etc_fairseq.commands` finds its subcommands and
:mod:`etc_fairseq.register` registers its task and criterion.

Submodules are not imported here, so ``etc-prepare`` does not import fairseq's task machinery.
"""
