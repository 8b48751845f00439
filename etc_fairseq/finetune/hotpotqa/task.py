"""The ``etc_hotpotqa`` task: HotpotQA (distractor setting) on data written by ``etc-prepare hotpotqa``.

Heads (registered on the model in :meth:`EtcHotpotqaTask.build_heads`, saved in checkpoints):

- ``hotpotqa_sp``:   :class:`~etc_fairseq.encoder.heads.TokenLogits` (1 output) on the global features: one
  supporting-fact logit per global token (used on the SENTENCE tokens; sigmoid).
- ``hotpotqa_type``: :class:`~etc_fairseq.encoder.heads.PooledClassifier` (3 classes: span / yes / no) on
  the global CLS (global index 0).
- ``hotpotqa_span``: :class:`~etc_fairseq.encoder.heads.TokenLogits` (2 outputs) on the long features:
  answer start / end logits.

Hard g2l: the paper's HotpotQA models use a hard g2l mask (global tokens attend only to the long tokens
they summarise; removing it hurt). It is the model option ``--hard-g2l`` (``EtcConfig.hard_g2l``), not a
task option: pass it to ``fairseq-train``; it is stored in the checkpoint with the model config.

The dataset adds each example's side record (``{split}.side.jsonl``: ids, titles, unit offsets, words,
gold answer and supporting facts) to the batch as ``sample["side"]`` (a list of dicts), which the
``etc_hotpotqa`` criterion and ``etc-predict hotpotqa`` use to compute the official metrics and to map
predictions back to ``(title, sentence index)`` and answer text.
"""
# No ``from __future__ import annotations``: fairseq reads the config field types at run time.
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import List

import numpy as np
from fairseq.tasks import register_task

from etc_fairseq.data.structured import StructuredDataset
from etc_fairseq.encoder.heads import PooledClassifier, TokenLogits
from etc_fairseq.finetune.hotpotqa.convert import hotpotqa_fields
from etc_fairseq.finetune.common.task import EtcStructuredTask, EtcStructuredTaskConfig

logger = logging.getLogger(__name__)

NUM_ANSWER_TYPES = 3  # span, yes, no


class SideRecords:
    """Random access to the lines of a ``{split}.side.jsonl`` without holding them in memory (byte offsets).

    Safe to pickle into data-loader workers: the file is (re)opened per process.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"{self.path}: missing (HotpotQA data needs its side records; re-run etc-prepare hotpotqa)")
        offsets = [0]
        with open(self.path, "rb") as f:
            for line in f:
                offsets.append(offsets[-1] + len(line))
        self.offsets = np.asarray(offsets, dtype=np.int64)  # [n + 1]
        self._fh = None
        self._pid = None

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> dict:
        if self._fh is None or self._pid != os.getpid():
            self._fh = open(self.path, "rb")
            self._pid = os.getpid()
        start, end = int(self.offsets[i]), int(self.offsets[i + 1])
        self._fh.seek(start)
        try:
            return json.loads(self._fh.read(end - start).decode("utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"{self.path}: line {i + 1}: not a valid side record ({e})") from None

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_fh"] = None
        state["_pid"] = None
        return state


class HotpotqaDataset(StructuredDataset):
    """:class:`StructuredDataset` whose items and batches also carry the side record (``sample["side"]``)."""

    def __init__(self, data_dir, split, *args, **kwargs):
        super().__init__(data_dir, split, *args, **kwargs)
        self.side = SideRecords(Path(data_dir) / f"{split}.side.jsonl")
        if len(self.side) != len(self):
            raise ValueError(f"{data_dir}/{split}.side.jsonl: {len(self.side)} records, meta says {len(self)} examples")

    def __getitem__(self, index: int):
        item = super().__getitem__(index)
        item["side"] = self.side[index]
        return item

    def collater(self, samples: List[dict]):
        batch = super().collater(samples)
        if batch:
            batch["side"] = [s["side"] for s in samples]
        return batch


@dataclass
class EtcHotpotqaConfig(EtcStructuredTaskConfig):
    pass


@register_task("etc_hotpotqa", dataclass=EtcHotpotqaConfig)
class EtcHotpotqaTask(EtcStructuredTask):
    """HotpotQA: supporting facts, answer type, answer span (see the module docstring)."""

    TARGET_FIELDS = tuple(hotpotqa_fields())

    DATASET_CLASS = HotpotqaDataset

    def describe_split(self, meta: dict) -> str:
        return f" (HotpotQA; flat_structure={meta.get('flat_structure')}, truncated {meta.get('examples_truncated')})"

    def build_heads(self, model) -> None:
        dim = model.cfg.encoder_embed_dim
        model.register_task_head("hotpotqa_sp", TokenLogits(dim, 1))
        model.register_task_head(
            "hotpotqa_type",
            PooledClassifier(dim, NUM_ANSWER_TYPES, activation_fn=model.cfg.pooler_activation_fn,
                             dropout=model.cfg.pooler_dropout),
        )
        model.register_task_head("hotpotqa_span", TokenLogits(dim, 2))

    def head_outputs(self, model, sample):
        """Run the encoder and the three heads.

        Returns:
            ``(sp_logits float [B, G], type_logits float [B, 3], start_logits float [B, L],
            end_logits float [B, L])``; padding positions are not masked here.
        """
        features, extra = self.forward_features(model, sample)  # [B, L, D], extra["global_features"] [B, G, D]
        return self.heads_from_features(model, features, extra)

    def heads_from_features(self, model, features, extra):
        """The three heads on encoder outputs (features float [B, L, D], extra["global_features"] float
        [B, G, D]); returns what :meth:`head_outputs` returns."""
        g = extra["global_features"]
        sp_logits = model.task_heads["hotpotqa_sp"](g).squeeze(-1)  # [B, G]
        type_logits = model.task_heads["hotpotqa_type"](g[:, 0])  # [B, 3]
        span = model.task_heads["hotpotqa_span"](features)  # [B, L, 2]
        return sp_logits, type_logits, span[..., 0], span[..., 1]
