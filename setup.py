"""etc-fairseq: ETC (Extended Transformer Construction) as a fairseq plugin.

fairseq itself is not in install_requires: every fairseq 0.12 release declares torchaudio, which pulls
a CUDA torch. Install it with --no-deps (``scripts/setup.sh`` does this: ve-fairseq 0.12.3 on
Python >= 3.11, fairseq 0.12.2 below); its real runtime dependencies are listed here.
"""
from setuptools import find_packages, setup

FAIRSEQ_RUNTIME_DEPS = [
    "cffi",
    "cython",
    "hydra-core>=1.0.7,<1.4",
    "omegaconf>=2.0.6,<2.4",
    "numpy>=1.21",
    "regex",
    "sacrebleu>=1.4.12",
    "tqdm",
    "bitarray",
    "scikit-learn",
    "packaging",
]

setup(
    name="etc-fairseq",
    version="0.1.0",
    description="ETC (Extended Transformer Construction) global-local attention encoders for fairseq",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.8",
    packages=find_packages(include=["etc_fairseq", "etc_fairseq.*"]),
    install_requires=[
        "torch>=2.1",
        "sentencepiece>=0.1.99",
        "mwparserfromhell>=0.6",
        # etc-show (PNG pictures of an example's structure)
        "matplotlib>=3.5",
        # etc-prepare pretrain's sentence splitter (etc_fairseq/prepare/sentences.py); wheels for CPython >= 3.10.
        "sentencex>=1.0.32; python_version >= '3.10'",
        # checkpoints as safetensors + JSON config (the fairseq-free core), and Hugging Face weights
        "safetensors>=0.4",
        # fast tokenizers (BERT WordPiece, byte-level BPE) with offsets and word ids for the converters
        "tokenizers>=0.15",
        # fairseq's --tensorboard-logdir
        "tensorboardX",
    ]
    + FAIRSEQ_RUNTIME_DEPS,
    extras_require={
        # transformers: random HF models built in tests, and etc_fairseq.hf; accelerate: transformers.Trainer
        "test": ["pytest>=7", "hypothesis>=6", "transformers>=5.0", "accelerate>=1.1"],
        # etc_fairseq.hf: the Hugging Face adapter (AutoModel, Trainer, pipelines; docs/huggingface.md)
        "hf": ["transformers>=5.0", "accelerate>=1.1"],
        # Only for benchmarks/layer_vs_peers.py (HF Longformer / BigBird layers as peers).
        "bench": ["transformers"],
    },
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
