"""The ETC encoder as plain PyTorch (no fairseq import anywhere below this package).

- :mod:`.config`     :class:`EtcEncoderConfig`, the single definition of the model's fields
- :mod:`.embeddings` absolute positions, BERT initialisation
- :mod:`.layer`      :class:`EtcLayer` (projections, global-local attention, feed-forward)
- :mod:`.model`      :class:`EtcEncoder` -> :class:`EtcEncoderOutput` (long and global features, masks)
- :mod:`.heads`      LM head (tied), classification heads, per-token logits
- :mod:`.io`         ``save_pretrained`` / ``from_pretrained``: ``model.safetensors`` + ``config.json``;
                     a file that cannot be loaded raises :class:`~etc_fairseq.errors.CheckpointLoadError`

The fairseq ``etc`` model (:mod:`etc_fairseq.models.etc`) wraps :class:`EtcEncoder`.
"""

from etc_fairseq.errors import CheckpointLoadError

from .config import ACTIVATIONS, EtcEncoderConfig
from .heads import ClassificationHead, LMHead, PooledClassifier, TokenLogits
from .io import save_pretrained
from .layer import EtcLayer, EtcSelfAttention
from .model import EtcEncoder, EtcEncoderOutput, label_vocab_from_config

from_pretrained = EtcEncoder.from_pretrained

__all__ = [
    "ACTIVATIONS",
    "EtcEncoderConfig",
    "EtcEncoder",
    "EtcEncoderOutput",
    "EtcLayer",
    "EtcSelfAttention",
    "LMHead",
    "ClassificationHead",
    "PooledClassifier",
    "TokenLogits",
    "CheckpointLoadError",
    "save_pretrained",
    "from_pretrained",
    "label_vocab_from_config",
]
