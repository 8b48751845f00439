"""Documents -> the named tensors of :mod:`.modeling`, with the project's own layout code:

- :meth:`EtcProcessor.encode_documents`: documents given as lists of sentences, laid out as the fairseq hub's
  ``encode_documents`` lays them out (it is that code: :class:`etc_fairseq.hub.EtcHubInterface`): the sentences'
  pieces back to back in the long input, one SENTENCE global token per sentence summarising them (sentences
  longer than ``max_sentence_pieces`` cut at word starts), and a CLS first on both sides;
- :meth:`EtcProcessor.encode_records`: the ``Document`` builder's records
  (:mod:`etc_fairseq.finetune.structured.builder`, or their JSON), laid out as ``etc-prepare structured`` lays
  them out (:func:`etc_fairseq.finetune.structured.convert.build_example`), with their labels when a
  ``label_level`` is given (``labels`` for a record class or the global tokens' classes,
  ``start_positions`` / ``end_positions`` for an answer span);
- :class:`EtcDataCollator`: pads such examples into a batch (``transformers.Trainer``'s ``data_collator``).

Plain text needs no processor: ``tokenizer(texts, padding=True, return_tensors="pt")`` gives ``input_ids`` and
``attention_mask``, and the model makes fixed-block global tokens itself.

The global tokens carry the ids the model was pretrained with for their role (``EtcConfig.global_token_ids``;
official ETC: ``[unused0]`` for sentences), else the tokenizer's CLS / ``<s>``, by the one rule of
:func:`etc_fairseq.structure.global_tokens.global_token_id`.

Names: the fairseq side's ``src_tokens`` / ``long_tokens`` are ``input_ids``, ``global_tokens`` are
``global_input_ids``; the structure ids keep their names (:data:`etc_fairseq.structure.builders.STRUCTURE_KEYS`).
"""
from __future__ import annotations

import json
import os
import shutil
import types
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import torch

from etc_fairseq.errors import CheckpointLoadError, ConfigError, InputFormatError
from etc_fairseq.structure.builders import STRUCTURE_KEYS
from etc_fairseq.tokenization import SourceTokenizer

__all__ = ["EtcProcessor", "EtcDataCollator", "source_tokenizer"]

#: Padding of each named input in a batch: the pad id for token ids, -100 (ignored by every loss) for labels,
#: and for the structure ids the "none" value :func:`etc_fairseq.structure.build_structure` defaults to
#: (it ignores padding positions; ``long_links`` needs -1 in the unused link slots of real tokens).
_PAD_VALUES = {"labels": -100, "long_segment": -1, "global_parent": -1, "long_links": -1}
#: scalar names (one value per example)
_SCALAR_NAMES = ("start_positions", "end_positions")


class _Vocabulary:
    """A tokenizer's vocabulary with the fairseq ``Dictionary`` methods the project's layout code calls
    (``index``, ``pad``, ``unk``, ``bos``, ``len``): the layout code works on this model's ids as on a fairseq
    dictionary's."""

    def __init__(self, tokenizer):
        self._ids = tokenizer.get_vocab()
        self.unk_index = tokenizer.unk_token_id
        self.pad_index = tokenizer.pad_token_id
        self.bos_index = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
        if None in (self.unk_index, self.pad_index, self.bos_index):
            raise ConfigError("the tokenizer needs an unk, a pad and a cls (or bos) token for ETC's layouts")

    def index(self, symbol: str) -> int:
        return self._ids.get(symbol, self.unk_index)

    def pad(self) -> int:
        return self.pad_index

    def unk(self) -> int:
        return self.unk_index

    def bos(self) -> int:
        return self.bos_index

    def __len__(self) -> int:
        return len(self._ids)


def source_tokenizer(tokenizer) -> SourceTokenizer:
    """A Hugging Face fast tokenizer as the project's :class:`~etc_fairseq.tokenization.SourceTokenizer` (its
    pieces are the tokenizer's tokens; the kind, which decides where words start, read from its pre-tokenizer
    and model)."""
    backend = tokenizer.backend_tokenizer
    spec = json.loads(backend.to_str())
    pre = json.dumps(spec.get("pre_tokenizer"))
    model = (spec.get("model") or {}).get("type")
    kind = "byte_level_bpe" if '"ByteLevel"' in pre else "wordpiece" if model == "WordPiece" else "sentencepiece"

    def encode(text: str):
        enc = backend.encode(text, add_special_tokens=False)
        return list(enc.tokens), list(enc.offsets)

    return SourceTokenizer(kind, encode, _decode=tokenizer.convert_tokens_to_string)


def _as_tensor(value) -> torch.Tensor:
    return value.to(torch.long) if torch.is_tensor(value) else torch.as_tensor(value, dtype=torch.long)


class EtcDataCollator:
    """Pads examples (dicts of the model's named inputs and labels, as lists or tensors) into a batch of int64
    tensors: token ids with the pad id, attention masks and types with 0, structure ids with their "none"
    value, token labels with -100; ``long_links`` [L, K] in both dimensions.

    Args:
        pad_token_id: the tokenizer's (and model's) pad id.
    """

    def __init__(self, pad_token_id: int):
        self.pad_token_id = int(pad_token_id)

    def _pad_value(self, name: str) -> int:
        if name in ("input_ids", "global_input_ids"):
            return self.pad_token_id
        return _PAD_VALUES.get(name, 0)

    def __call__(self, features: Sequence[Mapping[str, Any]]) -> Dict[str, torch.Tensor]:
        if not features:
            raise InputFormatError("nothing to collate")
        names = list(features[0])
        for i, f in enumerate(features):
            if sorted(f) != sorted(names):
                raise InputFormatError(f"example {i} has the inputs {sorted(f)}, example 0 {sorted(names)}")
        batch = {}
        for name in names:
            values = [_as_tensor(f[name]) for f in features]
            if values[0].dim() == 0 or name in _SCALAR_NAMES:
                batch[name] = torch.stack([v.reshape(()) for v in values])
                continue
            shape = [max(v.shape[d] for v in values) for d in range(values[0].dim())]
            out = torch.full([len(values)] + shape, self._pad_value(name), dtype=torch.long)
            for i, v in enumerate(values):
                out[(i,) + tuple(slice(0, n) for n in v.shape)] = v
            batch[name] = out
        return batch


class EtcProcessor:
    """The tokenizer of an ETC model and the layouts of the module docstring.

    Args:
        tokenizer: the model's fast tokenizer (``AutoTokenizer.from_pretrained(DIR)``).
        config: the model's :class:`~.configuration.EtcConfig` (its ``global_token_ids``, and ``vocab_size``,
            checked against the tokenizer); None: every global token is the tokenizer's CLS / ``<s>``.
        max_sentence_pieces: cut longer sentences (``encode_documents``) at word starts; 0: never.
    Raises:
        CheckpointLoadError: the tokenizer's vocabulary is not the model's (one line naming both sizes).
    """

    def __init__(self, tokenizer, config=None, max_sentence_pieces: int = 0):
        self.tokenizer = tokenizer
        self.config = config
        self.max_sentence_pieces = int(max_sentence_pieces or 0)
        if config is not None and len(tokenizer) != config.vocab_size:
            where = getattr(tokenizer, "name_or_path", "") or "the tokenizer"
            raise CheckpointLoadError(
                f"{os.path.join(where, 'tokenizer.json') if os.path.isdir(where) else where}: {len(tokenizer)} "
                f"tokens, but the model's config.json field 'vocab_size' is {config.vocab_size}: not this model's "
                "tokenizer")
        self.vocabulary = _Vocabulary(tokenizer)
        self.source = source_tokenizer(tokenizer)
        self.collator = EtcDataCollator(self.vocabulary.pad())

    @classmethod
    def from_pretrained(cls, directory: Union[str, os.PathLike], **kwargs) -> "EtcProcessor":
        """The tokenizer and config of a model directory (local files only; ``kwargs``: see the class)."""
        from transformers import AutoTokenizer

        from .configuration import EtcConfig

        config = EtcConfig.from_pretrained(str(directory), local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
        processor = cls(tokenizer, config, **kwargs)
        processor.directory = Path(directory)
        return processor

    #: the directory :meth:`from_pretrained` read (None: built from objects)
    directory: Optional[Path] = None

    def save_pretrained(self, directory: Union[str, os.PathLike]) -> None:
        """Write the tokenizer (the config goes with the model's ``save_pretrained``) and, when the processor
        was read from a directory that has them, the fairseq side's ``dict.txt``, ``etc_tokenizer.json`` and
        the source tokenizer's files (so that ``etc-lift`` and ``etc-prepare --from-model`` read the saved
        directory as the one it came from)."""
        from .convert import fairseq_side_files

        self.tokenizer.save_pretrained(str(directory))
        if self.directory is not None and Path(directory).resolve() != self.directory.resolve():
            for path in fairseq_side_files(self.directory):
                shutil.copyfile(path, Path(directory) / path.name)

    @property
    def global_token_ids(self) -> Dict[str, int]:
        return dict(getattr(self.config, "global_token_ids", None) or {})

    # -- documents as lists of sentences --------------------------------------------------------------------
    def _hub(self):
        """The fairseq hub's text-encoding methods over this tokenizer (no model, no fairseq task)."""
        from etc_fairseq.hub import EtcHubInterface

        task = types.SimpleNamespace(source_dictionary=self.vocabulary)
        return EtcHubInterface(None, task, None, self.source, max_sentence_pieces=self.max_sentence_pieces,
                               global_role_ids=self.global_token_ids)

    def encode_documents(self, documents: Sequence[Sequence[str]], cls: bool = True,
                         return_tensors: Optional[str] = "pt"):
        """Documents (each a list of sentences) -> one example each (see the module docstring).

        Returns:
            ``return_tensors="pt"``: a padded batch, ``input_ids`` int64 [B, L], ``attention_mask`` [B, L],
            ``global_input_ids`` / ``global_attention_mask`` / ``global_types`` [B, G], ``long_segment``,
            ``long_example`` [B, L], ``global_example`` [B, G]; ``return_tensors=None``: a list of per-document
            dicts of lists (for a dataset; :class:`EtcDataCollator` batches them).
        """
        batch = self._hub().encode_documents(documents, cls=cls)
        examples = [self._named(batch, row=i) for i in range(len(documents))]
        return self._result(examples, return_tensors)

    __call__ = encode_documents

    # -- the Document builder's records ----------------------------------------------------------------------
    def encode_records(self, records, label_level: Optional[str] = None, classes: Sequence[str] = (),
                       global_types: Optional[Mapping[str, str]] = None, max_long_len: Optional[int] = None,
                       max_global_len: Optional[int] = None, max_links_per_token: Optional[int] = None,
                       return_tensors: Optional[str] = "pt"):
        """Records (:class:`~etc_fairseq.finetune.structured.builder.Document` s, ``StructuredRecord`` s or
        their JSON objects) -> one example each, laid out as ``etc-prepare structured`` lays them out.

        Args:
            label_level: None (inputs only), ``record`` (``labels``: the record's class), ``global``
                (``labels`` [G]: each global token's class, -100 unlabelled) or ``span`` (``start_positions`` /
                ``end_positions``: the answer's long tokens, -100 unlabelled).
            classes: the class names in class order (``record`` / ``global``).
            global_types: declared user types ``{NAME: BASE}`` (``etc-prepare structured --global-type``).
            max_long_len / max_global_len / max_links_per_token: as ``etc-prepare structured``'s (its defaults);
                longer records are cut as it cuts them (counted in :attr:`last_counts`).
            return_tensors: ``"pt"`` (a padded batch) or None (a list of dicts of lists).
        Raises:
            InputFormatError: a record that is not valid (one line naming the record and field).
        """
        import dataclasses
        from collections import Counter

        from etc_fairseq.finetune.structured.convert import StructuredOptions, build_example
        from etc_fairseq.finetune.structured.schema import IGNORE, StructuredRecord, record_from_json, record_to_json
        from etc_fairseq.prepare.tokenizer import WordPieceTokenizer

        limits = {name: int(value) for name, value in (("max_long_len", max_long_len), ("max_global_len", max_global_len),
                                                       ("max_links_per_token", max_links_per_token)) if value is not None}
        opts = StructuredOptions(label_level or "global", list(classes), dict(global_types or {}), **limits)
        tokenizer = WordPieceTokenizer(self.source.kind, self.vocabulary, self.source, global_ids=self.global_token_ids)
        counts: Counter = Counter()
        examples = []
        for k, r in enumerate(records):
            obj = r.to_json() if hasattr(r, "to_json") else record_to_json(r) if isinstance(r, StructuredRecord) else r
            rec = record_from_json(obj, f"records[{k}]", opts.global_types, label_level=label_level)
            if label_level is None:
                rec = dataclasses.replace(rec, label=None, answer=None,
                                          globals=[dataclasses.replace(g, label=None) for g in rec.globals])
            arrays, _ = build_example(rec, tokenizer, opts, counts)
            example = self._named({"src_tokens": arrays["long_tokens"], "global_tokens": arrays["global_tokens"],
                                   "global_types": arrays["global_types"],
                                   "structure": {n: arrays[n] for n in STRUCTURE_KEYS if n in arrays}})
            if label_level == "record":
                example["labels"] = _ignored(int(arrays["record_label"][0]), IGNORE)
            elif label_level == "global":
                example["labels"] = [_ignored(int(v), IGNORE) for v in arrays["global_labels"]]
            elif label_level == "span":
                example["start_positions"], example["end_positions"] = (_ignored(int(v), IGNORE) for v in arrays["span"])
            examples.append(example)
        if not examples:
            raise InputFormatError("encode_records needs at least one record")
        #: what the layout cut or counted in the last call (``etc-prepare structured``'s counts)
        self.last_counts = dict(counts)
        return self._result(examples, return_tensors)

    # -- naming and batching ---------------------------------------------------------------------------------
    def _named(self, item: Mapping[str, Any], row: Optional[int] = None) -> Dict[str, List]:
        """One example of the fairseq side's names (``src_tokens``, ``global_tokens``, ``global_types``,
        ``structure``; of one batch ``row``, padding removed) -> the model's names, as lists, with the
        attention masks."""
        def part(t, length=None):
            t = torch.as_tensor(t)
            if row is not None:
                t = t[row]
            return (t[:length] if length is not None else t).tolist()

        pad = self.vocabulary.pad()
        tokens = torch.as_tensor(item["src_tokens"])
        glob = torch.as_tensor(item["global_tokens"])
        n = int(tokens[row].ne(pad).sum()) if row is not None else len(tokens)
        g = int(glob[row].ne(pad).sum()) if row is not None else len(glob)
        out = {"input_ids": part(tokens, n), "attention_mask": [1] * n, "global_input_ids": part(glob, g),
               "global_attention_mask": [1] * g, "global_types": part(item["global_types"], g)}
        for name, value in item["structure"].items():
            out[name] = part(value, g if name.startswith("global_") else n)
        return out

    def _result(self, examples: List[Dict[str, Any]], return_tensors: Optional[str]):
        if return_tensors is None:
            return examples
        if return_tensors != "pt":
            raise ConfigError(f"return_tensors={return_tensors!r}: ETC's inputs are torch tensors ('pt') or lists (None)")
        return self.collator(examples)


def _ignored(value: int, ignore: int) -> int:
    """A label, with the layout's "unlabelled" value as -100 (what every loss ignores)."""
    return -100 if value == ignore else value
