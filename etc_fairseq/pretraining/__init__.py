"""ETC pre-training in fairseq: the ``etc_pretraining`` task (:mod:`.task`: corpus -> packed or fixed-block
examples with MLM and CPC masking) and the ``cpc_mlm`` criterion (:mod:`.criterion`: 0.8 MLM + 0.2 CPC).

Submodules are not imported here; :mod:`etc_fairseq.register` imports them to register them with fairseq.
"""
