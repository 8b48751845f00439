"""A zero-shot baseline of nextsent for a sentence-embedding model: rank every sentence of a record by the
cosine similarity of its frozen mean-pooled embedding to the question's (all-MiniLM-L6-v2 was trained for
exactly this comparison), and score the top sentence as nextsent does (the answer: the sentence that
followed the question; also reported: how often the top sentence is the one the question followed).

    python examples/lifted_minilm/similarity.py --model HF_DIR --records DATA/valid.records.json --out sim.json
"""
from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path
from typing import Dict, Optional, Sequence


def _classify():
    spec = importlib.util.spec_from_file_location("lifted_minilm_classify", Path(__file__).with_name("classify.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def similarity_baseline(model_dir: Path, records: Sequence[dict], max_pieces: int = 128) -> Dict[str, float]:
    """Accuracy (%) of the most similar sentence as the answer (``record["answer"]`` = [paragraph, sentence])
    and as the sentence before the gap (the answer's predecessor in its paragraph, where there is one), over
    ``records`` (etc-prepare nextsent's ``*.records.json``). Ties cannot occur in practice (float cosines)."""
    import numpy as np

    classify = _classify()
    encoder = classify.load_encoder(model_dir)
    answer = before = 0
    for r in records:
        where = [(p, s) for p, para in enumerate(r["paragraphs"]) for s in range(len(para["sentences"]))]
        texts = [r["question"]] + [r["paragraphs"][p]["sentences"][s] for p, s in where]
        e = classify.mean_pooled(encoder, texts, max_pieces)  # [1 + sentences, D]
        e = e / np.linalg.norm(e, axis=1, keepdims=True)
        top = where[int(np.argmax(e[1:] @ e[0]))]
        p, s = r["answer"]
        answer += top == (p, s)
        before += s > 0 and top == (p, s - 1)
    n = max(len(records), 1)
    return {"model": str(model_dir), "records": len(records), "answer_accuracy": 100 * answer / n,
            "before_gap_accuracy": 100 * before / n}


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", type=Path, required=True, help="a Hugging Face BERT directory")
    p.add_argument("--records", type=Path, required=True, help="etc-prepare nextsent's valid.records.json")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    res = similarity_baseline(a.model, json.loads(a.records.read_text(encoding="utf-8")))
    a.out.write_text(json.dumps(res, indent=1) + "\n")
    print(f"{a.model}: most similar sentence = answer {res['answer_accuracy']:.1f} %, = the sentence before the gap "
          f"{res['before_gap_accuracy']:.1f} % ({res['records']} records)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
