"""Lifting pretrained encoders into ETC (paper section 3.6, appendix D) and reading the sources ``etc-lift``
accepts:

- :mod:`.fairseq_roberta`: fairseq RoBERTa checkpoints; the lift itself (:func:`lift_roberta_into_etc`) and
  the ETC checkpoint writer, which every source goes through;
- :mod:`.huggingface`: Hugging Face BERT / RoBERTa directories, renamed to fairseq RoBERTa's names;
- official ETC TensorFlow checkpoints: :mod:`etc_fairseq.official.convert` (a conversion, not a lift:
  every weight has its official counterpart).
"""

from .fairseq_roberta import (
    LM_HEAD,
    SENTENCE_ENCODER,
    LiftError,
    LiftReport,
    RobertaConfig,
    build_etc_model,
    check_compatible,
    check_dictionary,
    etc_config_dict,
    lift_checkpoint,
    lift_roberta_into_etc,
    load_roberta_state,
    masked_lm_dictionary,
    normalise_roberta_state,
    placeholder_dictionary,
    roberta_config_from_checkpoint,
    save_etc_checkpoint,
)

__all__ = [
    "LM_HEAD",
    "SENTENCE_ENCODER",
    "LiftError",
    "LiftReport",
    "RobertaConfig",
    "build_etc_model",
    "check_compatible",
    "check_dictionary",
    "etc_config_dict",
    "lift_checkpoint",
    "lift_roberta_into_etc",
    "load_roberta_state",
    "masked_lm_dictionary",
    "normalise_roberta_state",
    "placeholder_dictionary",
    "roberta_config_from_checkpoint",
    "save_etc_checkpoint",
]
