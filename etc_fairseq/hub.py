"""Using a trained ETC checkpoint from Python: :class:`EtcHubInterface` (like fairseq's
``RobertaHubInterface``), built by ``EtcModel.from_pretrained`` (:mod:`etc_fairseq.models.loading`) from local
files only. The user guide with
runnable examples is ``docs/python-api.md``.

::

    from etc_fairseq.models.etc import EtcModel

    etc = EtcModel.from_pretrained("runs/etc_pretraining/checkpoints", checkpoint_file="checkpoint_last.pt",
                                   data_name_or_path="../data/bin")   # in eval mode
    tokens = etc.encode("Anarchism is a political philosophy.")    # int64 [long_len], <s> ... </s>
    long, glob = etc.extract_features(tokens)                       # float [1, long_len, D], [1, G, D]
    batch = etc.encode_documents([["First sentence.", "Second one."], ["Another document."]])
    long, glob = etc.extract_features(batch)                        # [2, L, D], [2, 3, D]: CLS + sentences
    etc.register_classification_head("topic", num_classes=4)
    log_probs = etc.predict("topic", batch)                         # float [2, 4]
    etc.fill_mask("Anarchism is a political <mask>.", topk=3)       # [(text, probability, symbol), ...]

What ``from_pretrained`` reads (all local; nothing is downloaded):

- ``model_dir/checkpoint_file``: a checkpoint written by ``fairseq-train --arch etc_*`` (any task). It is
  checked before anything else is read or built (:func:`etc_fairseq.models.checkpoint_config.load_model_checkpoint`):
  a weights-only pickle with nothing beyond torch's allowlist, and a config naming an ETC model with
  known, typed fields and one of our tasks; anything else is refused and nothing in it runs.
- the data directory (``data_name_or_path``, relative to ``model_dir`` when it starts with ``.``):
  ``dict.txt``, as for fairseq-train; for a ``sentence_prediction`` checkpoint the directory holding
  ``input0/dict.txt`` and ``label/dict.txt`` (``bin/input0`` itself is accepted too).
- the tokenizer (:func:`etc_fairseq.data.tokenizer_files.find_tokenizer`): explicit files if given; else, for an ``etc-lift`` output (or
  data ``etc-prepare pretrain --from-model`` wrote), the source model's own tokenizer from its
  ``etc_tokenizer.json`` (:func:`etc_fairseq.tokenization.load_tokenizer`; its pretrained global token ids
  are used too); else the ``pretrain.json`` that
  ``etc-prepare pretrain`` writes into its ``bin/`` directory (it names ``../spm.model`` or
  ``../gpt2/{encoder.json,vocab.bpe}``); else ``spm.model`` or GPT-2's ``encoder.json`` + ``vocab.bpe``
  (directly or under ``gpt2/``) in the model directory, the data directory or its parent. Without a
  tokenizer the interface still works on token ids; :meth:`EtcHubInterface.encode` then says what it
  looked for.

Layouts:

- :meth:`EtcHubInterface.encode` (plain text): the tokenizer's pieces wrapped in ``<s> ... </s>`` like
  fairseq's ``masked_lm``/``sentence_prediction`` data (``add_special_tokens=False``: the bare pieces of the
  ``etc_pretraining`` long input); the model then adds fixed-block global tokens itself. Longer than
  ``max_length`` (default: the model's absolute position table, none for relative positions) is refused
  unless ``truncation=True``.
- :meth:`EtcHubInterface.encode_document` / :meth:`~EtcHubInterface.encode_documents` (structured, one
  example per document, a padded batch for several): the ``etc_pretraining`` layout
  (:class:`~etc_fairseq.data.pretraining_dataset.PretrainingDataset` without masking: the sentences' pieces
  back to back in the long input, one ``<s>`` global token of type ``SENTENCE`` per sentence) with a CLS
  first on both sides (the fine-tuning tasks' CLS; the long CLS belongs to the global CLS), which
  classification heads read. Sentences longer than the training data's ``max_sentence_pieces`` are cut at
  word starts into several sentences, as ``etc-prepare pretrain`` does.
- :meth:`EtcHubInterface.encode_packed`: several documents in one example exactly as ``etc_pretraining``
  packs them (each its own example id: documents never attend to each other), via
  :func:`~etc_fairseq.data.packing.example_structure_ids`.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from etc_fairseq.data.batching import EtcInput, collate_inputs, structured_input
from etc_fairseq.errors import ConfigError, InputFormatError
from etc_fairseq.structure.global_tokens import GlobalTokenType, global_token_id

logger = logging.getLogger(__name__)

__all__ = ["EtcHubInterface", "LM_HEAD_LIFTED"]

#: the field of a lifted checkpoint's provenance (``extra_state.lifted_from``) saying whether its LM head came from
#: its source: False for Google's ETC and a Hugging Face model without an MLM head, whose LM head starts fresh, so
#: :meth:`EtcHubInterface.fill_mask` predicts noise until the model is pretrained further (it warns)
LM_HEAD_LIFTED = "lm_head_lifted"


class EtcHubInterface(nn.Module):
    """A loaded ETC model with its dictionary and tokenizer. See the module docstring.

    Args:
        cfg: the checkpoint's fairseq config.
        task: the fairseq task (its ``source_dictionary`` is the model's).
        model: the :class:`~etc_fairseq.models.etc.EtcModel`.
        tokenizer: a :class:`~etc_fairseq.tokenization.SourceTokenizer` or None (token ids only).
        max_sentence_pieces: cut longer sentences in :meth:`encode_documents` (0 = never); the training
            data's value (``pretrain.json``) when loaded by ``EtcModel.from_pretrained``.
        tokenizer_search: where :func:`~etc_fairseq.data.tokenizer_files.find_tokenizer` looked (for the error
            message without one).
        global_role_ids: pretrained role -> dictionary id of the special global tokens (see
            :func:`~etc_fairseq.structure.global_tokens.global_token_id`); from ``pretrain.json``.
        lm_head_trained: False when the LM head starts fresh (see :data:`LM_HEAD_LIFTED`).
    """

    def __init__(self, cfg, task, model, tokenizer=None, max_sentence_pieces: int = 0,
                 tokenizer_search: Sequence[str] = (), global_role_ids: Optional[Dict[str, int]] = None,
                 lm_head_trained: bool = True):
        super().__init__()
        #: False for a checkpoint lifted from a source without an LM head, not yet pretrained further
        #: (:data:`LM_HEAD_LIFTED`): :meth:`fill_mask` then warns that its predictions mean nothing
        self.lm_head_trained = bool(lm_head_trained)
        #: the ids a converted source model's global tokens were pretrained with (``global_token_ids`` of
        #: ``pretrain.json``, as the pretraining dataset uses them); empty: ``<s>`` for every role
        self.global_role_ids = dict(global_role_ids or {})
        self.cfg = cfg
        self.task = task
        self.model = model
        self.tokenizer = tokenizer
        self.max_sentence_pieces = int(max_sentence_pieces or 0)
        self._tokenizer_search = list(tokenizer_search)
        self.register_buffer("_float_tensor", torch.tensor([0], dtype=torch.float), persistent=False)

    @property
    def device(self) -> torch.device:
        return self._float_tensor.device

    @property
    def dictionary(self):
        return self.task.source_dictionary

    @property
    def pretraining_layout(self) -> bool:
        """Whether the model was trained with ``etc_pretraining`` (long input without special tokens)."""
        from etc_fairseq.pretraining.task import EtcPretrainingTask

        return isinstance(self.task, EtcPretrainingTask)

    # -- encoding ---------------------------------------------------------------------------------------
    def _need_tokenizer(self):
        if self.tokenizer is None:
            raise ConfigError(
                "no tokenizer found for this checkpoint (looked at: " + "; ".join(self._tokenizer_search)
                + "); pass spm_model= or gpt2_encoder_json= and gpt2_vocab_bpe= to from_pretrained, "
                "or give token ids"
            )
        return self.tokenizer

    def _symbols_to_ids(self, symbols: Sequence[str]) -> List[int]:
        d = self.dictionary
        return [d.index(s) for s in symbols]

    def encode_sentence(self, text: str) -> List[List[int]]:
        """One sentence -> its dictionary ids, cut at word starts into several sentences when longer than
        :attr:`max_sentence_pieces` (as ``etc-prepare pretrain`` cuts them).

        Returns:
            one or more non-empty lists of ids (an empty list when the text has no tokens).
        """
        tok = self._need_tokenizer()
        symbols = tok.encode(text)
        if not symbols:
            return []
        from etc_fairseq.prepare.gpt2 import wrap_tokens

        chunks = wrap_tokens(symbols, tok.word_starts(symbols), self.max_sentence_pieces)
        if len(chunks) > 1:
            logger.info("a sentence of %d pieces was cut into %d (max_sentence_pieces=%d)",
                        len(symbols), len(chunks), self.max_sentence_pieces)
        return [self._symbols_to_ids(c) for c in chunks]

    @property
    def max_length(self) -> Optional[int]:
        """The longest long input the model accepts: the size of its absolute position table, or None
        (any length) for a model with relative positions only."""
        return self.model.max_positions()

    def encode(self, text: str, add_special_tokens: bool = True, truncation: bool = False,
               max_length: Optional[int] = None) -> torch.Tensor:
        """Plain text -> the long input (the model adds fixed-block global tokens itself).

        Args:
            text: one text.
            add_special_tokens: wrap in ``<s> ... </s>`` (fairseq's ``masked_lm``/``sentence_prediction``
                layout): the first long token is then a CLS, which classification heads read. False gives
                the bare pieces (the ``etc_pretraining`` long input).
            truncation: cut a longer input to ``max_length`` tokens (the end, ``</s>`` kept), with a logged
                warning giving the count; False (default) refuses it with an error naming this option.
            max_length: the longest input; default :attr:`max_length` (None: no limit, relative positions).
        Returns:
            int64 [long_len].
        Raises:
            ValueError: longer than ``max_length`` without ``truncation=True``; ``truncation=True`` with no
                limit to cut at.
        """
        ids = self._symbols_to_ids(self._need_tokenizer().encode(text))
        limit = self.max_length if max_length is None else int(max_length)
        extra = 2 if add_special_tokens else 0
        if truncation and limit is None:
            raise ConfigError("truncation=True needs max_length= (this model has no length limit of its own)")
        if limit is not None and len(ids) + extra > limit:
            if not truncation:
                raise InputFormatError(
                    f"text encodes to {len(ids) + extra} tokens, more than max_length={limit}; pass "
                    "truncation=True to cut it (a warning gives the count), or a larger max_length="
                )
            if limit < extra + 1:
                raise ConfigError(f"max_length={limit} leaves no room for any token")
            logger.warning("truncated a text of %d tokens to max_length=%d (%d cut)",
                           len(ids) + extra, limit, len(ids) + extra - limit)
            ids = ids[: limit - extra]
        if add_special_tokens:
            ids = [self.dictionary.bos()] + ids + [self.dictionary.eos()]
        return torch.tensor(ids, dtype=torch.long)

    def _document_ids(self, doc: Sequence[str], d: int = 0) -> List[List[int]]:
        sents: List[List[int]] = []
        if isinstance(doc, str):
            raise TypeError(f"document {d} is a string; give its sentences as a list of strings")
        if len(doc) == 0:
            raise InputFormatError(f"document {d} has no sentences")
        for i, text in enumerate(doc):
            pieces = self.encode_sentence(text)
            if not pieces:
                raise InputFormatError(f"document {d}, sentence {i}: {text!r} encodes to no tokens")
            sents.extend(pieces)
        return sents

    def encode_document(self, sentences: Sequence[str], cls: bool = True) -> EtcInput:
        """One document (its sentences as text) -> one structured example: one ``SENTENCE`` global
        token per sentence summarising its pieces (the ``etc_pretraining`` layout, sentences longer than
        :attr:`max_sentence_pieces` cut as ``etc-prepare pretrain`` cuts them), and with ``cls`` (default)
        a CLS first on both sides, which classification heads read (:func:`~etc_fairseq.data.batching.structured_input`).

        Returns:
            an :data:`EtcInput` (no batch dimension).
        Raises:
            ValueError: no sentences, or a sentence without tokens (named by index).
        """
        cls_id = self._global_id(GlobalTokenType.CLS) if cls else None
        return structured_input([self._document_ids(sentences)], self._sentence_global_id(), cls_id)

    def encode_documents(self, documents: Sequence[Sequence[str]], cls: bool = True) -> Dict[str, Any]:
        """Several documents -> a padded batch, one row per document (:meth:`encode_document` each, then
        :func:`~etc_fairseq.data.batching.collate_inputs`), like a tokenizer called on a list of texts.

        Returns:
            the model's ``net_input``: ``src_tokens`` int64 [num_documents, long_len] etc. (see
            :func:`~etc_fairseq.data.batching.collate_inputs`); give it to :meth:`extract_features` / :meth:`predict` as it is.
        """
        if isinstance(documents, str) or len(documents) == 0:
            raise InputFormatError("encode_documents takes a non-empty list of documents (each a list of sentences)")
        items = []
        for d, doc in enumerate(documents):
            cls_id = self._global_id(GlobalTokenType.CLS) if cls else None
            items.append(structured_input([self._document_ids(doc, d)], self._sentence_global_id(), cls_id))
        return collate_inputs(items, self.dictionary.pad())

    def encode_packed(self, documents: Sequence[Sequence[str]]) -> EtcInput:
        """Several documents packed into ONE example, exactly as ``etc_pretraining`` packs short documents
        (each its own example id: no attention between them; no CLS). For a batch use
        :meth:`encode_documents`.

        Returns:
            an :data:`EtcInput` (no batch dimension).
        """
        docs_ids = [self._document_ids(doc, d) for d, doc in enumerate(documents)]
        return structured_input(docs_ids, self._sentence_global_id())

    def _sentence_global_id(self) -> int:
        return self._global_id(GlobalTokenType.SENTENCE)

    def _global_id(self, token_type: GlobalTokenType) -> int:
        return global_token_id(self.dictionary, token_type, role_ids=self.global_role_ids)

    def fill_mask(self, masked_input: str, topk: int = 5) -> List[Tuple[str, float, str]]:
        """Predict the token at ``<mask>``, like ``RobertaHubInterface.fill_mask``.

        Args:
            masked_input: text with exactly one ``<mask>``.
            topk: how many candidates.
        Returns:
            ``topk`` tuples (the text with ``<mask>`` replaced, probability, the predicted dictionary
            symbol), most probable first. The input is laid out as in training (bare pieces for an
            ``etc_pretraining`` model, ``<s> ... </s>`` otherwise).
        """
        mask = "<mask>"
        if not self.lm_head_trained:
            logger.warning("fill_mask: this checkpoint was lifted from a model without an LM head and not pretrained "
                           "since; its LM head is freshly initialised, so the predictions are noise (continue "
                           "pretraining with --task etc_pretraining --criterion cpc_mlm first)")
        if masked_input.count(mask) != 1:
            raise InputFormatError(f"fill_mask needs exactly one {mask} in the input, got {masked_input.count(mask)}")
        tok = self._need_tokenizer()
        mask_id = self.dictionary.index(mask)
        if mask_id == self.dictionary.unk():
            raise ConfigError(f"this model's dictionary has no {mask} symbol (not trained with masking)")
        left, right = masked_input.split(mask)
        ids = self._symbols_to_ids(tok.encode(left.rstrip())) if left.strip() else []
        pos = len(ids)
        ids = ids + [mask_id] + (self._symbols_to_ids(tok.encode(right)) if right.strip() else [])
        if not self.pretraining_layout:
            ids = [self.dictionary.bos()] + ids + [self.dictionary.eos()]
            pos += 1
        tokens = torch.tensor([ids], dtype=torch.long, device=self.device)
        with torch.no_grad():
            logits, _ = self.model(tokens, masked_tokens=tokens.eq(mask_id))
        probs = logits[0].float().softmax(dim=-1)  # [vocab]
        values, index = probs.topk(k=min(int(topk), probs.numel()))
        out = []
        for p, i in zip(values.tolist(), index.tolist()):
            symbol = self.dictionary[i]
            if i < self.dictionary.nspecial or i == mask_id:
                word, starts_word = symbol, False
            else:
                text = tok.decode([symbol])
                word = text.strip()
                starts_word = tok.starts_word(symbol)
            sep = " " if starts_word and left and not left.endswith(" ") else ""
            out.append((left + sep + word + right, p, symbol))
        return out

    def decode(self, tokens: torch.Tensor) -> str:
        """int64 [long_len] -> text (special symbols, padding and ``<mask>`` are left out)."""
        d = self.dictionary
        skip = {d.bos(), d.eos(), d.pad(), d.index("<mask>")}
        symbols = [d[int(t)] for t in tokens.view(-1).tolist() if int(t) not in skip]
        return self._need_tokenizer().decode(symbols)

    # -- batching -----------------------------------------------------------------------------------------
    def to_net_input(self, inputs) -> Dict[str, Any]:
        """Any accepted input -> the model's ``net_input`` on the model's device.

        ``inputs``: int64 [long_len] or [batch, long_len] token ids (plain; the model adds fixed-block
        global tokens), an :data:`EtcInput`, a list of 1-D token tensors or of :data:`EtcInput`, or an
        already batched ``net_input`` dict (2-D ``src_tokens``). Token ids must be integers of this model's
        dictionary and global token types those of :class:`GlobalTokenType`
        (:class:`~etc_fairseq.errors.InputFormatError` naming the input otherwise: a float tensor, or an id
        the embedding tables have no row for).
        """
        if torch.is_tensor(inputs):
            if inputs.dim() == 1:
                inputs = inputs.unsqueeze(0)
            if inputs.dim() != 2:
                raise InputFormatError(f"token ids must be int64 [long_len] or [batch, long_len], got {tuple(inputs.shape)}")
            net = {"src_tokens": inputs}
        elif isinstance(inputs, dict):
            if inputs["src_tokens"].dim() == 2:
                net = inputs
            else:
                net = collate_inputs([inputs], self.dictionary.pad())
        elif isinstance(inputs, (list, tuple)):
            items = [x if isinstance(x, dict) else {"src_tokens": _integer_ids(torch.as_tensor(x), f"inputs[{i}]")}
                     for i, x in enumerate(inputs)]
            net = collate_inputs(items, self.dictionary.pad())
        else:
            raise TypeError(f"cannot use {type(inputs).__name__} as model input")
        for key, high in (("src_tokens", len(self.dictionary)), ("global_tokens", len(self.dictionary)),
                          ("global_types", len(GlobalTokenType))):
            if net.get(key) is not None:
                _check_ids(_integer_ids(net[key], key), key, high)
        n, limit = net["src_tokens"].size(1), self.model.max_positions()
        if limit is not None and n > limit:
            raise InputFormatError(
                f"long input of {n} tokens exceeds {limit}, the size of this model's absolute position "
                "table (max_positions / index_position_embeddings); encode(..., truncation=True) cuts it"
            )
        return _to_device(net, self.device)

    # -- features and heads -------------------------------------------------------------------------------
    def extract_features(self, inputs, return_all_hiddens: bool = False):
        """Long and global features of the last layer (or of every layer).

        Args:
            inputs: see :meth:`to_net_input`.
            return_all_hiddens: also return every layer's outputs.
        Returns:
            (long features float [batch, long_len, dim], global features float [batch, global_len, dim]);
            with ``return_all_hiddens``, lists of those, one per layer output (the embeddings first). A model
            fine-tuned for a task that reads one side only computes only that side in its last layer
            (WikiHop: global; NQ, OpenKP: long): the other side's last features are None.
        """
        net = self.to_net_input(inputs)
        long, extra = self.model(**net, features_only=True, return_all_hiddens=return_all_hiddens)
        if return_all_hiddens:
            states = extra["inner_states"]
            return [s[0] for s in states], [s[1] for s in states]
        return long, extra["global_features"]

    def register_classification_head(self, name: str, num_classes: int = None, embedding_size: int = None, **kwargs):
        """A RoBERTa-style head ``name`` reading the CLS: the first long token (``<s>`` of :meth:`encode`
        and :meth:`encode_document`) or, with the model's ``classification_head_input=global_cls``, the
        first global token (the CLS of :meth:`encode_document`); ``embedding_size`` is its inner width
        (default: the model's)."""
        self.model.register_classification_head(name, num_classes=num_classes, inner_dim=embedding_size, **kwargs)
        self.model.classification_heads[name].to(self.device)

    def predict(self, head: str, inputs, return_logits: bool = False) -> torch.Tensor:
        """Run classification head ``head``.

        Args:
            head: a registered (or loaded) head name.
            inputs: see :meth:`to_net_input`.
            return_logits: return logits instead of log-probabilities.
        Returns:
            float [batch, num_classes]: log-probabilities (or logits).
        """
        if head not in self.model.classification_heads:
            raise KeyError(f"no classification head {head!r}; registered: {sorted(self.model.classification_heads)}")
        net = self.to_net_input(inputs)
        logits, _ = self.model(**net, classification_head_name=head)
        return logits if return_logits else F.log_softmax(logits, dim=-1)


def _to_device(x, device):
    if torch.is_tensor(x):
        return x.to(device)
    if isinstance(x, dict):
        return {k: _to_device(v, device) for k, v in x.items()}
    return x


def _integer_ids(t: torch.Tensor, what: str) -> torch.Tensor:
    """``t`` itself when it holds integers (ids); an InputFormatError naming ``what`` for floats or bools,
    which an embedding would refuse deep inside the model (or a cast would round silently)."""
    if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
        raise InputFormatError(f"{what}: expected integer token ids (int64), got a {t.dtype} tensor")
    return t.long() if t.dtype != torch.long else t


def _check_ids(t: torch.Tensor, what: str, high: int) -> None:
    """Refuse an id outside ``[0, high)`` (an embedding table of ``high`` rows), naming the first one."""
    if t.numel() == 0:
        return
    bad = (t < 0) | (t >= high)
    if bool(bad.any()):
        first = tuple(int(i) for i in bad.nonzero()[0].tolist())
        raise InputFormatError(f"{what}: id {int(t[first])} at position {list(first)} is outside this model's "
                               f"range 0..{high - 1}")
