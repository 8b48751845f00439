"""ETC for Hugging Face ``transformers`` users: the second adapter over the plain-PyTorch core (fairseq's ``etc``
model is the first). The only package of etc-fairseq that imports ``transformers`` (``pip install
etc-fairseq[hf]``). Models, tokenizers and the processor run without fairseq; the ``etc-lift`` conversions of
:mod:`.convert` read and write fairseq checkpoints and use it. The user guide is ``docs/huggingface.md``.

- :mod:`.configuration` :class:`EtcConfig` (``model_type = "etc"``; not fairseq's ``etc_fairseq.models.etc.EtcConfig``)
- :mod:`.modeling`      :class:`EtcModel`, :class:`EtcForMaskedLM`, :class:`EtcForSequenceClassification`,
                        :class:`EtcForTokenClassification`, :class:`EtcForQuestionAnswering`
- :mod:`.tokenization`  ``tokenizer.json`` for each source tokenizer (WordPiece, SentencePiece, byte-level BPE)
- :mod:`.processing`    :class:`EtcProcessor`: documents -> the model's named tensors; :class:`EtcDataCollator`
- :mod:`.convert`       fairseq ``etc`` checkpoints and ``etc-lift`` sources <-> Hugging Face directories

Importing this package registers the classes with ``AutoConfig`` and ``AutoModel``,
``AutoModelForMaskedLM``, ``AutoModelForSequenceClassification``, ``AutoModelForTokenClassification`` and
``AutoModelForQuestionAnswering``, so ``AutoModel.from_pretrained(DIR)`` loads a saved ETC directory without
``trust_remote_code``.
"""
from __future__ import annotations


def _require_transformers() -> None:
    try:
        import transformers
    except ImportError:
        raise ImportError("etc_fairseq.hf needs Hugging Face transformers: pip install 'etc-fairseq[hf]'") from None
    major = int(transformers.__version__.split(".")[0])
    if major < 5:
        raise ImportError(f"etc_fairseq.hf needs transformers >= 5 (installed: {transformers.__version__}); "
                          "pip install 'etc-fairseq[hf]'")


_require_transformers()

from transformers import (  # noqa: E402
    AutoConfig,
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

from .configuration import EtcConfig  # noqa: E402
from .modeling import (  # noqa: E402
    ATTN_IMPLEMENTATIONS,
    EtcForMaskedLM,
    EtcForQuestionAnswering,
    EtcForSequenceClassification,
    EtcForTokenClassification,
    EtcModel,
    EtcModelOutput,
    EtcPreTrainedModel,
)
from .processing import EtcDataCollator, EtcProcessor  # noqa: E402

#: the Auto class each model class is registered with
AUTO_CLASSES = {
    AutoModel: EtcModel,
    AutoModelForMaskedLM: EtcForMaskedLM,
    AutoModelForSequenceClassification: EtcForSequenceClassification,
    AutoModelForTokenClassification: EtcForTokenClassification,
    AutoModelForQuestionAnswering: EtcForQuestionAnswering,
}

AutoConfig.register(EtcConfig.model_type, EtcConfig, exist_ok=True)
for _auto, _model in AUTO_CLASSES.items():
    _auto.register(EtcConfig, _model, exist_ok=True)

__all__ = [
    "ATTN_IMPLEMENTATIONS",
    "AUTO_CLASSES",
    "EtcConfig",
    "EtcPreTrainedModel",
    "EtcModel",
    "EtcModelOutput",
    "EtcForMaskedLM",
    "EtcForSequenceClassification",
    "EtcForTokenClassification",
    "EtcForQuestionAnswering",
    "EtcProcessor",
    "EtcDataCollator",
]
