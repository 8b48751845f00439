"""etc-fairseq: ETC (Extended Transformer Construction, Ainslie et al., EMNLP 2020) for fairseq.

Layout (data flows top to bottom):

- ``etc_fairseq.prepare``    raw files -> sentences / paragraphs -> tokens -> binarized fairseq datasets
                              (the ``etc-prepare`` command lives in ``etc_fairseq.cli.prepare``)
- ``etc_fairseq.data``       pretraining corpus reader, document packing, MLM/CPC masking, collation
- ``etc_fairseq.tasks``      fairseq tasks (``etc_pretraining``)
- ``etc_fairseq.structure``  pure functions: structure ids -> 4 masks + 4 relative-label tensors;
                              the one relative-label vocabulary and the global-token types
- ``etc_fairseq.models``     the ``etc`` fairseq model (wrapping ``etc_fairseq.encoder``) and architectures
- ``etc_fairseq.encoder``    the ETC encoder, its layer and heads as plain PyTorch (no fairseq import),
                              saved and loaded as safetensors + JSON
- ``etc_fairseq.attention``  the global-local attention kernel (blocked l2l) and its dense reference
- ``etc_fairseq.criterions`` fairseq criterions (``cpc_mlm``)
- ``etc_fairseq.lift``       fairseq RoBERTa, Hugging Face BERT/RoBERTa and official ETC -> ETC checkpoints
                              (``etc-lift``)
- ``etc_fairseq.official``   Google's released ETC: TF checkpoint reader, conversion, ``forward_official_inputs``
- ``etc_fairseq.tokenization`` the tokenizer of a lifted model's source (WordPiece, SentencePiece, BPE)
- ``user_dir``               (outside the package) the thin fairseq ``--user-dir`` that registers it all
"""

__version__ = "0.1.0"
