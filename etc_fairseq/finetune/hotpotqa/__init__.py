"""HotpotQA (distractor setting): supporting facts, answer type, answer span.

See :mod:`etc_fairseq.finetune` for what each module of this package holds; none is imported here."""
