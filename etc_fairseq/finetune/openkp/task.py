"""The ``etc_openkp`` task: OpenKP keyphrase extraction on data from ``etc-prepare openkp``.

Heads registered on the model: ``openkp_keyphrase`` (:class:`~etc_fairseq.finetune.openkp.heads.KeyphraseHead`) and,
unless ``--no-visual-features``, ``openkp_visual`` (:class:`~etc_fairseq.finetune.openkp.heads.VisualFeatureEmbedding`),
whose output :meth:`EtcOpenKPTask.forward_features` adds to the long and global input embeddings.
"""
# No ``from __future__ import annotations``: fairseq reads the config field types at run time.
from dataclasses import dataclass, field

from fairseq.tasks import register_task

from etc_fairseq.encoder.config import ActivationName
from etc_fairseq.finetune.openkp.heads import KeyphraseHead, VisualFeatureEmbedding
from etc_fairseq.finetune.openkp.schema import DEFAULT_MAX_GLOBAL_LEN, MAX_NGRAM, target_fields
from etc_fairseq.finetune.common.task import EtcStructuredTask, EtcStructuredTaskConfig


@dataclass
class EtcOpenKPConfig(EtcStructuredTaskConfig):
    max_global_len: int = field(default=DEFAULT_MAX_GLOBAL_LEN, metadata={"help": "longest global input (VDOM nodes) accepted"})
    no_visual_features: bool = field(
        default=False, metadata={"help": "do not add the VDOM visual-feature embeddings (ablation)"}
    )


@register_task("etc_openkp", dataclass=EtcOpenKPConfig)
class EtcOpenKPTask(EtcStructuredTask):
    """OpenKP: long = word pieces, global = VDOM nodes, one softmax over all 1..5-grams of words."""

    TARGET_FIELDS = tuple(target_fields())
    ENCODER_OUTPUTS = ("long",)
    cfg: EtcOpenKPConfig

    def build_heads(self, model) -> None:
        dim = model.cfg.encoder_embed_dim
        activation = ActivationName(model.cfg.activation_fn).value  # a plain name, stored as a str or an enum member
        model.register_task_head("openkp_keyphrase", KeyphraseHead(dim, MAX_NGRAM, activation))
        if not self.cfg.no_visual_features:
            model.register_task_head("openkp_visual", VisualFeatureEmbedding(dim))

    def forward_features(self, model, sample):
        """(long features float [B, L, D], extra) with the visual embeddings added to the inputs."""
        net_input = sample["net_input"]
        inputs = {k: v for k, v in net_input.items() if k in self.MODEL_INPUTS}
        if self.cfg.no_visual_features:
            return model(**inputs, features_only=True)
        pad = self.dictionary.pad()
        long_extra, global_extra = model.task_heads["openkp_visual"](
            net_input["node_features"],  # float [B, G, 20]
            net_input["structure"]["long_segment"],  # int64 [B, L]
            net_input["global_tokens"].eq(pad),  # bool [B, G]
        )
        return model(**inputs, features_only=True, long_extra_embeddings=long_extra, global_extra_embeddings=global_extra)

    def keyphrase_logits(self, model, sample):
        """float [B, W, 5] n-gram logits of a batch (W = the batch's most words)."""
        features, _ = self.forward_features(model, sample)
        target = sample["target"]
        num_words = target["ngram_ids"].size(1)
        return model.task_heads["openkp_keyphrase"](features, target["word_of_piece"], num_words)
