"""A zero-shot baseline of nextsent for a sentence-embedding model: rank every sentence of a record by the
cosine similarity of its frozen mean-pooled embedding to the question's (all-MiniLM-L6-v2 was trained for
exactly this comparison), and score the top sentence as nextsent does (the answer: the sentence that
followed the question; also reported: how often the top sentence is the one the question followed).

The same with an ETC checkpoint (``--etc CKPT --etc-data DICT_DIR``, e.g. the lifted and continued model):
each text alone through the hub (``encode_documents([[text]])``: its pieces, a CLS and one SENTENCE global
token), embedded as the mean of its long outputs (``--etc-pool long``, sentence-transformers' pooling) or as
its SENTENCE token's output (``--etc-pool sentence``): does the lifted model still embed sentences as the
source did? ``--summary-check N``: whether the SENTENCE token summarises its sentence at all
(:func:`summary_token_check`); ``--model HF_DIR --source-check N``: whether the source model's own
``[CLS]`` and ``[SEP]`` read their sentence (:func:`source_token_check`).

    python examples/lifted_minilm/similarity.py --model HF_DIR --records DATA/valid.records.json --out sim.json \
        [--predictions sim-scores.json]
    python examples/lifted_minilm/similarity.py --etc RUN/pre/continued/checkpoint_last.pt \
        --etc-data RUN/pre/data/bin --records DATA/valid.records.json --out sim-etc.json
"""
from __future__ import annotations

import argparse
import contextlib
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


@contextlib.contextmanager
def _recorded_attention(hub):
    """Run ``hub``'s layers on the dense reference kernel (the one that forms the attention probabilities)
    and record each softmax it takes: yields the list they are appended to, float ``[batch, heads, q_len,
    k_len]`` each (per layer, the long queries' then the global queries')."""
    import etc_fairseq.attention.dense as dense

    backends = [(m, m.backend) for m in hub.modules() if isinstance(getattr(m, "backend", None), str)]
    seen, softmax = [], dense.plain_masked_softmax

    def record(logits, mask):
        probs = softmax(logits, mask)
        seen.append(probs)
        return probs

    dense.plain_masked_softmax = record
    for m, _ in backends:
        m.backend = "dense"
    try:
        yield seen
    finally:
        dense.plain_masked_softmax = softmax
        for m, backend in backends:
            m.backend = backend


@contextlib.contextmanager
def _global_side_reads(keys: str):
    """A what-if for :func:`summary_token_check`: the global queries read ``all`` global keys (the model as
    trained), only their own token (``self``) or ``none`` (then only the long tokens g2l allows: under hard
    g2l, their own sentence), by narrowing the g2g mask the dense path builds
    (:func:`etc_fairseq.structure.builders.g2g_allowed`) while the context lasts."""
    import etc_fairseq.structure.builders as builders

    allowed = builders.g2g_allowed
    narrow = {"all": None, "self": lambda g, h: g == h, "none": lambda g, h: g < 0}[keys]
    if narrow is not None:
        builders.g2g_allowed = lambda ids, b, g, h: allowed(ids, b, g, h) & narrow(g, h)
    try:
        yield
    finally:
        builders.g2g_allowed = allowed


def summary_token_check(checkpoint: Path, data: Path, texts: Sequence[str], per_document: int = 1,
                        g2g: str = "all") -> Dict[str, object]:
    """Does a lifted model's SENTENCE global token summarise its sentence? The texts through the hub as
    documents of ``per_document`` sentences each (:meth:`encode_documents`: a CLS and one SENTENCE global
    token per sentence; 1: each text alone, as :func:`etc_embedder`). Per layer output: the spread of the
    SENTENCE tokens across the sentences (mean over dimensions of the standard deviation across sentences)
    next to the spread of the sentences' mean long outputs; how often a SENTENCE token is nearest (cosine,
    both sides centred across the sentences) its own sentence's mean long output among all the sentences'
    (percent; chance 100 / sentences); and per layer, the share of the SENTENCE tokens' attention that goes
    to global keys (the rest reads their own sentence's long tokens under hard g2l). ``g2g``: which global
    keys the global queries read (:func:`_global_side_reads`; ``all``: the model as it is)."""
    import torch

    from etc_fairseq.models import EtcModel

    hub = EtcModel.from_pretrained(str(checkpoint.parent), checkpoint_file=checkpoint.name,
                                   data_name_or_path=str(Path(data).resolve()))
    hub.eval()
    docs = [list(texts[i:i + per_document]) for i in range(0, len(texts), per_document)]
    batch = hub.encode_documents(docs)
    with torch.no_grad(), _global_side_reads(g2g), _recorded_attention(hub) as probs:
        longs, globs = hub.extract_features(batch, return_all_hiddens=True)
    segment = batch["structure"]["long_segment"]  # int64 [docs, L]: global token j's sentence is segment j
    rows = [(d, j + 1) for d, doc in enumerate(docs) for j in range(len(doc))]  # (document, its SENTENCE token)
    d_idx = torch.tensor([d for d, _ in rows])
    g_idx = torch.tensor([g for _, g in rows])
    own = torch.stack([segment[d].eq(g) for d, g in rows]).unsqueeze(-1).float()  # [N, L, 1]
    n_long, n_global = longs[0].shape[1], globs[0].shape[1]
    shares = [p[d_idx, :, g_idx, :n_global].sum(-1).mean().item()  # p: [docs, heads, G, G + L]
              for p in probs if p.shape[-2:] == (n_global, n_global + n_long)]
    layers = []
    for long, glob in zip(longs, globs):
        sent = glob[d_idx, g_idx]  # [N, D]
        pooled = (long[d_idx] * own).sum(1) / own.sum(1)  # [N, D]
        a = torch.nn.functional.normalize(sent - sent.mean(0), dim=-1)
        b = torch.nn.functional.normalize(pooled - pooled.mean(0), dim=-1)
        hits = (a @ b.T).argmax(1).eq(torch.arange(len(rows))).float().mean().item()
        layers.append({"sentence_token_spread": sent.std(0).mean().item(),
                       "mean_pooled_spread": pooled.std(0).mean().item(), "own_mean_retrieval": 100 * hits})
    for layer, share in zip(layers[1:], shares):
        layer["attention_on_globals"] = share
    return {"model": str(checkpoint), "texts": len(rows), "per_document": per_document, "g2g": g2g, "layers": layers,
            "chance": 100 / len(rows)}


def source_token_check(model_dir: Path, texts: Sequence[str], max_pieces: int = 128) -> Dict[str, object]:
    """Which of the source model's own tokens reads its sentence? Each text alone through a Hugging Face BERT
    (``[CLS] text [SEP]``); per layer output, the spread across the texts (mean over dimensions of the standard
    deviation) of the ``[CLS]`` output, of the ``[SEP]`` output and of the mean of all outputs (the pieces
    sentence-transformers pools). A token whose output hardly differs from one text to the next reads almost
    nothing of it; a global token lifted from that token's embedding starts the same way."""
    import torch

    tok, model = _classify().load_encoder(model_dir)
    enc = tok(list(texts), padding=True, truncation=True, max_length=max_pieces, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**enc, output_hidden_states=True).hidden_states  # per layer float [N, T, D]
    real = enc["attention_mask"].unsqueeze(-1).float()  # [N, T, 1]
    sep = enc["attention_mask"].sum(1) - 1  # int64 [N]: the [SEP] position of each text
    rows = torch.arange(len(texts))
    layers = [{"cls_spread": h[:, 0].std(0).mean().item(), "sep_spread": h[rows, sep].std(0).mean().item(),
               "mean_pooled_spread": ((h * real).sum(1) / real.sum(1)).std(0).mean().item()} for h in hidden]
    return {"model": str(model_dir), "texts": len(texts), "layers": layers}


def similarity_baseline(embed: Callable[[Sequence[str]], "np.ndarray"], records: Sequence[dict],
                        scores: Optional[Dict[str, list]] = None) -> Dict[str, float]:
    """Accuracy (%) of the most similar sentence as the answer (``record["answer"]`` = [paragraph, sentence])
    and as the sentence before the gap (the answer's predecessor in its paragraph, where there is one), over
    ``records`` (etc-prepare nextsent's ``*.records.json``); ``embed``: texts -> float [N, D]. Ties cannot
    occur in practice (float cosines). ``scores``, if given, receives {record id: [cosine to the question
    per sentence, in input order]}: the format ``etc-predict nextsent`` writes, so paired.py can compare a
    fine-tuned arm with this baseline record by record."""
    import numpy as np

    answer = before = 0
    for r in records:
        where = [(p, s) for p, para in enumerate(r["paragraphs"]) for s in range(len(para["sentences"]))]
        texts = [r["question"]] + [r["paragraphs"][p]["sentences"][s] for p, s in where]
        e = embed(texts)  # [1 + sentences, D]
        e = e / np.linalg.norm(e, axis=1, keepdims=True)
        cos = e[1:] @ e[0]  # [sentences]
        if scores is not None:
            scores[r["id"]] = [float(c) for c in cos]
        top = where[int(np.argmax(cos))]
        p, s = r["answer"]
        answer += top == (p, s)
        before += s > 0 and top == (p, s - 1)
    n = max(len(records), 1)
    return {"records": len(records), "answer_accuracy": 100 * answer / n, "before_gap_accuracy": 100 * before / n}


def candidate_string_baseline(embed: Callable[[Sequence[str]], "np.ndarray"], records: Sequence[dict]) -> Dict[str, float]:
    """WikiHop: accuracy (%) of the candidate whose string is most similar to the query's words (``relation
    subject``, the relation's underscores as spaces), no support read: what a model that sees the candidate
    strings next to the query (the flat layouts of ``etc-prepare wikihop --no-globals``) can get without the
    supports. ``records``: official WikiHop records with answers; ``embed``: texts -> float [N, D]."""
    import numpy as np

    from etc_fairseq.finetune.wikihop.schema import is_correct, query_words

    hits = 0
    for r in records:
        e = embed([" ".join(query_words(r["query"]))] + list(r["candidates"]))  # [1 + C, D]
        e = e / np.linalg.norm(e, axis=1, keepdims=True)
        hits += is_correct(r["candidates"][int(np.argmax(e[1:] @ e[0]))], r["answer"])
    return {"records": len(records), "candidate_accuracy": 100 * hits / max(len(records), 1)}


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", type=Path, help="a Hugging Face BERT directory")
    src.add_argument("--etc", type=Path, help="an ETC checkpoint (fairseq-train's)")
    p.add_argument("--etc-data", type=Path, help="with --etc: the directory of its dict.txt (and pretrain.json)")
    p.add_argument("--etc-pool", choices=("long", "sentence"), default="long")
    p.add_argument("--records", type=Path, required=True, help="etc-prepare nextsent's valid.records.json (with "
                   "--wikihop-candidates: a WikiHop JSON file)")
    p.add_argument("--wikihop-candidates", action="store_true",
                   help="instead, the WikiHop candidate most similar to the query, no support read "
                   "(candidate_string_baseline)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--predictions", type=Path, metavar="FILE",
                   help="nextsent: also write each record's cosines ({id: [score per sentence]}, etc-predict "
                   "nextsent's format) for paired.py")
    p.add_argument("--summary-check", type=int, default=0, metavar="N",
                   help="with --etc: instead, check whether the SENTENCE token summarises its sentence "
                   "(summary_token_check) on the first N sentences of the records")
    p.add_argument("--per-document", type=int, default=1, metavar="K",
                   help="with --summary-check: the sentences go through the model K to a document (1: each alone)")
    p.add_argument("--source-check", type=int, default=0, metavar="N",
                   help="with --model: the spread of the source model's [CLS], [SEP] and mean outputs per layer "
                   "(source_token_check) on the first N sentences of the records, each alone")
    p.add_argument("--g2g", choices=("all", "self", "none"), default="all",
                   help="with --summary-check: the global keys the global queries read (a what-if; all: as trained)")
    a = p.parse_args(argv)
    if a.etc is not None and a.etc_data is None:
        p.error("--etc needs --etc-data")
    if a.predictions is not None and (a.wikihop_candidates or a.summary_check or a.source_check):
        p.error("--predictions goes with the nextsent baseline only")
    records = json.loads(a.records.read_text(encoding="utf-8"))
    sentences = [] if a.wikihop_candidates else [t for r in records for para in r["paragraphs"] for t in para["sentences"]]
    if a.source_check:
        if a.model is None:
            p.error("--source-check needs --model")
        res = source_token_check(a.model, sentences[: a.source_check])
        a.out.write_text(json.dumps(res, indent=1) + "\n")
        print(f"{a.model}: {res['texts']} sentences, each alone; per layer output, spread across the sentences of "
              "[CLS] / [SEP] / the mean of all outputs")
        for i, x in enumerate(res["layers"]):
            print(f"  {i}: {x['cls_spread']:.4f} / {x['sep_spread']:.4f} / {x['mean_pooled_spread']:.4f}")
        return 0
    if a.summary_check:
        if a.etc is None:
            p.error("--summary-check needs --etc")
        texts = sentences[: a.summary_check]
        res = summary_token_check(a.etc, a.etc_data, texts, a.per_document, a.g2g)
        a.out.write_text(json.dumps(res, indent=1) + "\n")
        print(f"{a.etc}: {len(texts)} sentences, {a.per_document} per document, global side reads {a.g2g} global "
              "keys; per layer output: SENTENCE token / "
              f"mean-pooled spread, SENTENCE token nearest its own sentence's mean (chance {res['chance']:.1f} %), "
              "SENTENCE tokens' attention on global keys")
        for i, x in enumerate(res["layers"]):
            share = f"{100 * x['attention_on_globals']:.1f} %" if "attention_on_globals" in x else "-"
            print(f"  {i}: {x['sentence_token_spread']:.4f} / {x['mean_pooled_spread']:.4f}, "
                  f"{x['own_mean_retrieval']:.1f} %, {share}")
        return 0
    embed = hf_embedder(a.model) if a.model is not None else etc_embedder(a.etc, a.etc_data, a.etc_pool)
    if a.wikihop_candidates:
        res = dict(candidate_string_baseline(embed, records), model=str(a.model or a.etc))
        a.out.write_text(json.dumps(res, indent=1) + "\n")
        print(f"{res['model']}: the candidate most similar to the query, no support read: "
              f"{res['candidate_accuracy']:.1f} % ({res['records']} records)")
        return 0
    scores = {} if a.predictions is not None else None
    res = dict(similarity_baseline(embed, records, scores),
               model=str(a.model or a.etc), pool="long" if a.model is not None else a.etc_pool)
    a.out.write_text(json.dumps(res, indent=1) + "\n")
    if scores is not None:
        a.predictions.write_text(json.dumps(scores) + "\n")
    print(f"{res['model']} ({res['pool']}): most similar sentence = answer {res['answer_accuracy']:.1f} %, = the "
          f"sentence before the gap {res['before_gap_accuracy']:.1f} % ({res['records']} records)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
