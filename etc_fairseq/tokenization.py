"""Tokenizers that match the model a checkpoint came from, with word <-> piece alignment.

A pretrained model only understands the pieces it was pretrained with, so the converters must cut text
exactly as its source did:

- BERT uncased WordPiece (``vocab.txt``; official ``etc_base_*`` and Hugging Face BERT): the ``tokenizers``
  library's BERT normaliser and pre-tokeniser (lower-casing, accent stripping, punctuation splitting);
- SentencePiece (``vocab_gpt_for_etc.model``; official ``etc_large``): the ``sentencepiece`` library;
- byte-level BPE (Hugging Face RoBERTa ``vocab.json`` + ``merges.txt``) and fairseq's GPT-2 BPE (GPT-2's
  ``encoder.json`` + ``vocab.bpe``, tokens written as their GPT-2 id, as fairseq's RoBERTa dict.txt lists them):
  the ``tokenizers`` library's byte-level BPE, which gives character offsets.

Any of them can first pre-split the text as BERT's BasicTokenizer does without lower-casing
(:func:`bert_basic_split`: control characters dropped, split at whitespace, around every punctuation
character and every CJK ideograph), which official ``etc_large_split_punctuation`` expects before its
SentencePiece model; ``etc_tokenizer.json`` says so with ``"split_punctuation": true``. Offsets still point
into the text as given.

Every tokenizer returns :class:`Pieces`: the piece strings (as the model's ``dict.txt`` spells them), the
character span of each piece in the text and, for :meth:`SourceTokenizer.tokenize_words`, the index of the
word each piece belongs to (what span-extraction converters need to map answers between words and pieces).
:func:`load_tokenizer` reads the ``etc_tokenizer.json`` that ``etc-lift`` writes next to a checkpoint.
"""

from __future__ import annotations

import json
import os
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

from etc_fairseq.errors import InputFormatError

PathLike = Union[str, os.PathLike]

TOKENIZER_DESCRIPTION = "etc_tokenizer.json"
#: the field of :data:`TOKENIZER_DESCRIPTION` listing, for each id of the source model's own vocabulary, the model's
#: token row (-1: none); written where the lift reorders the rows (Google's released ETC)
SOURCE_TOKEN_ROWS = "source_token_rows"
#: Fairseq's names for BERT's special tokens (etc-lift renames those rows; see etc_fairseq.lift.huggingface).
BERT_SPECIALS_IN_FAIRSEQ = {"[CLS]": "<s>", "[PAD]": "<pad>", "[SEP]": "</s>", "[UNK]": "<unk>", "[MASK]": "<mask>"}


class TokenizerFileError(InputFormatError):
    """A tokenizer description or file that cannot be used (one line naming the file and field)."""


@dataclass
class Pieces:
    """Tokenizer output. pieces: the piece strings (``dict.txt`` spelling); offsets: ``(start, end)``
    character span of each piece in the input text (joined words for :meth:`~SourceTokenizer.tokenize_words`);
    word_ids: the word index of each piece (None for :meth:`~SourceTokenizer.tokenize`)."""

    pieces: List[str]
    offsets: List[Tuple[int, int]]
    word_ids: Optional[List[int]] = None

    def word_starts(self) -> List[bool]:
        """True for the first piece of each word (needs ``word_ids``)."""
        if self.word_ids is None:
            raise ValueError("word_starts needs tokenize_words output")
        return [i == 0 or w != self.word_ids[i - 1] for i, w in enumerate(self.word_ids)]


# -- BERT's BasicTokenizer without lower-casing ---------------------------------------------------------

#: CJK ideograph blocks that BERT's BasicTokenizer puts spaces around (each ideograph is a word)
_CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
               (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


def _dropped(ch: str) -> bool:
    """NUL, U+FFFD and control/format characters (Unicode category C*) except tab, newline, return."""
    return ch in "\x00\ufffd" or (ch not in "\t\n\r" and unicodedata.category(ch).startswith("C"))


def _stands_alone(ch: str) -> bool:
    """A character that is a word of its own: punctuation (Unicode P*, or any printable ASCII that is not a
    letter or digit, e.g. ``$ + < = > ^ ` |  ~``) or a CJK ideograph."""
    cp = ord(ch)
    if 33 <= cp <= 126 and not ch.isalnum():
        return True
    if unicodedata.category(ch).startswith("P"):
        return True
    return any(lo <= cp <= hi for lo, hi in _CJK_RANGES)


def bert_basic_split(text: str) -> List[Tuple[str, List[int]]]:
    """Split ``text`` into words as BERT's BasicTokenizer does with ``do_lower_case=False``: drop control
    characters, split at whitespace, make every punctuation character and CJK ideograph a word of its own.
    No case or accent change (Hugging Face's version also NFC-composes each word; the official one, which
    ETC used, does not, and SentencePiece normalises either spelling the same way).

    Returns:
        per word: (the word, the index in ``text`` of each of its characters).
    """
    words: List[Tuple[str, List[int]]] = []
    chars: List[str] = []
    where: List[int] = []
    for i, ch in enumerate(text):
        if _dropped(ch):
            continue
        alone = _stands_alone(ch)
        if (alone or ch.isspace() or unicodedata.category(ch) == "Zs") and chars:
            words.append(("".join(chars), where))
            chars, where = [], []
        if alone:
            words.append((ch, [i]))
        elif not (ch.isspace() or unicodedata.category(ch) == "Zs"):
            chars.append(ch)
            where.append(i)
    if chars:
        words.append(("".join(chars), where))
    return words


def _split_then_encode(encode, text: str):
    """``encode`` applied to the words of :func:`bert_basic_split` joined by single spaces; offsets mapped
    back into ``text`` (a piece that covers only the space before a word gets the empty span at that word)."""
    words = bert_basic_split(text)
    joined = " ".join(w for w, _ in words)
    origin: List[int] = []  # per character of joined: its index in text (a separator: the next word's start)
    for k, (_, where) in enumerate(words):
        if k:
            origin.append(where[0])
        origin.extend(where)
    origin.append(len(text))
    pieces, offsets = encode(joined)
    spans = []
    for start, end in offsets:
        a, b = start, end
        while a < b and joined[a] == " ":
            a += 1
        while b > a and joined[b - 1] == " ":
            b -= 1
        spans.append((origin[a], origin[b - 1] + 1) if a < b else (origin[start], origin[start]))
    return pieces, spans


@dataclass
class SourceTokenizer:
    """One of the tokenizers of the module docstring.

    kind: ``wordpiece``, ``sentencepiece``, ``byte_level_bpe`` or ``gpt2_bpe``;
    global_token_pieces: role (``sentence``, ``question``, ...) -> the piece the source model was pretrained
    with for that global token (official ETC: ``[unused0]`` for sentences, i.e. its id 1);
    split_punctuation: pre-split text with :func:`bert_basic_split` first (official
    ``etc_large_split_punctuation``).
    """

    kind: str
    _encode: object = field(repr=False)
    global_token_pieces: Dict[str, str] = field(default_factory=dict)
    specials: Dict[str, str] = field(default_factory=dict)
    #: pieces -> text (None: :meth:`decode` joins the pieces by their word-start marks)
    _decode: object = field(default=None, repr=False)
    split_punctuation: bool = False
    #: the model's token row of each id of the source model's own vocabulary (:data:`SOURCE_TOKEN_ROWS`), or None
    source_token_rows: Optional[Tuple[int, ...]] = field(default=None, repr=False)
    #: the files it was read from (shown by ``repr``)
    files: Tuple[str, ...] = ()

    def __repr__(self) -> str:
        split = ", split_punctuation=True" if self.split_punctuation else ""
        return f"SourceTokenizer({self.kind!r}, {', '.join(repr(f) for f in self.files)}{split})"

    def tokenize(self, text: str) -> Pieces:
        """Cut ``text`` into pieces with character offsets."""
        if self.split_punctuation:
            pieces, offsets = _split_then_encode(self._encode, text)
        else:
            pieces, offsets = self._encode(text)
        return Pieces([self.specials.get(p, p) for p in pieces], offsets)

    def tokenize_words(self, words: Sequence[str]) -> Pieces:
        """Cut pre-split ``words`` (joined by single spaces) into pieces; ``word_ids[i]`` is the word of piece
        ``i``. A word the tokenizer drops entirely (e.g. only control characters) has no pieces."""
        starts, pos = [], 0
        for w in words:
            starts.append(pos)
            pos += len(w) + 1
        text = " ".join(words)
        out = self.tokenize(text)
        word_ids, j = [], 0
        for start, end in out.offsets:
            # a piece belongs to the last word starting at or before its first non-space character
            # (SentencePiece's "\u2581word" covers the space before the word)
            span = text[start:end]
            start += len(span) - len(span.lstrip())
            while j + 1 < len(starts) and starts[j + 1] <= start:
                j += 1
            word_ids.append(j)
        out.word_ids = word_ids
        return out

    def encode(self, text: str) -> List[str]:
        """The pieces of ``text`` (``dict.txt`` spelling): what ``EtcModel.from_pretrained``'s hub encodes with."""
        return self.tokenize(text).pieces

    def starts_word(self, piece: str) -> bool:
        """Whether ``piece`` begins a word wherever it stands: WordPiece words continue at ``##``;
        SentencePiece words start at ``\u2581``; byte-level BPE words at a leading-space byte (``\u0120``)."""
        if self.kind == "wordpiece":
            return not piece.startswith("##")
        if self.kind == "sentencepiece":
            return piece.startswith("\u2581")
        return self.decode([piece]).startswith(" ")

    def word_starts(self, pieces: Sequence[str]) -> List[bool]:
        """Per piece, whether it begins a word (:meth:`starts_word`); the first piece always does."""
        return [i == 0 or self.starts_word(p) for i, p in enumerate(pieces)]

    def decode(self, pieces: Sequence[str]) -> str:
        """Pieces back to text (special symbols are kept as they are spelled)."""
        if self._decode is not None:
            return self._decode(list(pieces))
        if self.kind == "wordpiece":
            return " ".join(pieces).replace(" ##", "")
        return "".join(pieces).replace("\u2581", " ").strip()

    def to_ids(self, pieces: Sequence[str], dictionary) -> List[int]:
        """Fairseq dictionary ids of ``pieces`` (unknown pieces: ``<unk>``)."""
        return [dictionary.index(p) for p in pieces]

    def global_token_id(self, role: str, dictionary) -> int:
        """The dictionary id of the global token the source model was pretrained with for ``role``.

        Raises:
            KeyError: the source model has no pretrained global token for ``role``.
        """
        if role not in self.global_token_pieces:
            raise KeyError(f"the source model has no pretrained {role!r} global token "
                           f"(known: {sorted(self.global_token_pieces)})")
        piece = self.global_token_pieces[role]
        return dictionary.index(self.specials.get(piece, piece))


def wordpiece_tokenizer(vocab_txt: PathLike, lowercase: bool = True, global_token_pieces=None) -> SourceTokenizer:
    """BERT WordPiece from ``vocab.txt`` (``lowercase``: BERT uncased, which also strips accents)."""
    from tokenizers import BertWordPieceTokenizer

    path = Path(vocab_txt)
    if not path.is_file():
        raise TokenizerFileError(f"{path}: WordPiece vocabulary not found")
    tok = BertWordPieceTokenizer(str(path), lowercase=lowercase, strip_accents=lowercase, clean_text=True,
                                 handle_chinese_chars=True)

    def encode(text: str):
        enc = tok.encode(text, add_special_tokens=False)
        return enc.tokens, list(enc.offsets)

    return SourceTokenizer("wordpiece", encode, dict(global_token_pieces or {}), dict(BERT_SPECIALS_IN_FAIRSEQ),
                           files=(str(path),))


def byte_level_bpe_tokenizer(vocab_json: PathLike, merges_txt: PathLike, add_prefix_space: bool = False,
                             gpt2_ids: bool = False, global_token_pieces=None) -> SourceTokenizer:
    """Byte-level BPE. ``gpt2_ids``: ``vocab_json`` is GPT-2's ``encoder.json`` and pieces are written as
    their GPT-2 id in decimal (fairseq RoBERTa's ``dict.txt``); else pieces are the vocabulary strings
    (Hugging Face RoBERTa's ``vocab.json``). ``add_prefix_space``: Hugging Face RoBERTa marks the first
    word like the others; fairseq's GPT-2 encoding does not."""
    from tokenizers import ByteLevelBPETokenizer

    for p in (vocab_json, merges_txt):
        if not Path(p).is_file():
            raise TokenizerFileError(f"{p}: byte-level BPE file not found")
    tok = ByteLevelBPETokenizer(str(vocab_json), str(merges_txt), add_prefix_space=add_prefix_space,
                                trim_offsets=True)
    vocab = json.loads(Path(vocab_json).read_text(encoding="utf-8")) if gpt2_ids else None

    def encode(text: str):
        enc = tok.encode(text)
        pieces = [str(vocab[t]) for t in enc.tokens] if vocab is not None else list(enc.tokens)
        return pieces, list(enc.offsets)

    def decode(pieces: List[str]) -> str:
        if vocab is not None:
            ids = [int(p) for p in pieces if p.isdigit()]
        else:
            ids = [i for i in (tok.token_to_id(p) for p in pieces) if i is not None]
        return tok.decode(ids, skip_special_tokens=False)

    return SourceTokenizer("gpt2_bpe" if gpt2_ids else "byte_level_bpe", encode, dict(global_token_pieces or {}),
                           _decode=decode, files=(str(vocab_json), str(merges_txt)))


def sentencepiece_tokenizer(model_file: PathLike, global_token_pieces=None) -> SourceTokenizer:
    """SentencePiece (official ``etc_large``'s ``vocab_gpt_for_etc.model``); offsets are character offsets."""
    import sentencepiece as spm

    path = Path(model_file)
    if not path.is_file():
        raise TokenizerFileError(f"{path}: SentencePiece model not found")
    try:
        sp = spm.SentencePieceProcessor(model_file=str(path))
    except (RuntimeError, OSError) as e:
        raise TokenizerFileError(f"{path}: not a SentencePiece model ({e})") from None

    def encode(text: str):
        proto = sp.encode(text, out_type="proto")
        # sentencepiece reports byte offsets into the UTF-8 input; map them to character offsets
        byte_to_char: List[int] = []
        for k, ch in enumerate(text):
            byte_to_char.extend([k] * len(ch.encode("utf-8")))
        byte_to_char.append(len(text))
        pieces = [p.piece for p in proto.pieces]
        offsets = [(byte_to_char[p.begin], byte_to_char[p.end]) for p in proto.pieces]
        return pieces, offsets

    return SourceTokenizer("sentencepiece", encode, dict(global_token_pieces or {}),
                           _decode=lambda pieces: sp.decode_pieces(pieces), files=(str(path),))


def load_tokenizer(model_dir: PathLike) -> SourceTokenizer:
    """The tokenizer described by ``model_dir/etc_tokenizer.json`` (written by ``etc-lift``).

    Raises:
        TokenizerFileError: the description or a file it names is missing or malformed.
    """
    model_dir = Path(model_dir)
    path = model_dir / TOKENIZER_DESCRIPTION
    if not path.is_file():
        raise TokenizerFileError(f"{path}: missing (etc-lift writes it next to the checkpoint)")
    try:
        desc = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise TokenizerFileError(f"{path}: not valid JSON ({e.msg}, line {e.lineno})") from None
    tok = _tokenizer_of(desc, model_dir, path)
    split = desc.get("split_punctuation", False)
    if not isinstance(split, bool):
        raise TokenizerFileError(f"{path}: field 'split_punctuation' = {split!r}; expected true or false")
    tok.split_punctuation = split
    tok.source_token_rows = _source_token_rows(desc, path)
    return tok


def _source_token_rows(desc: Dict, path: Path) -> Optional[Tuple[int, ...]]:
    rows = desc.get(SOURCE_TOKEN_ROWS)
    if rows is None:
        return None
    if not isinstance(rows, list) or not all(isinstance(r, int) and not isinstance(r, bool) and r >= -1 for r in rows):
        raise TokenizerFileError(f"{path}: field {SOURCE_TOKEN_ROWS!r}: expected a list of token rows (ints >= -1)")
    return tuple(rows)


def read_source_token_rows(model_dir: PathLike) -> Optional[Tuple[int, ...]]:
    """The :data:`SOURCE_TOKEN_ROWS` of ``model_dir/etc_tokenizer.json``: the model's token row of each id of the
    source model's vocabulary, or None when the directory has no description or the description no map (the
    model's rows are the source's ids).

    Raises:
        TokenizerFileError: the description is not valid JSON or the map is malformed (names the file).
    """
    path = Path(model_dir) / TOKENIZER_DESCRIPTION
    if not path.is_file():
        return None
    try:
        desc = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise TokenizerFileError(f"{path}: not valid JSON ({e})") from None
    return _source_token_rows(desc, path) if isinstance(desc, dict) else None


def _tokenizer_of(desc: Dict, model_dir: Path, path: Path) -> SourceTokenizer:
    kind = desc.get("type")
    pieces = desc.get("global_token_pieces", {})
    if kind == "wordpiece":
        return wordpiece_tokenizer(model_dir / desc["vocab"], bool(desc.get("lowercase", True)), pieces)
    if kind == "byte_level_bpe":
        return byte_level_bpe_tokenizer(model_dir / desc["vocab"], model_dir / desc["merges"],
                                        add_prefix_space=bool(desc.get("add_prefix_space", False)),
                                        global_token_pieces=pieces)
    if kind == "gpt2_bpe":
        encoder, merges = desc.get("encoder_json"), desc.get("vocab_bpe")
        if not encoder or not merges:
            raise TokenizerFileError(f"{path}: field 'encoder_json'/'vocab_bpe' missing: GPT-2 BPE needs GPT-2's "
                                     "encoder.json and vocab.bpe next to the checkpoint (etc_fairseq.prepare.gpt2)")
        return byte_level_bpe_tokenizer(model_dir / encoder, model_dir / merges, gpt2_ids=True,
                                        global_token_pieces=pieces)
    if kind == "sentencepiece":
        return sentencepiece_tokenizer(model_dir / desc["model"], pieces)
    raise TokenizerFileError(f"{path}: field 'type' = {kind!r}; expected wordpiece, sentencepiece, "
                             "byte_level_bpe or gpt2_bpe")
