"""etc-fairseq: ETC (Extended Transformer Construction, Ainslie et al., EMNLP 2020) for fairseq.

Layers, lowest first (``.importlinter`` states them and ``tests/test_layering.py`` checks them; a module imports
only from its own layer or lower ones, and no package has an import cycle):

- leaves: ``errors`` (the user-error classes), ``guards`` (what every command checks on what it reads and
  writes), ``checkpoint_io`` (the safe checkpoint reader), ``tokenization``, ``commands``, ``progress``,
  ``tracing``, ``text``, ``criterion_metrics``
- the plain-PyTorch core, no fairseq: ``attention`` (the global-local attention kernels and the dense
  reference) -> ``structure`` (structure ids -> masks and relative labels) -> ``encoder`` (the ETC encoder,
  its layer, heads, presets, safetensors files)
- ``data`` (batches, packing, masking, the on-disk formats), ``official`` (Google's released ETC, converted
  weight for weight), ``prepare`` (``etc-prepare``: raw files -> binarized data), ``lift`` (fairseq RoBERTa and
  Hugging Face BERT/RoBERTa tensors -> ETC's)
- the fairseq adapter: ``pretraining`` (task and criterion) -> ``hub`` (the Python interface) -> ``models``
  (the ``etc`` model, architectures, checkpoint config gate, loading, ``etc-lift``'s intake and checkpoint
  writer) -> ``fairseq_fixes`` -> ``register`` (what ``--user-dir`` imports)
- ``finetune``: one package per dataset (schema, convert, task, criterion, decode, metrics) and ``common``
- ``visualize``, ``hf`` (the Hugging Face ``transformers`` adapter over the same core: the only importer of
  ``transformers``; it runs without fairseq, which only its ``etc-lift`` conversions use) and ``cli`` (the
  ``etc-*`` commands)
"""

__version__ = "0.1.0"
