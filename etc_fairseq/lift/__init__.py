"""Lifting pretrained encoders into ETC (paper section 3.6, appendix D) and reading the sources ``etc-lift``
accepts:

- :mod:`.fairseq_roberta`: fairseq RoBERTa checkpoints; the lift itself (:func:`lift_roberta_into_etc`), which
  every BERT/RoBERTa source goes through;
- :mod:`.huggingface`: Hugging Face BERT / RoBERTa directories, renamed to fairseq RoBERTa's names;
- official ETC TensorFlow checkpoints: :mod:`etc_fairseq.official.convert` (a conversion, not a lift:
  every weight has its official counterpart).

Mapping tensors only: the fresh ETC model the tensors go into, the fairseq checkpoint and ``etc-lift``'s
intake belong to the fairseq adapter (:mod:`etc_fairseq.models.lifting`).
"""

from .fairseq_roberta import (
    LM_HEAD,
    SENTENCE_ENCODER,
    LiftError,
    LiftReport,
    RobertaConfig,
    check_compatible,
    check_dictionary,
    lift_roberta_into_etc,
    load_roberta_state,
    masked_lm_dictionary,
    normalise_roberta_state,
    placeholder_dictionary,
    roberta_config_from_checkpoint,
)

__all__ = [
    "LM_HEAD",
    "SENTENCE_ENCODER",
    "LiftError",
    "LiftReport",
    "RobertaConfig",
    "check_compatible",
    "check_dictionary",
    "lift_roberta_into_etc",
    "load_roberta_state",
    "masked_lm_dictionary",
    "normalise_roberta_state",
    "placeholder_dictionary",
    "roberta_config_from_checkpoint",
]
