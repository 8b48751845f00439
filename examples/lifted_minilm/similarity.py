"""A zero-shot baseline of nextsent for a sentence-embedding model: rank every sentence of a record by the
cosine similarity of its frozen mean-pooled embedding to the question's (all-MiniLM-L6-v2 was trained for
exactly this comparison), and score the top sentence as nextsent does (the answer: the sentence that
followed the question; also reported: how often the top sentence is the one the question followed).

The same with an ETC checkpoint (``--etc CKPT --etc-data DICT_DIR``, e.g. the lifted and continued model):
each text alone through the hub (``encode_documents([[text]])``: its pieces, a CLS and one SENTENCE global
token), embedded as the mean of its long outputs (``--etc-pool long``, sentence-transformers' pooling) or as
its SENTENCE token's output (``--etc-pool sentence``): does the lifted model still embed sentences as the
source did? ``--summary-check N``: whether the SENTENCE token summarises its sentence at all
(:func:`summary_token_check`).

    python examples/lifted_minilm/similarity.py --model HF_DIR --records DATA/valid.records.json --out sim.json
    python examples/lifted_minilm/similarity.py --etc RUN/pre/continued/checkpoint_last.pt \
        --etc-data RUN/pre/data/bin --records DATA/valid.records.json --out sim-etc.json
"""
from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path
from typing import Callable, Dict, Optional, Sequence


def _classify():
    spec = importlib.util.spec_from_file_location("lifted_minilm_classify", Path(__file__).with_name("classify.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def hf_embedder(model_dir: Path, max_pieces: int = 128) -> Callable[[Sequence[str]], "np.ndarray"]:
    """texts -> float32 [N, D]: a Hugging Face BERT directory's frozen mean-pooled embeddings."""
    classify = _classify()
    encoder = classify.load_encoder(model_dir)
    return lambda texts: classify.mean_pooled(encoder, texts, max_pieces)


def etc_embedder(checkpoint: Path, data: Path, pool: str = "long") -> Callable[[Sequence[str]], "np.ndarray"]:
    """texts -> float32 [N, D]: each text alone through an ETC checkpoint (module docstring); ``pool``:
    ``long`` (mean of the long outputs, padding excluded) or ``sentence`` (the SENTENCE token's output)."""
    import numpy as np
    import torch

    from etc_fairseq.models import EtcModel

    hub = EtcModel.from_pretrained(str(checkpoint.parent), checkpoint_file=checkpoint.name,
                                   data_name_or_path=str(Path(data).resolve()))
    hub.eval()
    pad = hub.task.source_dictionary.pad()

    def embed(texts):
        out = []
        with torch.no_grad():
            for i in range(0, len(texts), 32):
                batch = hub.encode_documents([[t] for t in texts[i:i + 32]])
                long, glob = hub.extract_features(batch)  # [b, L, D], [b, G, D]
                if pool == "long":
                    real = batch["src_tokens"].ne(pad).unsqueeze(-1).to(long.dtype)  # [b, L, 1]
                    out.append(((long * real).sum(1) / real.sum(1)).numpy())
                else:
                    out.append(glob[:, 1].numpy())  # global 0: CLS, 1: the sentence's token
        return np.concatenate(out)

    return embed


def summary_token_check(checkpoint: Path, data: Path, texts: Sequence[str]) -> Dict[str, object]:
    """Does a lifted model's SENTENCE global token summarise its sentence? Each text alone through the hub
    (as :func:`etc_embedder`); per layer output, the spread of the SENTENCE tokens across the texts (mean over
    dimensions of the standard deviation across texts) next to the long tokens' (of their per-text means);
    and how often a text's SENTENCE token is closest (cosine) to its own mean-pooled long outputs among all
    the texts' (percent; chance 100 / len(texts))."""
    import torch

    from etc_fairseq.models import EtcModel

    hub = EtcModel.from_pretrained(str(checkpoint.parent), checkpoint_file=checkpoint.name,
                                   data_name_or_path=str(Path(data).resolve()))
    hub.eval()
    batch = hub.encode_documents([[t] for t in texts])
    with torch.no_grad():
        longs, globs = hub.extract_features(batch, return_all_hiddens=True)
    real = batch["src_tokens"].ne(hub.task.source_dictionary.pad()).unsqueeze(-1).to(longs[-1].dtype)  # [N, L, 1]
    layers = []
    for long, glob in zip(longs, globs):
        pooled = (long * real).sum(1) / real.sum(1)  # [N, D]
        layers.append({"sentence_token_spread": glob[:, 1].std(0).mean().item(),
                       "mean_pooled_spread": pooled.std(0).mean().item()})
    sent = torch.nn.functional.normalize(globs[-1][:, 1], dim=-1)  # [N, D]
    own = torch.nn.functional.normalize(pooled, dim=-1)  # [N, D]
    hits = (sent @ own.T).argmax(1).eq(torch.arange(len(texts))).float().mean().item()
    return {"model": str(checkpoint), "texts": len(texts), "layers": layers,
            "own_mean_retrieval": 100 * hits, "chance": 100 / len(texts)}


def similarity_baseline(embed: Callable[[Sequence[str]], "np.ndarray"], records: Sequence[dict]) -> Dict[str, float]:
    """Accuracy (%) of the most similar sentence as the answer (``record["answer"]`` = [paragraph, sentence])
    and as the sentence before the gap (the answer's predecessor in its paragraph, where there is one), over
    ``records`` (etc-prepare nextsent's ``*.records.json``); ``embed``: texts -> float [N, D]. Ties cannot
    occur in practice (float cosines)."""
    import numpy as np

    answer = before = 0
    for r in records:
        where = [(p, s) for p, para in enumerate(r["paragraphs"]) for s in range(len(para["sentences"]))]
        texts = [r["question"]] + [r["paragraphs"][p]["sentences"][s] for p, s in where]
        e = embed(texts)  # [1 + sentences, D]
        e = e / np.linalg.norm(e, axis=1, keepdims=True)
        top = where[int(np.argmax(e[1:] @ e[0]))]
        p, s = r["answer"]
        answer += top == (p, s)
        before += s > 0 and top == (p, s - 1)
    n = max(len(records), 1)
    return {"records": len(records), "answer_accuracy": 100 * answer / n, "before_gap_accuracy": 100 * before / n}


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", type=Path, help="a Hugging Face BERT directory")
    src.add_argument("--etc", type=Path, help="an ETC checkpoint (fairseq-train's)")
    p.add_argument("--etc-data", type=Path, help="with --etc: the directory of its dict.txt (and pretrain.json)")
    p.add_argument("--etc-pool", choices=("long", "sentence"), default="long")
    p.add_argument("--records", type=Path, required=True, help="etc-prepare nextsent's valid.records.json")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--summary-check", type=int, default=0, metavar="N",
                   help="with --etc: instead, check whether the SENTENCE token summarises its sentence "
                   "(summary_token_check) on the first N sentences of the records")
    a = p.parse_args(argv)
    if a.etc is not None and a.etc_data is None:
        p.error("--etc needs --etc-data")
    if a.summary_check:
        if a.etc is None:
            p.error("--summary-check needs --etc")
        records = json.loads(a.records.read_text(encoding="utf-8"))
        texts = [t for r in records for para in r["paragraphs"] for t in para["sentences"]][: a.summary_check]
        res = summary_token_check(a.etc, a.etc_data, texts)
        a.out.write_text(json.dumps(res, indent=1) + "\n")
        spreads = ", ".join(f"{x['sentence_token_spread']:.4f} / {x['mean_pooled_spread']:.4f}" for x in res["layers"])
        print(f"{a.etc}: SENTENCE token / mean-pooled spread across {len(texts)} sentences, per layer output: {spreads}; "
              f"a SENTENCE token nearest its own sentence's mean: {res['own_mean_retrieval']:.1f} % (chance "
              f"{res['chance']:.1f} %)")
        return 0
    embed = hf_embedder(a.model) if a.model is not None else etc_embedder(a.etc, a.etc_data, a.etc_pool)
    res = dict(similarity_baseline(embed, json.loads(a.records.read_text(encoding="utf-8"))),
               model=str(a.model or a.etc), pool="long" if a.model is not None else a.etc_pool)
    a.out.write_text(json.dumps(res, indent=1) + "\n")
    print(f"{res['model']} ({res['pool']}): most similar sentence = answer {res['answer_accuracy']:.1f} %, = the "
          f"sentence before the gap {res['before_gap_accuracy']:.1f} % ({res['records']} records)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
