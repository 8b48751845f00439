"""etc-fairseq: ETC (Extended Transformer Construction) global-local attention encoders for PyTorch and fairseq.

``pip install etc-fairseq`` gives the plain-PyTorch core (``etc_fairseq.attention`` / ``structure`` /
``encoder``). The extras add the rest; ``scripts/setup.sh`` installs them all:

- ``fairseq``: what fairseq 0.12 needs at run time. fairseq itself is not declared: every fairseq 0.12 release
  declares torchaudio, which pulls a CUDA torch. Install it with ``--no-deps`` (``ve-fairseq==0.12.3`` on
  Python >= 3.11, ``fairseq==0.12.2`` below); docs/installing.md.
- ``prepare``: ``etc-prepare`` (sentencepiece, the Wikipedia markup parser, the sentence splitter, progress bars)
- ``show``: ``etc-show`` pictures and training curves (matplotlib)
- ``hf``: ``etc_fairseq.hf``, ETC as Hugging Face ``transformers`` classes (AutoModel, the Trainer, pipelines);
  docs/huggingface.md
- ``bench``: the benchmarks' peers (Hugging Face Longformer, BigBird, ModernBERT layers)
- ``test``: the test suite
"""
from setuptools import find_packages, setup

FAIRSEQ_RUNTIME_DEPS = [
    "cffi",
    "cython",
    "hydra-core>=1.0.7,<1.4",
    "omegaconf>=2.0.6,<2.4",
    "regex",
    "sacrebleu>=1.4.12",
    "tqdm",
    "bitarray",
    "scikit-learn",
    "packaging",
    "tensorboardX",  # fairseq's --tensorboard-logdir
]

EXTRAS = {
    "fairseq": FAIRSEQ_RUNTIME_DEPS,
    "prepare": [
        "sentencepiece>=0.1.99",
        "mwparserfromhell>=0.6",
        # the sentence splitter of etc-prepare pretrain (etc_fairseq/prepare/sentences.py); wheels for CPython >= 3.10
        "sentencex>=1.0.32; python_version >= '3.10'",
        "tqdm",
    ],
    "show": ["matplotlib>=3.5"],
    # transformers 5.24: the version etc_fairseq.hf is tested with; accelerate: transformers.Trainer
    "hf": ["transformers>=5.24", "accelerate>=1.1"],
    "bench": ["transformers"],
    # transformers: random HF models, and etc_fairseq.hf's tests (with accelerate, for the Trainer);
    # pytest-xdist: scripts/test.sh runs the suite in two worker processes
    "test": ["pytest>=7", "pytest-xdist>=3.5", "hypothesis>=6", "transformers>=5.24", "accelerate>=1.1",
             "import-linter>=2.1"],
}
EXTRAS["all"] = sorted({dep for deps in EXTRAS.values() for dep in deps})

setup(
    name="etc-fairseq",
    version="0.1.0",
    description="ETC (Extended Transformer Construction) global-local attention encoders for PyTorch and fairseq",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.8",
    packages=find_packages(include=["etc_fairseq", "etc_fairseq.*"]),
    install_requires=[
        "torch>=2.1",
        "numpy>=1.21",
        # checkpoints as safetensors + JSON config (the core), and Hugging Face weights
        "safetensors>=0.4",
        # fast tokenizers (BERT WordPiece, byte-level BPE) with offsets and word ids
        "tokenizers>=0.15",
    ],
    extras_require=EXTRAS,
    entry_points={
        "console_scripts": [
            "etc-prepare = etc_fairseq.cli.prepare:main",
            "etc-lift = etc_fairseq.cli.lift:main",
            "etc-predict = etc_fairseq.cli.predict:main",
            "etc-evaluate = etc_fairseq.cli.evaluate:main",
            "etc-show = etc_fairseq.cli.show:main",
        ],
    },
)
