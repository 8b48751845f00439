"""Reading the corpus that ``etc-prepare pretrain`` writes: documents as lists of sentence token arrays.

On-disk format (``DIR/bin``, see :mod:`etc_fairseq.prepare.pretrain`):

- ``dict.txt``, ``{split}.bin/.idx``: fairseq-preprocess output (mmap). **One item per sentence**, in
  document order, no separator items. fairseq appends an eos to every item; :class:`PretrainingCorpus`
  strips it, so a sentence here is its tokens only (ETC puts no eos between sentences; a task adds
  whatever special tokens it wants).
- ``{split}.docs.npy``: int64 ``[num_docs + 1]`` offsets: document ``i`` is items ``docs[i] .. docs[i+1]-1``.
- ``pretrain.json``: format version, tokenizer kind (``spm`` or ``gpt2``) and the tokenizer files' paths
  relative to ``bin/`` (``../spm.model``; ``../gpt2/encoder.json``, ``../gpt2/vocab.bpe``), counts.

Word starts (for whole-word masking): :func:`word_start_mask` says, per dictionary id, whether a token
begins a word (sentencepiece: the piece begins with "▁"; GPT-2: the token's bytes begin with a space;
special symbols: always). The first token of a sentence always begins a word
(:func:`sentence_word_starts`): GPT-2 sentences are encoded on their own, so their first word has no space.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from etc_fairseq.errors import InputFormatError, MissingFileError

PathLike = Union[str, Path]

FORMAT = "etc-pretrain-v1"
META_FILE = "pretrain.json"
#: the tokenizer kinds a corpus can have: ``etc-prepare pretrain --tokenizer spm|gpt2``, and the source
#: kinds ``--from-model`` adds (BERT WordPiece, Hugging Face byte-level BPE)
TOKENIZERS = ("spm", "gpt2", "wordpiece", "byte_level_bpe")
SPM_WORD_START = "\u2581"
GPT2_SPACE = "\u0120"

__all__ = ["FORMAT", "META_FILE", "PretrainingCorpus", "word_start_mask", "sentence_word_starts", "docs_path"]


def docs_path(bin_dir: PathLike, split: str) -> Path:
    """``bin_dir/{split}.docs.npy``, the document offsets of a split."""
    return Path(bin_dir) / f"{split}.docs.npy"


def word_start_mask(dictionary, tokenizer_kind: str, gpt2_encoder_json: Optional[PathLike] = None) -> np.ndarray:
    """Per dictionary id, whether that token begins a word.

    Args:
        dictionary: a ``fairseq.data.Dictionary`` (pass it after adding ``<mask>`` if the task adds one).
        tokenizer_kind: ``"spm"`` (symbols are sentencepiece pieces; a word starts at a piece beginning with
            "▁"), ``"gpt2"`` (symbols are GPT-2 ids in decimal; a word starts at a token whose text
            begins with a space), ``"wordpiece"`` (a word continues at a piece beginning with "##") or
            ``"byte_level_bpe"`` (symbols are byte-level BPE strings; a word starts at one beginning with "Ġ").
        gpt2_encoder_json: GPT-2's ``encoder.json`` (required for ``gpt2``).
    Returns:
        bool ``[len(dictionary)]``. The first ``dictionary.nspecial`` symbols, fairseq's ``madeupword``
        padding, symbols the tokenizer does not know (``<mask>``, ...) count as word starts, so masking
        never glues them to a neighbouring word.
    Raises:
        ValueError: unknown tokenizer kind, or ``gpt2`` without ``gpt2_encoder_json``.
    """
    if tokenizer_kind not in TOKENIZERS:
        raise ValueError(f"tokenizer_kind must be one of {TOKENIZERS}, got {tokenizer_kind!r}")
    decoder: Dict[int, str] = {}
    if tokenizer_kind == "gpt2":
        if gpt2_encoder_json is None:
            raise ValueError("word_start_mask for gpt2 needs gpt2_encoder_json (GPT-2's encoder.json)")
        decoder = load_gpt2_decoder(gpt2_encoder_json)
    n = len(dictionary)
    mask = np.ones(n, dtype=bool)
    for i in range(dictionary.nspecial, n):
        sym = dictionary[i]
        if sym.startswith("madeupword"):
            continue
        if tokenizer_kind == "spm":
            if not (sym.startswith("<") and sym.endswith(">")):
                mask[i] = sym.startswith(SPM_WORD_START)
        elif tokenizer_kind == "wordpiece":
            mask[i] = not sym.startswith("##")
        elif tokenizer_kind == "byte_level_bpe":
            if not (sym.startswith("<") and sym.endswith(">")):
                mask[i] = sym.startswith(GPT2_SPACE)
        else:
            if sym.isdigit() and int(sym) in decoder:
                mask[i] = decoder[int(sym)].startswith(GPT2_SPACE)
    return mask


def load_gpt2_decoder(encoder_json: PathLike) -> Dict[int, str]:
    """GPT-2 id -> token string (in GPT-2's byte-to-unicode alphabet, where "Ġ" is a space), from GPT-2's
    ``encoder.json`` (InputFormatError naming the file when it is not a JSON object ``{token: id}``)."""
    from etc_fairseq.guards import load_json_file

    encoder = load_json_file(encoder_json, "GPT-2's encoder.json")
    if not isinstance(encoder, dict) or not all(isinstance(i, int) for i in encoder.values()):
        raise InputFormatError(f"{encoder_json}: expected GPT-2's encoder.json, a JSON object {{token: id}}")
    return {int(i): tok for tok, i in encoder.items()}


def sentence_word_starts(tokens: Sequence[int], mask: np.ndarray) -> np.ndarray:
    """Per token of one sentence, whether it begins a word: ``mask[token]``, and always for the first token.

    Args:
        tokens: the sentence's dictionary ids (no eos).
        mask: :func:`word_start_mask`'s output.
    Returns:
        bool ``[len(tokens)]``.
    """
    tokens = np.asarray(tokens, dtype=np.int64)
    out = mask[tokens].copy() if len(tokens) else np.zeros(0, dtype=bool)
    if len(out):
        out[0] = True
    return out


def read_meta(bin_dir: PathLike) -> dict:
    """``bin_dir/pretrain.json``, checked (MissingFileError / InputFormatError naming the file and field
    when it is missing or not this format)."""
    from etc_fairseq.guards import load_json_file

    path = Path(bin_dir) / META_FILE
    if not path.is_file():
        raise MissingFileError(f"{path}: no such file; is {bin_dir} the bin/ directory of `etc-prepare pretrain`?")
    meta = load_json_file(path, "the pretrain.json of `etc-prepare pretrain`")
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise InputFormatError(f"{path}: field 'format': {meta.get('format') if isinstance(meta, dict) else meta!r}, "
                               f"expected {FORMAT!r}")
    if meta.get("tokenizer") not in TOKENIZERS:
        raise InputFormatError(f"{path}: field 'tokenizer': expected one of {list(TOKENIZERS)}, got {meta.get('tokenizer')!r}")
    files = meta.get("tokenizer_files", {})
    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()) \
            or (meta["tokenizer"] == "gpt2" and "gpt2_encoder_json" not in files):
        raise InputFormatError(f"{path}: field 'tokenizer_files': expected {{name: relative path}} (with "
                               f"gpt2_encoder_json for the gpt2 tokenizer), got {files!r:.80}")
    return meta


class PretrainingCorpus:
    """One split of a prepared pre-training corpus (see the module docstring for the files).

    Attributes:
        bin_dir: the directory; split: the split name.
        dictionary: the fairseq ``Dictionary`` (``bin_dir/dict.txt``).
        tokenizer: ``"spm"`` or ``"gpt2"``.
        tokenizer_files: name -> absolute path of the tokenizer's files (``spm_model``; ``gpt2_encoder_json``,
            ``gpt2_vocab_bpe``).
        word_start_mask: :func:`word_start_mask` over ``dictionary``.
        doc_offsets: int64 ``[num_docs + 1]`` item offsets of the documents.
        sentence_sizes: int64 ``[num_sentences]`` tokens per sentence (eos not counted).
    """

    def __init__(self, bin_dir: PathLike, split: str, dictionary=None):
        """Prefer :meth:`load`. Args: as :meth:`load`."""
        from etc_fairseq.data.indexed import dictionary_path, load_dictionary, load_split

        self.bin_dir = Path(bin_dir)
        self.split = split
        self.meta = read_meta(self.bin_dir)
        self.tokenizer = self.meta["tokenizer"]
        self.tokenizer_files = {k: (self.bin_dir / v).resolve() for k, v in self.meta.get("tokenizer_files", {}).items()}
        self.dictionary = dictionary if dictionary is not None else load_dictionary(dictionary_path(self.bin_dir))
        from etc_fairseq.data.indexed import check_value_range, verify_indexed_dataset

        verify_indexed_dataset(self.bin_dir / split)  # truncated/corrupt .bin/.idx: a clear error now, not mid-epoch
        check_value_range(self.bin_dir / split, 0, len(self.dictionary),
                          f"token ids of {dictionary_path(self.bin_dir)} ({len(self.dictionary)} entries)")
        self._ds = load_split(self.bin_dir, split, self.dictionary)  # holds the mmap open (see load_split)
        path = docs_path(self.bin_dir, split)
        if not path.is_file():
            raise MissingFileError(f"{path}: no such document index")
        try:
            offsets = np.load(path, allow_pickle=False)
        except (ValueError, OSError, EOFError) as e:
            if isinstance(e, OSError) and e.errno is not None:  # cannot be read at all (permissions, I/O)
                raise
            raise InputFormatError(f"{path}: not a readable .npy array of document offsets ({e})") from None
        n_items = len(self._ds)
        if offsets.ndim != 1 or offsets.dtype.kind not in "iu" or len(offsets) < 1 or offsets[0] != 0 \
                or offsets[-1] != n_items or np.any(np.diff(offsets) <= 0):
            raise InputFormatError(
                f"{path}: not document offsets for {n_items} sentences (must start at 0, end at {n_items}, and increase)"
            )
        self.doc_offsets = offsets.astype(np.int64)
        self.sentence_sizes = np.asarray(self._ds.sizes, dtype=np.int64) - 1  # fairseq's eos
        self.word_start_mask = word_start_mask(
            self.dictionary, self.tokenizer, self.tokenizer_files.get("gpt2_encoder_json")
        )

    @classmethod
    def load(cls, bin_dir: PathLike, split: str, dictionary=None) -> "PretrainingCorpus":
        """Open ``bin_dir``'s ``split`` (``train``/``valid``).

        Args:
            bin_dir: ``DIR/bin`` of an ``etc-prepare pretrain`` run.
            split: split name.
            dictionary: a dictionary to use instead of ``bin_dir/dict.txt`` (e.g. one with ``<mask>`` added).
        Returns:
            the corpus.
        Raises:
            MissingFileError / InputFormatError: missing or inconsistent files (messages name them).
        """
        return cls(bin_dir, split, dictionary)

    @property
    def num_docs(self) -> int:
        """Number of documents."""
        return len(self.doc_offsets) - 1

    @property
    def num_sentences(self) -> int:
        """Number of sentences (binarized items)."""
        return len(self.sentence_sizes)

    def __len__(self) -> int:
        return self.num_docs

    def doc_range(self, i: int) -> Tuple[int, int]:
        """Item (sentence) indices ``start, end`` of document ``i`` (end exclusive)."""
        if not 0 <= i < self.num_docs:
            raise IndexError(f"document {i} out of range [0, {self.num_docs})")
        return int(self.doc_offsets[i]), int(self.doc_offsets[i + 1])

    def doc_sentence_lengths(self, i: int) -> np.ndarray:
        """Tokens per sentence of document ``i`` (int64, eos not counted)."""
        a, b = self.doc_range(i)
        return self.sentence_sizes[a:b]

    def all_doc_sentence_lengths(self) -> List[np.ndarray]:
        """:meth:`doc_sentence_lengths` of every document (views), for :func:`~etc_fairseq.data.packing.plan_examples`."""
        return np.split(self.sentence_sizes, self.doc_offsets[1:-1])

    def sentence(self, j: int) -> np.ndarray:
        """Tokens of sentence (item) ``j``: int64 dictionary ids, without fairseq's eos."""
        t = self._ds[j]
        return t[:-1].numpy().astype(np.int64, copy=False)

    def document(self, i: int) -> List[np.ndarray]:
        """Document ``i`` as a list of sentence token arrays (see :meth:`sentence`)."""
        a, b = self.doc_range(i)
        return [self.sentence(j) for j in range(a, b)]

    def word_starts(self, tokens: Sequence[int]) -> np.ndarray:
        """:func:`sentence_word_starts` of one sentence with this corpus's mask."""
        return sentence_word_starts(tokens, self.word_start_mask)
