"""Natural Questions: long and short answers over document windows.

See :mod:`etc_fairseq.finetune` for what each module of this package holds; none is imported here."""
