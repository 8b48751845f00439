"""Google's released ETC (TensorFlow ``etcmodel``): reading its checkpoints without TensorFlow.

- ``tf_checkpoint``: the TensorFlow checkpoint (tensor bundle) reader.
- ``variables``: every variable name an official ``EtcModel`` checkpoint holds and the ETC concept it is.
- ``checkpoint``: an official checkpoint directory read and checked against its ``etc_config.json``.
- ``convert``: official config and weights -> :class:`~etc_fairseq.encoder.EtcEncoder`, and
  :func:`forward_official_inputs` (the official ``EtcModel.call`` inputs -> long and global outputs).
"""

from etc_fairseq.official.convert import (  # noqa: E402
    OFFICIAL_FIELD_HANDLING,
    OFFICIAL_FIXED_BLOCK_TOKEN_ID,
    OFFICIAL_INPUT_NAMES,
    OfficialConversion,
    convert_official_checkpoint,
    forward_official_inputs,
    official_to_encoder_config,
    official_weight_map,
)

__all__ = [
    "OFFICIAL_FIELD_HANDLING",
    "OFFICIAL_FIXED_BLOCK_TOKEN_ID",
    "OFFICIAL_INPUT_NAMES",
    "OfficialConversion",
    "convert_official_checkpoint",
    "forward_official_inputs",
    "official_to_encoder_config",
    "official_weight_map",
]
