"""One word-piece tokenizer for every fine-tuning converter: text is split into *words* first (whitespace,
as in the official HotpotQA/WikiHop/NQ/OpenKP token lists), then each word is tokenized on its own. So
every word piece knows its word (``word_of_piece``), word-level gold indices (NQ, OpenKP) and answer spans
(HotpotQA) map to pieces exactly, and predictions map back to words, whose text is joined with spaces.

Two tokenizers, the same two that ``etc-prepare pretrain`` supports, so fine-tuning data matches a
pre-trained (or lifted) checkpoint's vocabulary:

- ``spm``: a sentencepiece model; every word is encoded as if preceded by a space (``▁`` prefix).
- ``gpt2``: GPT-2 / RoBERTa byte-level BPE; every word but the first of a text gets a leading space (how
  RoBERTa tokenized its pre-training text). Dictionary symbols are the GPT-2 ids as strings
  (fairseq's RoBERTa ``dict.txt``).

Ids come from the fairseq ``dict.txt`` (``--srcdict``); pieces missing from it become ``<unk>`` (counted).
"""
from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import List, Optional, Sequence, Tuple, Union

from etc_fairseq.prepare.documents import InputFormatError

PathLike = Union[str, Path]


@dataclass
class TokenizerStats:
    """Counts over everything a tokenizer encoded: words, pieces, pieces not in the dictionary."""

    words: int = 0
    pieces: int = 0
    unk: int = 0

    def __str__(self) -> str:
        return f"{self.words} words -> {self.pieces} pieces ({self.unk} <unk>)"


class WordPieceTokenizer:
    """Word-by-word tokenizer onto a fairseq dictionary. Build with :meth:`from_files` or :meth:`from_args`.

    Attributes:
        kind: ``spm`` or ``gpt2``.
        dictionary: the fairseq ``Dictionary``.
        dict_path: the ``dict.txt`` it was loaded from (what converters copy next to the data), or None.
        stats: running :class:`TokenizerStats`.
    """

    def __init__(self, kind: str, dictionary, sp=None, bpe=None, dict_path: Optional[PathLike] = None):
        if kind not in ("spm", "gpt2"):
            raise ValueError(f"tokenizer kind must be spm or gpt2, got {kind!r}")
        self.kind = kind
        self.dictionary = dictionary
        self.dict_path = None if dict_path is None else Path(dict_path)
        self._sp = sp
        self._bpe = bpe
        self.stats = TokenizerStats()
        self._cache = lru_cache(maxsize=200_000)(self._encode_word_uncached)

    # -- construction -------------------------------------------------------------------------------------
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
            FileNotFoundError / InputFormatError: missing or unreadable files (message names them);
            ValueError: neither or both tokenizers given.
        """
        from etc_fairseq.data.indexed import load_dictionary

        if (spm_model is None) == (gpt2_encoder_json is None and gpt2_vocab_bpe is None):
            raise ValueError("give either --spm-model or --gpt2-encoder-json and --gpt2-vocab-bpe (not both)")
        dictionary = load_dictionary(srcdict)
        if spm_model is not None:
            from etc_fairseq.prepare.spm import load_spm

            return cls("spm", dictionary, sp=load_spm(spm_model), dict_path=srcdict)
        if gpt2_encoder_json is None or gpt2_vocab_bpe is None:
            raise ValueError("GPT-2 BPE needs both --gpt2-encoder-json and --gpt2-vocab-bpe")
        from etc_fairseq.prepare.gpt2 import load_gpt2_bpe

        return cls("gpt2", dictionary, bpe=load_gpt2_bpe(gpt2_encoder_json, gpt2_vocab_bpe), dict_path=srcdict)

    @classmethod
    def from_pretrain_dir(cls, bin_dir: PathLike) -> "WordPieceTokenizer":
        """The tokenizer of an ``etc-prepare pretrain`` output (``DIR/bin``: ``pretrain.json`` + ``dict.txt``)."""
        from etc_fairseq.data.indexed import dictionary_path

        bin_dir = Path(bin_dir)
        info_path = bin_dir / "pretrain.json"
        try:
            info = json.loads(info_path.read_text(encoding="utf-8"))
            files = {k: bin_dir / v for k, v in info["tokenizer_files"].items()}
            kind = info["tokenizer"]
        except FileNotFoundError:
            raise FileNotFoundError(f"{info_path}: missing (not an etc-prepare pretrain bin/ directory)") from None
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
            raise InputFormatError(f"{info_path}: not a valid pretrain.json ({e!r})") from None
        if kind == "spm":
            return cls.from_files(dictionary_path(bin_dir), spm_model=files["spm_model"])
        return cls.from_files(
            dictionary_path(bin_dir), gpt2_encoder_json=files.get("gpt2_encoder_json"), gpt2_vocab_bpe=files.get("gpt2_vocab_bpe")
        )

    @staticmethod
    def add_arguments(p: argparse.ArgumentParser) -> None:
        """``--srcdict`` plus ``--spm-model`` or ``--gpt2-encoder-json/--gpt2-vocab-bpe``, or
        ``--pretrain-dir`` (take all of them from an ``etc-prepare pretrain`` output's ``bin/``)."""
        g = p.add_argument_group("tokenizer (must match the checkpoint you fine-tune)")
        g.add_argument("--pretrain-dir", type=Path, default=None, metavar="DIR",
                       help="the bin/ directory of `etc-prepare pretrain`: use its dict.txt and tokenizer")
        g.add_argument("--srcdict", type=Path, default=None, help="fairseq dict.txt of the model's vocabulary")
        g.add_argument("--spm-model", type=Path, default=None, help="sentencepiece .model")
        g.add_argument("--gpt2-encoder-json", type=Path, default=None, metavar="FILE", help="GPT-2's encoder.json")
        g.add_argument("--gpt2-vocab-bpe", type=Path, default=None, metavar="FILE", help="GPT-2's vocab.bpe")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "WordPieceTokenizer":
        """Build from the options of :meth:`add_arguments`."""
        if args.pretrain_dir is not None:
            if args.srcdict or args.spm_model or args.gpt2_encoder_json or args.gpt2_vocab_bpe:
                raise ValueError("--pretrain-dir already names the dictionary and tokenizer; drop the other options")
            return cls.from_pretrain_dir(args.pretrain_dir)
        if args.srcdict is None:
            raise ValueError("--srcdict (or --pretrain-dir) is required: ids must match the model's dictionary")
        return cls.from_files(args.srcdict, args.spm_model, args.gpt2_encoder_json, args.gpt2_vocab_bpe)

    # -- encoding -----------------------------------------------------------------------------------------
    def _encode_word_uncached(self, word: str, first: bool) -> Tuple[int, ...]:
        if self.kind == "spm":
            pieces = self._sp.encode(word, out_type=str)
            symbols = pieces
        else:
            symbols = [str(i) for i in self._bpe.encode(word if first else " " + word)]
        return tuple(self.dictionary.index(s) for s in symbols)

    def encode_word(self, word: str, first: bool = False) -> List[int]:
        """Dictionary ids of one word (no whitespace inside); ``first``: the word starts its text (GPT-2
        then encodes it without a leading space). An empty word gives ``[]``."""
        if not word:
            return []
        ids = list(self._cache(word, bool(first) and self.kind == "gpt2"))
        self.stats.words += 1
        self.stats.pieces += len(ids)
        self.stats.unk += sum(1 for i in ids if i == self.dictionary.unk_index)
        return ids

    def encode_words(self, words: Sequence[str], first_is_start: bool = True) -> Tuple[List[int], List[int]]:
        """Tokenize a word sequence.

        Args:
            words: the words (whitespace-free strings).
            first_is_start: ``words[0]`` begins a text (matters for GPT-2 only).
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
