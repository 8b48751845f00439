"""OpenKP: keyphrase extraction from web pages with VDOM visual features.

See :mod:`etc_fairseq.finetune` for what each module of this package holds; none is imported here."""
