"""What the fine-tuning datasets share:

- :mod:`.convert` the ``etc-prepare <dataset>`` pipeline: options, atomic output, writer loop, summary
- :mod:`.task`    ``EtcStructuredTask``: the base fairseq task (dictionary, loading a prepared split, heads)
- :mod:`.runner`  the ``etc-predict`` loop: load a checkpoint, run a split batch by batch
- :mod:`.spans`   answer-span decoding as pure numpy functions
"""
