"""The CONSTRUCTED next-sentence task on real Wikipedia text (issue 21's long-range benchmark): find the
sentence that followed a removed one among the paragraphs of its article and of distractor articles.

See :mod:`etc_fairseq.finetune` for what each module of this package holds; none is imported here."""
