"""Datasets and data planning for ETC training (fairseq-free where possible).

- :mod:`.indexed`             reading fairseq binarized data: ``load_dictionary``, ``load_split``
- :mod:`.pretraining_corpus`  ``PretrainingCorpus``: the sentence/document corpus ``etc-prepare pretrain``
                              writes, and word-start masks for whole-word masking
- :mod:`.prepared`            what ``etc-prepare`` records (``prepare.json``) and how tasks take it up:
                              lengths, structure settings, one-line errors naming the flag to pass
- :mod:`.packing`             pure functions: split long documents, pack short ones, and the packed
                              example's structure ids for ``etc_fairseq.structure.build_structure``
- :mod:`.task_base`           ``EtcDataTask``: what the pre-training and fine-tuning fairseq tasks share
                              (the data directory's dictionary, the epoch's directory, the prepared-settings check)

Submodules are not imported here, so importing one does not pull in fairseq.
"""
