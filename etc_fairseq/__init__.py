"""etc-fairseq: ETC (Extended Transformer Construction, Ainslie et al., EMNLP 2020) for fairseq.

Layers, lowest first; a module imports only from its own layer or lower ones (``tests/test_layering.py``
checks it). Two exceptions: fairseq's own pattern, ``models`` calls ``hub`` from ``EtcModel.from_pretrained``;
and code that reads fairseq's registries imports ``register`` inside the function that needs our model, tasks
and criterions registered:

1. leaves (importing only each other; fairseq, where needed, only inside functions):
   ``commands`` (the ``etc-*`` subcommand record and registry), ``text`` (answer normalisation),
   ``tokenization`` (the tokenizer of a lifted model's source), ``errors`` (the user-error classes:
   ``CheckpointLoadError``, the one error for a model file that cannot be loaded, raised by ``encoder`` and
   ``checkpoint_io`` alike; ``InputFormatError``; ``OutputRefusedError``), ``guards`` (what every command
   checks on what it reads and writes: outputs against inputs, strict input readers, unique record ids,
   argparse value types, the one-line error message),
   ``checkpoint_io`` (the one safe checkpoint loader), ``criterion_metrics`` (what every ``reduce_metrics``
   shares), ``fairseq_compat`` (narrow fairseq fixes), ``tracing`` (whether torch.compile or XLA is tracing),
   ``progress`` (the progress bars of long jobs: on a terminal only, ``--no-progress-bar`` turns them off)
2. ``attention``   the global-local attention kernel (blocked l2l) and its dense reference
3. ``structure``   pure functions: structure ids -> 4 masks + 4 relative-label tensors; the one
                   relative-label vocabulary and the global-token types
4. ``encoder``     the ETC encoder, its layer and heads as plain PyTorch (no fairseq import), saved and
                   loaded as safetensors + JSON
5. ``models``      the ``etc`` fairseq model (wrapping ``encoder``) and its architectures
6. ``data``, ``prepare``   raw files -> binarized datasets (``etc-prepare``); corpus reading, packing,
                   MLM/CPC masking, the on-disk format of fine-tuning data
7. ``pretraining`` the ``etc_pretraining`` task and ``cpc_mlm`` criterion;
   ``finetune``    one package per dataset (``hotpotqa``, ``wikihop``, ``nq``, ``openkp``, ``nextsent``, and
                   ``structured``, the generic one read from the user's own JSONL records, whose ``builder``
                   writes records from plain Python: schema, convert, task, criterion, decode, metrics; ``heads``
                   where a dataset has heads of its own, plain PyTorch like ``encoder``) and ``finetune.common``
                   (what they share); inside a dataset: schema -> metrics -> decode -> task -> criterion, heads
                   -> task and criterion, schema -> convert, and schema -> builder
8. ``lift``, ``official``, ``hub``, ``hf``, ``visualize``, ``register``, ``cli``   fairseq RoBERTa, Hugging Face
                   BERT/RoBERTa and Google's released ETC -> ETC checkpoints, the hub interface, the Hugging Face
                   ``transformers`` classes (the only importer of ``transformers``), pictures, fairseq
                   registration, and the ``etc-*`` commands

``user_dir`` (outside the package) is the thin fairseq ``--user-dir``; it imports ``etc_fairseq.register``.
"""

__version__ = "0.1.0"
