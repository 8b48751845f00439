"""Your own structure, no new Python: a generic structured dataset read from JSONL records (the record
schema is documented once, in :mod:`.schema`; :mod:`.builder` writes records from Python), prepared with
``etc-prepare structured`` and trained with ``--task etc_structured --criterion etc_structured`` at the
label level the user chose (a class per record, a class per global token, or a span of words).
Tutorial: ``docs/structured.md``.

See :mod:`etc_fairseq.finetune` for what each module of this package holds; none is imported here."""
