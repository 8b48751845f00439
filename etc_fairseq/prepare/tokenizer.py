"""One word-piece tokenizer for every fine-tuning converter: text is split into *words* first (whitespace,
as in the official HotpotQA/WikiHop/NQ/OpenKP token lists), then each word is tokenized on its own. So
every word piece knows its word (``word_of_piece``), word-level gold indices (NQ, OpenKP) and answer spans
(HotpotQA) map to pieces exactly, and predictions map back to words, whose text is joined with spaces.

Cutting text into pieces is :class:`etc_fairseq.tokenization.SourceTokenizer`'s job (one abstraction for
every vocabulary); this class adds the word-by-word rule, the fairseq dictionary ids, counts and the global
token ids. Three ways to choose the tokenizer, so fine-tuning data matches the checkpoint it fine-tunes:

- ``--from-model DIR``: an ``etc-lift`` output (``dict.txt`` + tokenizer files + ``etc_tokenizer.json``):
  the source model's own tokenizer (BERT WordPiece, SentencePiece, byte-level BPE or GPT-2 BPE) and the
  global token ids it was pretrained with (:attr:`WordPieceTokenizer.global_ids`; official ETC: sentence
  tokens are ``[unused0]``, its id 1);
- ``--pretrain-dir DIR``: the tokenizer and ``dict.txt`` of an ``etc-prepare pretrain`` output;
- ``--srcdict`` with ``--spm-model`` (every word encoded as if preceded by a space, ``▁`` prefix) or the
  GPT-2 files (byte-level BPE; dictionary symbols are GPT-2 ids as strings, fairseq RoBERTa's ``dict.txt``).

Byte-level BPE marks a word's leading space inside its first piece, so every word but the first of a text
is encoded with a leading space (how RoBERTa tokenized its pre-training text). Pieces missing from the
dictionary become ``<unk>`` (counted).
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

from etc_fairseq.errors import ConfigError, MissingFileError

PathLike = Union[str, Path]

#: source tokenizer kinds whose pieces carry the space before a word (see the module docstring)
_SPACE_IN_PIECE = ("byte_level_bpe", "gpt2_bpe")


@dataclass
class TokenizerStats:
    """Counts over everything a tokenizer encoded: words, pieces, pieces not in the dictionary."""

    words: int = 0
    pieces: int = 0
    unk: int = 0

    def __str__(self) -> str:
        return f"{self.words} words -> {self.pieces} pieces ({self.unk} <unk>)"


class WordPieceTokenizer:
    """Word-by-word tokenizer onto a fairseq dictionary. Build with :meth:`from_model`, :meth:`from_files`,
    :meth:`from_pretrain_dir` or :meth:`from_args`.

    Attributes:
        kind: ``spm`` / ``gpt2`` (given files) or the source tokenizer's kind (``wordpiece``,
            ``sentencepiece``, ``byte_level_bpe``, ``gpt2_bpe``) for :meth:`from_model`.
        dictionary: the fairseq ``Dictionary``.
        source: the :class:`~etc_fairseq.tokenization.SourceTokenizer` that cuts text into pieces.
        dict_path: the ``dict.txt`` it was loaded from (what converters copy next to the data), or None.
        global_ids: pretrained role (``sentence``, ``cpc_mask``, ...) -> dictionary id of the global token
            the source model was pretrained with; empty when the vocabulary has none (then every special
            global token is ``<s>``). Pass it to
            :func:`~etc_fairseq.structure.global_tokens.global_token_id` as ``role_ids``.
        model_dir: the :meth:`from_model` directory, or None.
        stats: running :class:`TokenizerStats`.
    """

    def __init__(self, kind: str, dictionary, source, dict_path: Optional[PathLike] = None,
                 global_ids: Optional[Dict[str, int]] = None, model_dir: Optional[PathLike] = None):
        self.kind = kind
        self.dictionary = dictionary
        self.source = source
        self.dict_path = None if dict_path is None else Path(dict_path)
        self.global_ids = dict(global_ids or {})
        self.model_dir = None if model_dir is None else Path(model_dir)
        self._space_in_piece = source.kind in _SPACE_IN_PIECE
        self.stats = TokenizerStats()
        self._cache = lru_cache(maxsize=200_000)(self._encode_word_uncached)

    # -- construction -------------------------------------------------------------------------------------
    @classmethod
    def from_model(cls, model_dir: PathLike) -> "WordPieceTokenizer":
        """The tokenizer of an ``etc-lift`` output directory: its ``etc_tokenizer.json``, tokenizer files
        and ``dict.txt``, and the global token ids of ``global_token_pieces``.

        Raises:
            MissingFileError / TokenizerFileError: a missing or malformed file (message names it), or a
                pretrained global token piece that is not in ``dict.txt``.
        """
        from etc_fairseq.data.indexed import dictionary_path, load_dictionary
        from etc_fairseq.tokenization import TOKENIZER_DESCRIPTION, TokenizerFileError, load_tokenizer

        model_dir = Path(model_dir)
        if not model_dir.is_dir():
            raise MissingFileError(f"{model_dir}: no such directory (--from-model takes an etc-lift output directory)")
        dict_file = dictionary_path(model_dir)
        if not dict_file.is_file():
            raise MissingFileError(f"{dict_file}: missing (etc-lift writes dict.txt next to the checkpoint)")
        source = load_tokenizer(model_dir)
        dictionary = load_dictionary(dict_file)
        global_ids = {}
        for role, piece in sorted(source.global_token_pieces.items()):
            gid = source.global_token_id(role, dictionary)
            if gid == dictionary.unk():
                raise TokenizerFileError(f"{model_dir / TOKENIZER_DESCRIPTION}: global_token_pieces.{role} = "
                                         f"{piece!r} is not in {dict_file}")
            global_ids[role] = gid
        return cls(source.kind, dictionary, source, dict_path=dict_file, global_ids=global_ids, model_dir=model_dir)

    @classmethod
    def from_files(
        cls,
        srcdict: PathLike,
        spm_model: Optional[PathLike] = None,
        gpt2_encoder_json: Optional[PathLike] = None,
        gpt2_vocab_bpe: Optional[PathLike] = None,
    ) -> "WordPieceTokenizer":
        """Load a dictionary plus either a sentencepiece model or the two GPT-2 BPE files.

        Raises:
            MissingFileError / InputFormatError: missing or unreadable files (message names them);
            ConfigError: neither or both tokenizers given.
        """
        from etc_fairseq.data.indexed import load_dictionary
        from etc_fairseq.tokenization import byte_level_bpe_tokenizer, sentencepiece_tokenizer

        if (spm_model is None) == (gpt2_encoder_json is None and gpt2_vocab_bpe is None):
            raise ConfigError("give either --spm-model or --gpt2-encoder-json and --gpt2-vocab-bpe (not both)")
        dictionary = load_dictionary(srcdict)
        if spm_model is not None:
            from etc_fairseq.prepare.spm import load_spm

            load_spm(spm_model)  # fails naming the file
            return cls("spm", dictionary, sentencepiece_tokenizer(spm_model), dict_path=srcdict)
        if gpt2_encoder_json is None or gpt2_vocab_bpe is None:
            raise ConfigError("GPT-2 BPE needs both --gpt2-encoder-json and --gpt2-vocab-bpe")
        from etc_fairseq.prepare.gpt2 import load_gpt2_bpe

        load_gpt2_bpe(gpt2_encoder_json, gpt2_vocab_bpe)  # fails naming the file
        source = byte_level_bpe_tokenizer(gpt2_encoder_json, gpt2_vocab_bpe, gpt2_ids=True)
        return cls("gpt2", dictionary, source, dict_path=srcdict)

    @classmethod
    def from_pretrain_dir(cls, bin_dir: PathLike) -> "WordPieceTokenizer":
        """The tokenizer of an ``etc-prepare pretrain`` output (``DIR/bin``: ``pretrain.json`` + ``dict.txt``;
        a corpus prepared ``--from-model`` gives that model's tokenizer and global token ids)."""
        from etc_fairseq.data.indexed import dictionary_path

        from etc_fairseq.data.pretraining_corpus import read_meta

        bin_dir = Path(bin_dir)
        info = read_meta(bin_dir)  # checked: names the file and field at fault
        files = {k: bin_dir / v for k, v in (info.get("tokenizer_files") or {}).items()}
        kind = info["tokenizer"]
        if "model_dir" in files:
            return cls.from_model(files["model_dir"])
        if kind == "spm":
            return cls.from_files(dictionary_path(bin_dir), spm_model=files["spm_model"])
        return cls.from_files(
            dictionary_path(bin_dir), gpt2_encoder_json=files.get("gpt2_encoder_json"), gpt2_vocab_bpe=files.get("gpt2_vocab_bpe")
        )

    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        """``--from-model DIR``, or ``--pretrain-dir DIR``, or ``--srcdict`` plus ``--spm-model`` or
        ``--gpt2-encoder-json/--gpt2-vocab-bpe`` (see the module docstring)."""
        g = p.add_argument_group("tokenizer (must match the checkpoint you fine-tune)")
        g.add_argument("--from-model", type=Path, default=None, metavar="DIR",
                       help="an etc-lift output directory: use the source model's tokenizer, dict.txt and "
                       "pretrained global token ids")
        g.add_argument("--pretrain-dir", type=Path, default=None, metavar="DIR",
                       help="the bin/ directory of `etc-prepare pretrain`: use its dict.txt and tokenizer")
        g.add_argument("--srcdict", type=Path, default=None, help="fairseq dict.txt of the model's vocabulary")
        g.add_argument("--spm-model", type=Path, default=None, help="sentencepiece .model")
        g.add_argument("--gpt2-encoder-json", type=Path, default=None, metavar="FILE", help="GPT-2's encoder.json")
        g.add_argument("--gpt2-vocab-bpe", type=Path, default=None, metavar="FILE", help="GPT-2's vocab.bpe")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "WordPieceTokenizer":
        """Build from the options of :meth:`add_arguments`."""
        files = args.srcdict or args.spm_model or args.gpt2_encoder_json or args.gpt2_vocab_bpe
        if getattr(args, "from_model", None) is not None:
            if args.pretrain_dir is not None or files:
                raise ConfigError("--from-model already names the dictionary and tokenizer; drop the other options")
            return cls.from_model(args.from_model)
        if args.pretrain_dir is not None:
            if files:
                raise ConfigError("--pretrain-dir already names the dictionary and tokenizer; drop the other options")
            return cls.from_pretrain_dir(args.pretrain_dir)
        if args.srcdict is None:
            raise ConfigError("--from-model, --pretrain-dir or --srcdict is required: ids must match the model's "
                             "dictionary")
        return cls.from_files(args.srcdict, args.spm_model, args.gpt2_encoder_json, args.gpt2_vocab_bpe)

    def describe(self) -> Dict[str, object]:
        """What ``prepare.json`` records about the tokenizer: its kind, the ``--from-model`` directory and
        the id of every special global token type (``global_token_ids``, type name -> id)."""
        from etc_fairseq.structure.global_tokens import global_token_table

        out: Dict[str, object] = {"tokenizer": self.kind,
                                  "global_token_ids": global_token_table(self.dictionary, self.global_ids)}
        if self.model_dir is not None:
            out["from_model"] = str(self.model_dir)
        return out

    # -- encoding -----------------------------------------------------------------------------------------
    def _encode_word_uncached(self, word: str, first: bool) -> Tuple[int, ...]:
        text = " " + word if self._space_in_piece and not first else word
        return tuple(self.dictionary.index(s) for s in self.source.tokenize(text).pieces)

    def encode_word(self, word: str, first: bool = False) -> List[int]:
        """Dictionary ids of one word (no whitespace inside); ``first``: the word starts its text (byte-level
        BPE then encodes it without a leading space). An empty word gives ``[]``."""
        if not word:
            return []
        ids = list(self._cache(word, bool(first) and self._space_in_piece))
        self.stats.words += 1
        self.stats.pieces += len(ids)
        self.stats.unk += sum(1 for i in ids if i == self.dictionary.unk_index)
        return ids

    def encode_words(self, words: Sequence[str], first_is_start: bool = True) -> Tuple[List[int], List[int]]:
        """Tokenize a word sequence.

        Args:
            words: the words (whitespace-free strings).
            first_is_start: ``words[0]`` begins a text (matters for byte-level BPE only).
        Returns:
            (ids, word_of_piece): int lists of equal length; ``word_of_piece[k]`` is the index in ``words``
            of piece ``k``. A word that yields no piece (e.g. only characters sentencepiece drops) has
            no pieces and does not occur in ``word_of_piece``.
        """
        ids: List[int] = []
        word_of_piece: List[int] = []
        for w_i, w in enumerate(words):
            p = self.encode_word(w, first=first_is_start and w_i == 0)
            ids.extend(p)
            word_of_piece.extend([w_i] * len(p))
        return ids, word_of_piece

    def encode_text(self, text: str) -> Tuple[List[int], List[str], List[int]]:
        """Whitespace-split ``text`` into words and tokenize them. Returns (ids, words, word_of_piece)."""
        words = text.split()
        ids, word_of_piece = self.encode_words(words)
        return ids, words, word_of_piece


def piece_span_of_words(word_of_piece: Sequence[int], first_word: int, last_word: int) -> Optional[Tuple[int, int]]:
    """Inclusive piece span covering words ``first_word..last_word`` (inclusive), or None if those words
    have no pieces. ``word_of_piece`` must be non-decreasing (as :meth:`WordPieceTokenizer.encode_words`
    returns it)."""
    import bisect

    lo = bisect.bisect_left(word_of_piece, first_word)
    hi = bisect.bisect_right(word_of_piece, last_word) - 1
    if lo > hi or lo >= len(word_of_piece):
        return None
    return lo, hi
