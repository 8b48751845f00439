"""What the fine-tuning datasets share:

- :mod:`.task`    ``EtcStructuredTask``: the base fairseq task (dictionary, loading a prepared split, heads)
- :mod:`.runner`  the ``etc-predict`` loop: load a checkpoint, run a split batch by batch
- :mod:`.spans`   answer-span decoding as pure numpy functions
"""
