"""Using a trained ETC checkpoint from Python: :class:`EtcHubInterface` (like fairseq's
``RobertaHubInterface``), built by ``EtcModel.from_pretrained`` from local files only.

::

    from etc_fairseq.models.etc import EtcModel

    etc = EtcModel.from_pretrained("runs/etc_pretraining/checkpoints", checkpoint_file="checkpoint_last.pt",
                                   data_name_or_path="../data/bin")
    etc.eval()
    tokens = etc.encode("Anarchism is a political philosophy.")    # int64 [long_len]
    long, glob = etc.extract_features(tokens)                       # float [1, long_len, D], [1, G, D]
    doc = etc.encode_documents([["First sentence.", "Second one."], ["Another document."]])
    long, glob = etc.extract_features(doc)                          # G = 3: one global token per sentence
    etc.register_classification_head("topic", num_classes=4)
    log_probs = etc.predict("topic", doc)                           # float [1, 4]

What ``from_pretrained`` reads (all local; nothing is downloaded):

- ``model_dir/checkpoint_file``: a checkpoint written by ``fairseq-train --arch etc_*`` (any task). It is
  checked before anything else is read or built (:func:`etc_fairseq.checkpoint_io.load_model_checkpoint`):
  a weights-only pickle with nothing beyond torch's allowlist, and a config naming an ETC model with
  known, typed fields and one of our tasks; anything else is refused and nothing in it runs.
- the data directory (``data_name_or_path``, relative to ``model_dir`` when it starts with ``.``):
  ``dict.txt``, as for fairseq-train.
- the tokenizer (:func:`find_tokenizer`): explicit files if given; else the ``pretrain.json`` that
  ``etc-prepare pretrain`` writes into its ``bin/`` directory (it names ``../spm.model`` or
  ``../gpt2/{encoder.json,vocab.bpe}``); else ``spm.model`` or GPT-2's ``encoder.json`` + ``vocab.bpe``
  (directly or under ``gpt2/``) in the model directory, the data directory or its parent. Without a
  tokenizer the interface still works on token ids; :meth:`EtcHubInterface.encode` then says what it
  looked for.

Layouts (the same as training):

- :meth:`EtcHubInterface.encode` (plain text): the tokenizer's pieces, wrapped in ``<s> ... </s>`` like
  fairseq's ``masked_lm``/``sentence_prediction`` data, except for a model trained with
  ``etc_pretraining``, whose long input has no special tokens. The model then adds fixed-block global
  tokens itself.
- :meth:`EtcHubInterface.encode_documents` (structured): exactly the ``etc_pretraining`` layout
  (:class:`~etc_fairseq.data.pretraining_dataset.PretrainingDataset`, without masking): the sentences'
  pieces back to back in the long input, one ``<s>`` global token of type ``SENTENCE`` per sentence, each
  document its own example id (documents never attend to each other), via
  :func:`~etc_fairseq.data.packing.example_structure_ids`. Sentences longer than the training data's
  ``max_sentence_pieces`` are cut at word starts into several sentences, as ``etc-prepare pretrain`` does.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from etc_fairseq.data.packing import Piece, example_structure_ids
from etc_fairseq.structure.global_tokens import GlobalTokenType, global_token_id

logger = logging.getLogger(__name__)

PathLike = Union[str, os.PathLike]

#: One encoded input without a batch dimension: ``src_tokens`` int64 [long_len], and for structured input
#: ``global_tokens``/``global_types`` int64 [global_len] and ``structure`` (``long_segment``,
#: ``long_example`` int64 [long_len]; ``global_example`` int64 [global_len]).
EtcInput = Dict[str, Any]

__all__ = [
    "EtcHubInterface",
    "EtcInput",
    "SpmTokenizer",
    "Gpt2Tokenizer",
    "find_tokenizer",
    "structured_input",
    "collate_inputs",
    "from_pretrained",
]


# -------------------------------------------------------------------------------------------------------
# tokenizers: text -> dictionary symbols (the strings in dict.txt)
# -------------------------------------------------------------------------------------------------------


class SpmTokenizer:
    """A sentencepiece model; its dictionary symbols are the pieces."""

    kind = "spm"

    def __init__(self, model: PathLike):
        from etc_fairseq.prepare.spm import load_spm

        self.path = Path(model)
        self.sp = load_spm(self.path)

    def encode(self, text: str) -> List[str]:
        """One text -> its pieces (what ``etc-prepare`` writes into ``tok/``)."""
        return self.sp.encode(text, out_type=str)

    def word_starts(self, symbols: Sequence[str]) -> List[bool]:
        """Per symbol, whether it begins a word (a piece starting with U+2581)."""
        from etc_fairseq.prepare.spm import WORD_START

        return [s.startswith(WORD_START) for s in symbols]

    def decode(self, symbols: Sequence[str]) -> str:
        return self.sp.decode_pieces(list(symbols))

    def __repr__(self) -> str:
        return f"SpmTokenizer({str(self.path)!r})"


class Gpt2Tokenizer:
    """GPT-2 byte-level BPE (RoBERTa's); its dictionary symbols are GPT-2 ids in decimal."""

    kind = "gpt2"

    def __init__(self, encoder_json: PathLike, vocab_bpe: PathLike):
        from etc_fairseq.prepare.gpt2 import load_gpt2_bpe, load_gpt2_decoder

        self.paths = (Path(encoder_json), Path(vocab_bpe))
        self.bpe = load_gpt2_bpe(encoder_json, vocab_bpe)
        self.decoder = load_gpt2_decoder(encoder_json)

    def encode(self, text: str) -> List[str]:
        """One text -> GPT-2 ids as decimal strings (encoded on its own: no leading space is added, as
        ``etc-prepare pretrain`` encodes each sentence)."""
        return [str(i) for i in self.bpe.encode(text)]

    def word_starts(self, symbols: Sequence[str]) -> List[bool]:
        """Per symbol, whether it begins a word (its text begins with a space); the first always does."""
        from etc_fairseq.data.pretraining_corpus import GPT2_SPACE

        out = [self.decoder[int(s)].startswith(GPT2_SPACE) for s in symbols]
        if out:
            out[0] = True
        return out

    def decode(self, symbols: Sequence[str]) -> str:
        return self.bpe.decode([int(s) for s in symbols if s.isdigit()])

    def __repr__(self) -> str:
        return f"Gpt2Tokenizer({str(self.paths[0])!r}, {str(self.paths[1])!r})"


def _gpt2_pair(d: Path) -> Optional[Tuple[Path, Path]]:
    for sub in (d / "gpt2", d):
        if (sub / "encoder.json").is_file() and (sub / "vocab.bpe").is_file():
            return sub / "encoder.json", sub / "vocab.bpe"
    return None


def find_tokenizer(
    model_dir: PathLike,
    data_dir: PathLike,
    spm_model: Optional[PathLike] = None,
    gpt2_encoder_json: Optional[PathLike] = None,
    gpt2_vocab_bpe: Optional[PathLike] = None,
) -> Tuple[Optional[Union[SpmTokenizer, Gpt2Tokenizer]], List[str], Dict[str, Any]]:
    """Find the tokenizer that a checkpoint's training data was encoded with (see the module docstring
    for the search order).

    Args:
        model_dir: the checkpoint's directory.
        data_dir: the data directory (with ``dict.txt``).
        spm_model / gpt2_encoder_json + gpt2_vocab_bpe: explicit files (take precedence).
    Returns:
        (the tokenizer or None, the places looked at, the ``pretrain.json`` contents or ``{}``).
    Raises:
        FileNotFoundError: an explicit file, or one that ``pretrain.json`` names, is missing.
        ValueError: both kinds given explicitly, or only one of the two GPT-2 files.
    """
    model_dir, data_dir = Path(model_dir), Path(data_dir)
    meta: Dict[str, Any] = {}
    meta_path = data_dir / "pretrain.json"
    if meta_path.is_file():
        from etc_fairseq.data.pretraining_corpus import read_meta

        meta = read_meta(data_dir)
    if spm_model is not None and (gpt2_encoder_json is not None or gpt2_vocab_bpe is not None):
        raise ValueError("give either spm_model or the GPT-2 files (gpt2_encoder_json, gpt2_vocab_bpe), not both")
    if (gpt2_encoder_json is None) != (gpt2_vocab_bpe is None):
        raise ValueError("GPT-2 BPE needs both gpt2_encoder_json and gpt2_vocab_bpe")
    if spm_model is not None:
        return SpmTokenizer(spm_model), [f"spm_model={spm_model}"], meta
    if gpt2_encoder_json is not None:
        return Gpt2Tokenizer(gpt2_encoder_json, gpt2_vocab_bpe), [f"gpt2 files {gpt2_encoder_json}, {gpt2_vocab_bpe}"], meta
    looked = []
    if meta:
        files = {k: (data_dir / v) for k, v in meta.get("tokenizer_files", {}).items()}
        for p in files.values():
            if not p.is_file():
                raise FileNotFoundError(f"{p}: tokenizer file named by {meta_path} is missing")
        if meta.get("tokenizer") == "spm" and "spm_model" in files:
            return SpmTokenizer(files["spm_model"]), [str(meta_path)], meta
        if meta.get("tokenizer") == "gpt2" and {"gpt2_encoder_json", "gpt2_vocab_bpe"} <= set(files):
            return Gpt2Tokenizer(files["gpt2_encoder_json"], files["gpt2_vocab_bpe"]), [str(meta_path)], meta
        looked.append(f"{meta_path} (names no usable tokenizer)")
    else:
        looked.append(f"{meta_path} (absent)")
    seen = set()
    for d in (model_dir, data_dir, data_dir.parent):
        d = d.resolve()
        if d in seen:
            continue
        seen.add(d)
        if (d / "spm.model").is_file():
            return SpmTokenizer(d / "spm.model"), looked + [str(d / "spm.model")], meta
        pair = _gpt2_pair(d)
        if pair is not None:
            return Gpt2Tokenizer(*pair), looked + [str(pair[0])], meta
        looked.append(f"{d}/{{spm.model, encoder.json + vocab.bpe, gpt2/encoder.json + gpt2/vocab.bpe}}")
    return None, looked, meta


# -------------------------------------------------------------------------------------------------------
# pure layout functions
# -------------------------------------------------------------------------------------------------------


def structured_input(documents: Sequence[Sequence[Sequence[int]]], global_id: int) -> EtcInput:
    """The ``etc_pretraining`` layout of documents of sentences (token ids), without masking.

    Args:
        documents: per document, per sentence, its dictionary ids (non-empty; no special tokens).
        global_id: the dictionary id of a sentence's global token
            (:func:`~etc_fairseq.structure.global_tokens.global_token_id` for ``SENTENCE``: ``<s>``).
    Returns:
        an :data:`EtcInput`: ``src_tokens`` int64 [L] (the sentences back to back, L = total tokens),
        ``global_tokens`` int64 [G] (``global_id``, G = number of sentences), ``global_types`` int64 [G]
        (``SENTENCE``), ``structure``: ``long_segment`` int64 [L] (sentence index of each long token),
        ``long_example`` int64 [L] and ``global_example`` int64 [G] (document index).
    Raises:
        ValueError: no documents, an empty document or an empty sentence (named by index).
    """
    if len(documents) == 0:
        raise ValueError("structured input needs at least one document")
    lengths: List[List[int]] = []
    for d, doc in enumerate(documents):
        if len(doc) == 0:
            raise ValueError(f"document {d} has no sentences")
        for s, sent in enumerate(doc):
            if len(sent) == 0:
                raise ValueError(f"document {d}, sentence {s}: no tokens")
        lengths.append([len(sent) for sent in doc])
    example = [Piece(d, 0, len(doc)) for d, doc in enumerate(documents)]  # every document is one piece
    ids = example_structure_ids(example, lengths)
    src = np.concatenate([np.asarray(sent, dtype=np.int64) for doc in documents for sent in doc])
    g = len(ids["global_example"])
    return {
        "src_tokens": torch.from_numpy(src),
        "global_tokens": torch.full((g,), int(global_id), dtype=torch.long),
        "global_types": torch.full((g,), int(GlobalTokenType.SENTENCE), dtype=torch.long),
        "structure": {k: torch.from_numpy(v) for k, v in ids.items()},
    }


def collate_inputs(items: Sequence[EtcInput], pad: int) -> Dict[str, Any]:
    """Batch :data:`EtcInput` items into the model's ``net_input``, padded as
    :meth:`~etc_fairseq.data.pretraining_dataset.PretrainingDataset.collater` pads.

    Args:
        items: all plain (``src_tokens`` only) or all structured.
        pad: the dictionary's pad id.
    Returns:
        ``{"src_tokens": int64 [B, L]}`` (pad-padded), plus for structured items ``global_tokens`` int64
        [B, G] (pad-padded), ``global_types`` int64 [B, G] (0-padded) and ``structure`` with
        ``long_segment`` int64 [B, L] (-1 at padding), ``long_example`` int64 [B, L] and
        ``global_example`` int64 [B, G] (0 at padding).
    Raises:
        ValueError: no items, or plain and structured items mixed.
    """
    if len(items) == 0:
        raise ValueError("nothing to collate")
    structured = ["global_tokens" in it for it in items]
    if any(structured) and not all(structured):
        raise ValueError("cannot batch plain token inputs with structured (document) inputs")
    bsz = len(items)
    L = max(max(len(it["src_tokens"]) for it in items), 1)
    src = torch.full((bsz, L), pad, dtype=torch.long)
    for i, it in enumerate(items):
        src[i, : len(it["src_tokens"])] = it["src_tokens"]
    if not structured[0]:
        return {"src_tokens": src}
    G = max(max(len(it["global_tokens"]) for it in items), 1)
    gtok = torch.full((bsz, G), pad, dtype=torch.long)
    gtyp = torch.zeros((bsz, G), dtype=torch.long)
    long_segment = torch.full((bsz, L), -1, dtype=torch.long)
    long_example = torch.zeros((bsz, L), dtype=torch.long)
    global_example = torch.zeros((bsz, G), dtype=torch.long)
    for i, it in enumerate(items):
        n, g = len(it["src_tokens"]), len(it["global_tokens"])
        gtok[i, :g] = it["global_tokens"]
        gtyp[i, :g] = it["global_types"]
        long_segment[i, :n] = it["structure"]["long_segment"]
        long_example[i, :n] = it["structure"]["long_example"]
        global_example[i, :g] = it["structure"]["global_example"]
    return {
        "src_tokens": src,
        "global_tokens": gtok,
        "global_types": gtyp,
        "structure": {"long_segment": long_segment, "long_example": long_example, "global_example": global_example},
    }


# -------------------------------------------------------------------------------------------------------
# the interface
# -------------------------------------------------------------------------------------------------------


class EtcHubInterface(nn.Module):
    """A loaded ETC model with its dictionary and tokenizer. See the module docstring.

    Args:
        cfg: the checkpoint's fairseq config.
        task: the fairseq task (its ``source_dictionary`` is the model's).
        model: the :class:`~etc_fairseq.models.etc.EtcModel`.
        tokenizer: :class:`SpmTokenizer`, :class:`Gpt2Tokenizer` or None (token ids only).
        max_sentence_pieces: cut longer sentences in :meth:`encode_documents` (0 = never); the training
            data's value (``pretrain.json``) when loaded by :func:`from_pretrained`.
        tokenizer_search: where :func:`find_tokenizer` looked (for the error message without one).
    """

    def __init__(self, cfg, task, model, tokenizer=None, max_sentence_pieces: int = 0,
                 tokenizer_search: Sequence[str] = ()):
        super().__init__()
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
            raise ValueError(
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

    def encode(self, text: str, add_special_tokens: Optional[bool] = None) -> torch.Tensor:
        """Plain text -> the long input.

        Args:
            text: one text (no length cut: the whole text becomes one input).
            add_special_tokens: wrap in ``<s> ... </s>``; default: yes, except for ``etc_pretraining``
                models (see the module docstring).
        Returns:
            int64 [long_len].
        """
        ids = self._symbols_to_ids(self._need_tokenizer().encode(text))
        if add_special_tokens is None:
            add_special_tokens = not self.pretraining_layout
        if add_special_tokens:
            ids = [self.dictionary.bos()] + ids + [self.dictionary.eos()]
        return torch.tensor(ids, dtype=torch.long)

    def encode_documents(self, documents: Sequence[Sequence[str]]) -> EtcInput:
        """Documents of sentences (texts) -> the ``etc_pretraining`` structured layout
        (:func:`structured_input`; see the module docstring).

        Args:
            documents: per document, its sentences as text.
        Returns:
            an :data:`EtcInput` (no batch dimension).
        Raises:
            ValueError: an empty document, or a sentence without tokens (named by index).
        """
        docs_ids: List[List[List[int]]] = []
        for d, doc in enumerate(documents):
            sents: List[List[int]] = []
            for s, text in enumerate(doc):
                pieces = self.encode_sentence(text)
                if not pieces:
                    raise ValueError(f"document {d}, sentence {s}: {text!r} encodes to no tokens")
                sents.extend(pieces)
            docs_ids.append(sents)
        global_id = global_token_id(self.dictionary, GlobalTokenType.SENTENCE)
        return structured_input(docs_ids, global_id)

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
        already batched ``net_input`` dict (2-D ``src_tokens``).
        """
        if torch.is_tensor(inputs):
            if inputs.dim() == 1:
                inputs = inputs.unsqueeze(0)
            if inputs.dim() != 2:
                raise ValueError(f"token ids must be int64 [long_len] or [batch, long_len], got {tuple(inputs.shape)}")
            net = {"src_tokens": inputs}
        elif isinstance(inputs, dict):
            if inputs["src_tokens"].dim() == 2:
                net = inputs
            else:
                net = collate_inputs([inputs], self.dictionary.pad())
        elif isinstance(inputs, (list, tuple)):
            items = [x if isinstance(x, dict) else {"src_tokens": torch.as_tensor(x, dtype=torch.long)} for x in inputs]
            net = collate_inputs(items, self.dictionary.pad())
        else:
            raise TypeError(f"cannot use {type(inputs).__name__} as model input")
        n, limit = net["src_tokens"].size(1), self.model.max_positions()
        if limit is not None and n > limit:
            raise ValueError(
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
            with ``return_all_hiddens``, lists of those, one per layer output (the embeddings first).
        """
        net = self.to_net_input(inputs)
        long, extra = self.model(**net, features_only=True, return_all_hiddens=return_all_hiddens)
        if return_all_hiddens:
            states = extra["inner_states"]
            return [s[0] for s in states], [s[1] for s in states]
        return long, extra["global_features"]

    def register_classification_head(self, name: str, num_classes: int = None, embedding_size: int = None, **kwargs):
        """A RoBERTa-style head ``name`` on the first long token (or the first global token, per the
        model's ``classification_head_input``); ``embedding_size`` is its inner width (default: the model's)."""
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


# -------------------------------------------------------------------------------------------------------
# loading
# -------------------------------------------------------------------------------------------------------


def from_pretrained(
    model_name_or_path: PathLike,
    checkpoint_file: str = "model.pt",
    data_name_or_path: str = ".",
    spm_model: Optional[PathLike] = None,
    gpt2_encoder_json: Optional[PathLike] = None,
    gpt2_vocab_bpe: Optional[PathLike] = None,
    **kwargs,
) -> EtcHubInterface:
    """Load a trained ETC checkpoint from a local directory (``EtcModel.from_pretrained`` calls this).

    Args:
        model_name_or_path: a local directory holding the checkpoint (no URLs, no archive names: nothing
            is downloaded).
        checkpoint_file: the checkpoint's file name in that directory.
        data_name_or_path: the data directory with ``dict.txt``; relative to the model directory when it
            starts with ``.`` (fairseq's convention), else a path.
        spm_model / gpt2_encoder_json / gpt2_vocab_bpe: tokenizer files (else found by :func:`find_tokenizer`).
        kwargs: fairseq config overrides (as ``hub_utils.from_pretrained`` takes them), e.g. ``dropout``.
    Returns:
        an :class:`EtcHubInterface` (in training mode like fairseq's; call ``.eval()``).
    Raises:
        FileNotFoundError: a directory or file is missing (named).
        etc_fairseq.checkpoint_io.CheckpointLoadError: the checkpoint references globals outside torch's
            weights-only allowlist, or its config names anything but an ETC model with known, typed fields
            (nothing of it is executed or built).
    """
    from fairseq import hub_utils

    import etc_fairseq.register  # noqa: F401  (registers the etc model, tasks and criterions)
    from etc_fairseq.checkpoint_io import load_model_checkpoint
    from etc_fairseq.models.etc import EtcModel

    model_dir = Path(model_name_or_path)
    if not model_dir.is_dir():
        raise FileNotFoundError(
            f"{model_name_or_path}: no such model directory (EtcModel.from_pretrained reads local files "
            "only; nothing is downloaded)"
        )
    data_name_or_path = str(data_name_or_path)
    data_dir = (model_dir / data_name_or_path) if data_name_or_path.startswith(".") else Path(data_name_or_path)
    data_dir = data_dir.resolve()
    if not (data_dir / "dict.txt").is_file():
        raise FileNotFoundError(f"{data_dir / 'dict.txt'}: no such file (data_name_or_path={data_name_or_path!r})")
    for name in checkpoint_file.split(os.pathsep):
        path = model_dir / name
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such checkpoint file")
        load_model_checkpoint(path, mmap=True)  # both gates; fairseq's loader (wrapped) checks again
    tokenizer, looked, meta = find_tokenizer(model_dir, data_dir, spm_model, gpt2_encoder_json, gpt2_vocab_bpe)
    kwargs.setdefault("load_checkpoint_heads", True)
    x = hub_utils.from_pretrained(str(model_dir.resolve()), checkpoint_file, str(data_dir), archive_map=None, **kwargs)
    model = x["models"][0]
    if not isinstance(model, EtcModel):
        raise ValueError(
            f"{model_dir / checkpoint_file}: holds a {type(model).__name__}, not an ETC model "
            "(for RoBERTa checkpoints use etc-lift or RobertaModel.from_pretrained)"
        )
    return EtcHubInterface(
        x["args"], x["task"], model, tokenizer,
        max_sentence_pieces=int(meta.get("max_sentence_pieces", 0) or 0), tokenizer_search=looked,
    )
