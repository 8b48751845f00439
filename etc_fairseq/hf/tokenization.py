"""``tokenizer.json`` for an ETC model: the source model's own tokenizer (what ``etc_tokenizer.json`` describes,
:mod:`etc_fairseq.tokenization`), rebuilt as a Hugging Face fast tokenizer whose ids are the model's token rows.

A converted model's token rows follow its fairseq dictionary (``dict.txt``: ``<s> <pad> </s> <unk>``, the
source vocabulary, ``<mask>``), not the source's own ids; :func:`fast_tokenizer` builds the same cut of text
with the dictionary's ids, for each source kind:

- ``wordpiece`` (BERT ``vocab.txt``, official ``etc_base``): BERT's normaliser and pre-tokeniser, WordPiece; the
  five specials carry BERT's names (``[CLS] [PAD] [SEP] [UNK] [MASK]``, the dictionary's ``<s> <pad> </s> <unk>
  <mask>``); ``tokenizer(text)`` gives ``[CLS] ... [SEP]``;
- ``sentencepiece`` (official ``etc_large``, ``etc-prepare pretrain --tokenizer spm``): the ``.model`` file's
  own normaliser and pieces (unigram or BPE) through ``transformers``' SentencePiece converter, with the pieces
  renumbered; ``split_punctuation`` (official ``etc_large_split_punctuation``) pre-splits as BERT does;
- ``byte_level_bpe`` (Hugging Face RoBERTa ``vocab.json`` + ``merges.txt``) and ``gpt2_bpe`` (fairseq RoBERTa:
  GPT-2's ``encoder.json`` + ``vocab.bpe``, the dictionary spelling each piece as its GPT-2 id): byte-level BPE.

The last three give ``<s> ... </s>`` (fairseq's ``sentence_prediction`` layout). Special tokens written in
text are special tokens (Hugging Face's rule; ``tokenizer("a <mask> b")`` holds the mask id), which the
fairseq-side tokenizer leaves as characters; any other text is cut exactly as the source tokenizer cuts it
(``tests/test_hf_tokenization.py``).

A piece the source tokenizer can produce but the dictionary lacks (a dictionary counted from a corpus) has no
id: the fairseq-side tokenizer gives ``<unk>`` for it, while a Hugging Face model has no way to give two pieces
one id, so ``tokenizer.json`` leaves it out (text with it is cut into other pieces); :func:`fast_tokenizer`
reports how many.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from etc_fairseq.guards import load_json_file
from etc_fairseq.tokenization import BERT_SPECIALS_IN_FAIRSEQ, TokenizerFileError

logger = logging.getLogger(__name__)

__all__ = ["fast_tokenizer", "dictionary_symbols", "TOKENIZER_KINDS"]

TOKENIZER_KINDS = ("wordpiece", "sentencepiece", "byte_level_bpe", "gpt2_bpe")
#: fairseq's name of a special -> BERT's
_FAIRSEQ_TO_BERT = {fs: bert for bert, fs in BERT_SPECIALS_IN_FAIRSEQ.items()}
_FAIRSEQ_SPECIALS = {"bos_token": "<s>", "cls_token": "<s>", "eos_token": "</s>", "sep_token": "</s>",
                     "pad_token": "<pad>", "unk_token": "<unk>", "mask_token": "<mask>"}


def _read_text_lines(path: Path, what: str) -> List[str]:
    if not path.is_file():
        raise TokenizerFileError(f"{path}: missing ({what})")
    lines = path.read_text(encoding="utf-8").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def _merges(path: Path, vocab: Dict[str, int]) -> Tuple[List[Tuple[str, str]], int]:
    """(the merges of a BPE ``merges.txt`` / ``vocab.bpe`` whose parts and result the vocabulary holds, the
    number left out)."""
    kept, dropped = [], 0
    for line_no, line in enumerate(_read_text_lines(path, "the BPE merges"), 1):
        if line.startswith("#version") or not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2:
            raise TokenizerFileError(f"{path}:{line_no}: expected 'piece piece' (a BPE merge), got {line!r}")
        a, b = parts
        if a in vocab and b in vocab and a + b in vocab:
            kept.append((a, b))
        else:
            dropped += 1
    return kept, dropped


def _byte_level(vocab: Dict[str, int], merges: List[Tuple[str, str]], add_prefix_space: bool):
    from tokenizers import Tokenizer, decoders, pre_tokenizers, processors
    from tokenizers.models import BPE

    tok = Tokenizer(BPE(vocab, merges, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.RobertaProcessing(("</s>", vocab["</s>"]), ("<s>", vocab["<s>"]),
                                                      trim_offsets=True, add_prefix_space=add_prefix_space)
    return tok


def _sentencepiece(model_file: Path, symbols: Sequence[str], split_punctuation: bool):
    """The SentencePiece model with its pieces renumbered to ``symbols`` (dictionary order; a symbol the model
    lacks, e.g. a new ``<mask>``, becomes a control piece). Returns (tokenizer, pieces left out)."""
    from tokenizers import normalizers, pre_tokenizers, processors
    from transformers.convert_slow_tokenizer import SpmConverter, import_protobuf

    model_pb2 = import_protobuf()
    proto = model_pb2.ModelProto()
    try:
        proto.ParseFromString(model_file.read_bytes())
    except Exception as e:  # protobuf's DecodeError has no stable import path
        raise TokenizerFileError(f"{model_file}: not a SentencePiece model ({e})") from None
    if proto.trainer_spec.model_type not in (1, 2):
        raise TokenizerFileError(f"{model_file}: SentencePiece model type {proto.trainer_spec.model_type}; "
                                 "Hugging Face tokenizers read unigram (1) and BPE (2)")
    by_piece = {p.piece: p for p in proto.pieces}
    unknown = next(p.piece for p in proto.pieces if p.type == 2)
    renumbered = model_pb2.ModelProto()
    renumbered.CopyFrom(proto)
    del renumbered.pieces[:]
    for symbol in symbols:
        source = by_piece.get(unknown if symbol == "<unk>" else symbol)
        piece = renumbered.pieces.add()
        if source is not None:
            piece.CopyFrom(source)
        else:
            piece.piece, piece.score, piece.type = symbol, 0.0, 3  # a control piece: never cut from text
    renumbered.trainer_spec.unk_id = list(symbols).index("<unk>")
    kept = set(symbols) | {unknown}
    dropped = sum(1 for p in proto.pieces if p.piece not in kept)
    if proto.trainer_spec.model_type == 1:
        vocab = [(p.piece, p.score) for p in renumbered.pieces]
    else:
        vocab = {p.piece: i for i, p in enumerate(renumbered.pieces)}
    tok = SpmConverter.build_tokenizer_from_spm_proto(renumbered, vocab)
    if split_punctuation:
        # BERT's BasicTokenizer without lower-casing first (etc_fairseq.tokenization.bert_basic_split), then each
        # word as SentencePiece cuts a word: its own normaliser, one "▁" before it
        charsmap = proto.normalizer_spec.precompiled_charsmap
        tok.normalizer = normalizers.Sequence(
            [normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=False,
                                        lowercase=False)]
            + ([normalizers.Precompiled(charsmap)] if charsmap else []))
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.BertPreTokenizer(), pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")])
    index = {s: i for i, s in enumerate(symbols)}
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
        special_tokens=[("<s>", index["<s>"]), ("</s>", index["</s>"])])
    return tok, dropped


def fast_tokenizer(description: Dict, files_dir: Path, symbols: Sequence[str], where: str = "etc_tokenizer.json",
                   segments: bool = False):
    """A ``PreTrainedTokenizerFast`` that cuts text as the source tokenizer ``description`` says (an
    ``etc_tokenizer.json``'s content; file names relative to ``files_dir``) with the ids of ``symbols`` (the
    model's dictionary in id order: ``<s> <pad> </s> <unk>`` first, ``<mask>`` last).

    Args:
        segments: the model has segment embeddings: the tokenizer also returns ``token_type_ids``.
        where: names the description in errors.
    Returns:
        (the tokenizer, how many of the source tokenizer's pieces or merges the dictionary lacks: left out).
    Raises:
        TokenizerFileError: a missing or malformed file, an unknown kind, or a dictionary without the
            specials (one line naming the file and field).
    """
    from tokenizers.implementations import BertWordPieceTokenizer
    from transformers import PreTrainedTokenizerFast

    symbols = list(symbols)
    missing = [s for s in ("<s>", "<pad>", "</s>", "<unk>", "<mask>") if s not in symbols]
    if missing:
        raise TokenizerFileError(f"{where}: the model's dictionary has no {missing[0]!r}")
    kind = description.get("type")
    split = bool(description.get("split_punctuation", False))
    files_dir = Path(files_dir)
    specials = dict(_FAIRSEQ_SPECIALS)
    if kind == "wordpiece":
        pieces = [_FAIRSEQ_TO_BERT.get(s, s) for s in symbols]
        source = set(_read_text_lines(files_dir / description["vocab"], "the WordPiece vocabulary"))
        dropped = len(source - set(pieces) - set(BERT_SPECIALS_IN_FAIRSEQ))
        lowercase = bool(description.get("lowercase", True))
        tok = BertWordPieceTokenizer({p: i for i, p in enumerate(pieces)}, clean_text=True, handle_chinese_chars=True,
                                     strip_accents=lowercase, lowercase=lowercase)._tokenizer
        specials = {k: _FAIRSEQ_TO_BERT[v] for k, v in specials.items() if k not in ("bos_token", "eos_token")}
    elif kind == "sentencepiece":
        tok, dropped = _sentencepiece(files_dir / description["model"], symbols, split)
        split = False
    elif kind in ("byte_level_bpe", "gpt2_bpe"):
        if kind == "gpt2_bpe":
            encoder_file, merges_file = files_dir / description["encoder_json"], files_dir / description["vocab_bpe"]
        else:
            encoder_file, merges_file = files_dir / description["vocab"], files_dir / description["merges"]
        encoder = load_json_file(encoder_file, f"the byte-level BPE vocabulary {where} names")
        if not isinstance(encoder, dict):
            raise TokenizerFileError(f"{encoder_file}: expected a JSON object of piece -> id")
        if kind == "gpt2_bpe":  # dictionary symbols are GPT-2 ids in decimal
            piece_of_id = {i: p for p, i in encoder.items()}
            pieces = [piece_of_id.get(int(s), s) if s.isdigit() else s for s in symbols]
        else:
            pieces = symbols
        vocab = {p: i for i, p in enumerate(pieces)}
        if len(vocab) != len(pieces):
            dup = next(p for p in pieces if pieces.count(p) > 1)
            raise TokenizerFileError(f"{where}: the dictionary spells the piece {dup!r} twice")
        merges, dropped_merges = _merges(merges_file, vocab)
        dropped = len(set(encoder) - set(vocab)) + dropped_merges
        if split:
            raise TokenizerFileError(f"{where}: field 'split_punctuation' with byte-level BPE: no tokenizer.json "
                                     "form (only SentencePiece and WordPiece sources pre-split)")
        tok = _byte_level(vocab, merges, bool(description.get("add_prefix_space", False)))
    else:
        raise TokenizerFileError(f"{where}: field 'type' = {kind!r}; expected one of {list(TOKENIZER_KINDS)}")
    if split and kind == "wordpiece":
        split = False  # BERT's own pre-tokeniser already splits punctuation and CJK
    if tok.get_vocab_size(with_added_tokens=True) != len(symbols):
        raise TokenizerFileError(f"{where}: the tokenizer has {tok.get_vocab_size(with_added_tokens=True)} ids, "
                                 f"the model's dictionary {len(symbols)}")
    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if segments else [])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, model_input_names=names, **specials)
    if dropped:
        logger.warning("%s: %d pieces / merges of the source tokenizer are not in the model's dictionary: "
                       "tokenizer.json leaves them out (fairseq's tokenizer maps them to <unk>)", where, dropped)
    return fast, dropped


def dictionary_symbols(tokenizer) -> List[str]:
    """The model's dictionary in id order, fairseq's spelling (``dict.txt`` plus the four first symbols and
    ``<mask>``), from a tokenizer :func:`fast_tokenizer` made: BERT's special names become fairseq's."""
    vocab = tokenizer.get_vocab()
    symbols: List[Optional[str]] = [None] * len(vocab)
    for piece, i in vocab.items():
        if not 0 <= i < len(symbols) or symbols[i] is not None:
            raise TokenizerFileError(f"tokenizer.json: id {i} of {piece!r} is not one of 0..{len(vocab) - 1} once")
        symbols[i] = BERT_SPECIALS_IN_FAIRSEQ.get(piece, piece)
    return [s for s in symbols if s is not None]
