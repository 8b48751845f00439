"""WikiHop: multiple choice over candidates (one global token each).

See :mod:`etc_fairseq.finetune` for what each module of this package holds; none is imported here."""
