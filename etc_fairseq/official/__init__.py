"""Google's released ETC (TensorFlow ``etcmodel``): reading its checkpoints without TensorFlow.

- ``tf_checkpoint``: the TensorFlow checkpoint (tensor bundle) reader.
- ``variables``: every variable name an official ``EtcModel`` checkpoint holds and the ETC concept it is.
- ``checkpoint``: an official checkpoint directory read and checked against its ``etc_config.json``.
"""
