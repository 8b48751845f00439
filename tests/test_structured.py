"""The generic structured dataset (``etc-prepare structured``, ``--task etc_structured``): records -> ids on exact
small examples, the builder, bad records, the printable label vocabulary, and each label level end to end
through fairseq-train (3 updates), fairseq-validate, etc-predict and etc-evaluate on CONSTRUCTED labels over
real Wikipedia text (the project's sample)."""
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from etc_fairseq.errors import InputFormatError
from etc_fairseq.finetune.structured.builder import Document, find_mentions, write_jsonl
from etc_fairseq.finetune.structured.convert import StructuredOptions, layout_record
from etc_fairseq.finetune.structured.schema import read_records, record_from_json, record_to_json
from forkserver import run_python

REPO = Path(__file__).resolve().parents[1]

#: 6 words; word 1 is two pieces. CLS; a paragraph over every word, with two sentences; an entity linked to
#: words 1 and 4..5; an l2l cut before word 3.
SMALL = {
    "id": "small",
    "words": ["w0", "w1", "w2", "w3", "w4", "w5"],
    "globals": [
        {"type": "CLS"},
        {"type": "PARAGRAPH", "span": [0, 5]},
        {"type": "SENTENCE", "span": [0, 2], "parent": 1},
        {"type": "SENTENCE", "span": [3, 5], "parent": 1},
        {"type": "CANDIDATE", "links": [[1, 1], [4, 5]], "hard_g2l": True},
    ],
    "cuts": [3],
}
PIECES = [10, 11, 12, 13, 14, 15, 16]
WORD_OF_PIECE = [0, 1, 1, 2, 3, 4, 5]
TYPES = [1, 4, 3, 3, 7]


def small_layout(**opts):
    rec = record_from_json(SMALL, "small.jsonl:1")
    counts = Counter()
    lay = layout_record(rec, PIECES, WORD_OF_PIECE, [0] * 5, TYPES, StructuredOptions("record", **opts), counts)
    return {k: v.tolist() for k, v in lay.arrays.items()}, lay, counts


def test_record_to_ids_exact_small_example():
    a, lay, counts = small_layout()
    assert a["long_tokens"] == PIECES
    assert a["long_segment"] == [2, 2, 2, 2, 3, 3, 3]  # each piece's word's deepest owner: the sentences
    assert a["long_context"] == [0, 0, 0, 0, 1, 1, 1]  # the cut before word 3
    assert a["global_parent"] == [-1, -1, 1, 1, -1]
    # CLS and the entity have no span and no parent: a context of their own each (2 contexts from the cut)
    assert a["global_context"] == [2, 0, 0, 1, 3]
    assert [row[0] for row in a["long_links"]] == [-1, 4, 4, -1, -1, 4, 4]
    assert all(row[1:] == [-1, -1, -1] for row in a["long_links"])
    assert a["global_hard_g2l"] == [0, 0, 0, 0, 1]
    assert a["long_word"] == WORD_OF_PIECE
    assert lay.kept_globals == [0, 1, 2, 3, 4] and sum(counts[k] for k in ("truncated_examples", "globals_dropped")) == 0

    # the builder turns these ids into the paper's labels: words belong to their sentence, its paragraph
    # (ancestor) and the entity they mention; sentence -> paragraph is "parent"
    from etc_fairseq.structure import RelativeLabelVocab, build_structure

    vocab = RelativeLabelVocab(2)
    ids = {k: torch.tensor([a[k]]) for k in ("long_segment", "global_parent", "long_context", "global_context",
                                            "long_links", "global_hard_g2l")}
    s = build_structure(long_padding_mask=torch.zeros(1, 7, dtype=torch.bool),
                        global_padding_mask=torch.zeros(1, 5, dtype=torch.bool), vocab=vocab, local_radius=2, **ids)
    belongs = s.l2g_rel[0].eq(vocab.label("belongs")).int().tolist()
    assert belongs == [[0, 1, 1, 0, 0], [0, 1, 1, 0, 1], [0, 1, 1, 0, 1], [0, 1, 1, 0, 0],
                       [0, 1, 0, 1, 0], [0, 1, 0, 1, 1], [0, 1, 0, 1, 1]]
    assert s.g2g_rel[0, 2, 1] == vocab.label("parent") and s.g2g_rel[0, 1, 3] == vocab.label("child")
    assert s.g2g_rel[0, 0, 1] == vocab.label("other_context")
    assert s.l2l_mask[0, 3].tolist() == [True, True, True, False, False]  # piece 3 (word 2) stops at the cut
    assert s.g2l_mask[0, 4].tolist() == [False, True, True, False, False, True, True]  # hard g2l: its mentions


def test_truncation_drops_and_counts():
    a, lay, counts = small_layout(max_long_len=4)  # words 0..2 stay; sentence 3 loses every piece
    assert a["long_tokens"] == PIECES[:4] and lay.kept_globals == [0, 1, 2, 4]
    assert a["long_segment"] == [2, 2, 2, 2] and [r[0] for r in a["long_links"]] == [-1, 3, 3, -1]
    assert (counts["truncated_examples"], counts["long_pieces_dropped"], counts["globals_dropped"]) == (1, 3, 1)

    a, lay, counts = small_layout(max_global_len=3)  # the second sentence and the entity are cut
    assert lay.kept_globals == [0, 1, 2] and counts["globals_dropped"] == 2
    assert a["long_segment"] == [2, 2, 2, 2, 1, 1, 1]  # the dropped sentence's words fall to its paragraph
    assert all(r == [-1] * 4 for r in a["long_links"])

    a, lay, counts = small_layout(max_links_per_token=1)
    assert np.asarray(a["long_links"]).shape == (7, 1)


def test_builder_writes_the_schema_record(tmp_path):
    doc = Document("d1")
    para = doc.paragraph(["Anarchism is a political philosophy.", "Anarchists reject it."])
    para.sentence("It has schools.", label="x")
    doc.cut()
    p2 = doc.paragraph(["Proudhon was an anarchist."])
    ent = doc.entity("anarchism")
    assert ent.link_mentions() == [(0, 0)]
    ent.link_mentions("Proudhon")
    doc.label = "CONSTRUCTED-a"
    assert p2.index == 5
    rec = doc.to_json()
    assert rec == {
        "id": "d1",
        "words": "Anarchism is a political philosophy. Anarchists reject it. It has schools. Proudhon was an anarchist.".split(),
        "globals": [
            {"type": "CLS"},
            {"type": "PARAGRAPH", "span": [0, 10]},
            {"type": "SENTENCE", "span": [0, 4], "parent": 1},
            {"type": "SENTENCE", "span": [5, 7], "parent": 1},
            {"type": "SENTENCE", "span": [8, 10], "parent": 1, "label": "x"},
            {"type": "PARAGRAPH", "span": [11, 14]},
            {"type": "SENTENCE", "span": [11, 14], "parent": 5},
            {"type": "CANDIDATE", "links": [[0, 0], [11, 11]]},
        ],
        "cuts": [11],
        "label": "CONSTRUCTED-a",
    }
    assert find_mentions(["The", "anarchist,", "The", "Anarchist"], "the anarchist") == [(0, 1), (2, 3)]
    assert write_jsonl([doc], tmp_path / "d.jsonl") == 1
    back = read_records(tmp_path / "d.jsonl", label_level="record")
    assert record_to_json(back[0]) == rec and back[0].label == "CONSTRUCTED-a"
    with pytest.raises(ValueError, match="outside the 15 words"):
        ent.link(14, 15)
    # building records needs no fairseq
    code = "import sys; import etc_fairseq.finetune.structured.builder; assert 'fairseq' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def _bad(tmp_path, record, level="record", **kw):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"id": "ok", "words": ["a"], "globals": [{"type": "CLS"}]}) + "\n" + json.dumps(record) + "\n")
    with pytest.raises(InputFormatError) as e:
        read_records(path, label_level=level, **kw)
    msg = str(e.value)
    assert msg.startswith(f"{path}:2 (id ") or msg.startswith(f"{path}:2:"), msg
    assert "\n" not in msg
    return msg


@pytest.mark.parametrize("change,expected", [
    ({"globals": [{"type": "entity"}]}, "field 'globals[0].type': expected a built-in global token type or one declared with --global-type NAME=BASE (known: FIXED_BLOCK, CLS,"),
    ({"globals": [{"type": "SENTENCE", "span": [2, 9]}]}, "field 'globals[0].span': expected [first, last] words with 0 <= first <= last < 3, got [2, 9]"),
    ({"globals": [{"type": "SENTENCE", "span": [0, 1]}, {"type": "SENTENCE", "span": [1, 2]}]}, "field 'globals[1].span': expected words that no unrelated global token owns, got word 1, also in the span of globals[0]"),
    ({"globals": [{"type": "CLS", "parent": 1}, {"type": "CLS", "parent": 0}]}, "field 'globals[0].parent': expected a parent chain without cycles, got 1"),
    ({"globals": [{"type": "CLS", "parent": 0}]}, "field 'globals[0].parent': expected the index of another global token (0..0), got 0"),
    ({"globals": [{"type": "CLS", "links": [[0]]}]}, "field 'globals[0].links[0]': expected [first, last] words"),
    ({"globals": [{"type": "CLS", "spam": 1}]}, "field 'globals[0].spam': not a field of the schema (known: type, span, spans, parent, links, hard_g2l, label)"),
    ({"globals": []}, "field 'globals': expected at least one global token, got []"),
    ({"cuts": [0]}, "field 'cuts[0]': expected a word index in 1..2, greater than the previous cut, got 0"),
    ({"label": 3}, "field 'label': expected a class name (a non-empty string), got 3"),
    ({"pieces": [1, 2]}, "field 'words' / 'pieces': expected exactly one of them"),
    ({"words": ["a b"]}, "field 'words[0]': expected a word without whitespace (split the text into words), got \"a b\""),
    ({"extra": 1}, "field 'extra': not a field of the schema (known: id, words, pieces, globals, cuts, label, answer, meta); put your own data under 'meta'"),
])
def test_bad_records_name_file_line_field(tmp_path, change, expected):
    record = {"id": "r2", "words": ["x", "y", "z"], "globals": [{"type": "CLS"}], **change}
    assert expected in _bad(tmp_path, record)


def test_bad_values_named_at_conversion_and_user_types(tmp_path, pretrain_prepared):
    from etc_fairseq.finetune.structured.convert import prepare_structured
    from etc_fairseq.finetune.structured.schema import parse_type_map
    from etc_fairseq.prepare.tokenizer import WordPieceTokenizer

    assert "duplicate id 'ok'" in _bad(tmp_path, {"id": "ok", "words": ["a"], "globals": [{"type": "CLS"}]})
    assert "field 'answer': expected [first, last] words with 0 <= first <= last < 1, got [0, 3]" in _bad(
        tmp_path, {"id": "s", "words": ["a"], "globals": [{"type": "CLS"}], "answer": [0, 3]}, "span")
    tok = WordPieceTokenizer.from_pretrain_dir(pretrain_prepared.bin_dir)
    recs = tmp_path / "r.jsonl"
    rows = [
        {"id": "a", "words": "Anarchism is a political philosophy".split(), "label": "p",
         "globals": [{"type": "entity", "links": [[0, 0]]}, {"type": "SENTENCE", "span": [0, 4]}]},
        {"id": "b", "pieces": ["▁An", "archism"], "label": "q", "globals": [{"type": "SENTENCE", "span": [0, 1]}]},
    ]
    recs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    opts = StructuredOptions("record", global_types=parse_type_map(["entity=CANDIDATE"]))
    summary = prepare_structured({"train": recs}, tmp_path / "out", tok, opts)
    assert summary["train"]["cls_added"] == 2 and opts.classes == ["p", "q"]
    side = [json.loads(x) for x in (tmp_path / "out" / "train.side.jsonl").read_text().splitlines()]
    assert side[0]["type_names"] == ["CLS", "entity", "SENTENCE"] and side[0]["globals"] == [-1, 0, 1]
    info = json.loads((tmp_path / "out" / "prepare.json").read_text())
    assert info["label_level"] == "record" and info["classes"] == ["p", "q"] and info["global_types"] == {"entity": "CANDIDATE"}

    # etc-show draws it, naming the user type by its own name
    from etc_fairseq.cli.show import load_structured_example, main as show_main

    ex = load_structured_example(tmp_path / "out", "train", 0)
    assert ex.global_names == ["CLS", "entity", "SENTENCE"] and ex.global_types.tolist() == [1, 7, 3]
    assert "global_hard_g2l" not in ex.structure and ex.structure["long_links"].shape[1] == 4
    assert show_main([str(tmp_path / "out"), "--split", "train", "--out", str(tmp_path / "x.png")]) == 0
    assert (tmp_path / "x.png").read_bytes()[:4] == b"\x89PNG"

    with pytest.raises(ValueError, match="BASE must be a built-in global token type"):
        parse_type_map(["entity=THING"])
    # a class outside --classes, an id outside the dictionary, a QUESTION token over several pieces
    for row, opts, expected in [
        (rows[0], StructuredOptions("record", ["q"], {"entity": "CANDIDATE"}), "field 'label': expected one of the classes ['q'] (--classes), got 'p'"),
        ({"id": "c", "pieces": [5, 99999], "globals": [{"type": "CLS"}], "label": "p"}, StructuredOptions("record", ["p"]), "field 'pieces[1]': expected a dictionary id below"),
        ({"id": "d", "words": ["Anarchism"], "globals": [{"type": "QUESTION", "span": [0, 0]}], "label": "p"}, StructuredOptions("record", ["p"]), "field 'globals[0].span': expected the one piece a QUESTION (mirror) token mirrors, got 2 pieces"),
    ]:
        recs.write_text(json.dumps(row) + "\n")
        with pytest.raises(InputFormatError, match=re.escape(expected)):
            prepare_structured({"train": recs}, tmp_path / "out2", tok, opts)
        assert not (tmp_path / "out2").exists()  # nothing half-written


def test_global_type_outside_the_table_is_a_clear_error():
    from etc_fairseq.encoder import EtcEncoder
    from etc_fairseq.encoder.config import EtcEncoderConfig

    enc = EtcEncoder(EtcEncoderConfig(encoder_layers=1, encoder_embed_dim=16, encoder_ffn_embed_dim=32,
                                      encoder_attention_heads=2, local_radius=2, relative_pos_max_distance=2), 20, 1, 0)
    with pytest.raises(ValueError, match=r"global_types holds 12, outside the model's 10 global token types 0..9 \(FIXED_BLOCK=0, CLS=1"):
        enc(torch.tensor([[5, 6, 7]]), global_tokens=torch.tensor([[0, 0]]), global_types=torch.tensor([[1, 12]]))


def test_label_vocabulary_prints_every_id_with_its_meaning():
    from etc_fairseq.structure import RelativeLabelVocab

    vocab = RelativeLabelVocab(2)
    lines = str(vocab).splitlines()
    assert lines[0].startswith("RelativeLabelVocab(max_distance=2): 10 labels")
    assert [line.split()[:2] for line in lines[1:]] == [[str(i), n] for i, n in enumerate(vocab.names())]
    assert "key 2 or more tokens to the left" in lines[5] and "ancestor" in lines[9]
    assert [d[0] for d in vocab.describe()] == list(range(vocab.size))


# ------------------------------------------------------------------------------------------------------
# end to end, each label level: CONSTRUCTED labels on real Wikipedia text
# ------------------------------------------------------------------------------------------------------
def constructed_documents(wiki_dump, n=8):
    """Documents of the first ``n`` sample articles (2 paragraphs, up to 3 sentences each), labelled
    CONSTRUCTED: record = which paragraph has more words; global = a sentence's position
    (first / later) in its paragraph; span = the first sentence's first two words."""
    from etc_fairseq.prepare.sentences import split_sentences
    from etc_fairseq.prepare.wikipedia import iter_wikipedia_documents

    docs = []
    for article in iter_wikipedia_documents(wiki_dump):
        paragraphs = [split_sentences(p)[:3] for p in article.paragraphs[:2]]
        if len(paragraphs) < 2 or not all(paragraphs):
            continue
        doc = Document(f"CONSTRUCTED-{len(docs)}")
        for sentences in paragraphs:
            para = doc.paragraph()
            for k, s in enumerate(sentences):
                para.sentence(" ".join(s.split()[:40]), label="first" if k == 0 else "later")
        ent = doc.entity(article.title)
        ent.link_mentions(article.title.split()[0])
        first, second = (sum(len(x.split()[:40]) for x in p) for p in paragraphs)
        doc.label = "second_longer" if second > first else "first_longer"
        doc.answer = (0, 1)
        docs.append(doc)
        if len(docs) == n:
            return docs
    raise AssertionError("not enough articles")


def _run(args, cwd):
    proc = run_python(["-m", *args], cwd=cwd, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    return proc.stdout + proc.stderr


@pytest.mark.parametrize("level", ["global", "span"])  # record: tests/test_docs_structured.py runs the tutorial
def test_each_label_level_trains_validates_predicts_and_evaluates(level, wiki_dump, pretrain_prepared, tmp_path, capsys):
    from etc_fairseq.cli.evaluate import main as evaluate_main
    from etc_fairseq.cli.predict import main as predict_main
    from etc_fairseq.cli.prepare import main as prepare_main

    docs = constructed_documents(wiki_dump)
    write_jsonl(docs[:6], tmp_path / "train.jsonl")
    write_jsonl(docs[6:], tmp_path / "valid.jsonl")
    data = tmp_path / "data"
    assert prepare_main(["structured", "--train", str(tmp_path / "train.jsonl"), "--valid", str(tmp_path / "valid.jsonl"),
                         "--label-level", level, "--pretrain-dir", str(pretrain_prepared.bin_dir), "--out", str(data),
                         "--max-long-len", "256", "--arch", "etc_tiny"]) == 0
    info = json.loads((data / "prepare.json").read_text())
    assert info["label_level"] == level
    assert info["classes"] == {"record": ["first_longer", "second_longer"], "global": ["first", "later"], "span": []}[level]
    save = tmp_path / "checkpoints"
    common = ["--user-dir", str(REPO / "user_dir"), "--task", "etc_structured", "--criterion", "etc_structured", "--cpu",
              "--batch-size", "4"]
    _run(["fairseq_cli.train", str(data), *common, "--arch", "etc_tiny", "--optimizer", "adam", "--lr", "1e-3",
          "--max-update", "3", "--required-batch-size-multiple", "1", "--num-workers", "0", "--no-epoch-checkpoints",
          "--disable-validation",
          "--save-dir", str(save)], REPO)
    out = _run(["fairseq_cli.validate", str(data), *common, "--path", str(save / "checkpoint_last.pt"),
                "--valid-subset", "valid"], REPO)
    line = [x for x in out.splitlines() if "valid on 'valid' subset" in x][-1]
    names = {"record": ["accuracy"], "global": ["accuracy"], "span": ["exact_match", "f1"]}[level]
    validated = {n: float(re.search(rf"\| {n} ([0-9.]+)", line).group(1)) for n in names}
    state = torch.load(save / "checkpoint_last.pt", weights_only=True, map_location="cpu")
    assert state["cfg"]["task"]["max_long_len"] == 256  # the prepared length, taken up without the flag
    head = {"record": "structured_record", "global": "structured_global", "span": "structured_span"}[level]
    assert any(k.startswith(f"encoder.task_heads.{head}.") or k.startswith(f"task_heads.{head}.") for k in state["model"])

    pred = tmp_path / "pred.json"
    assert predict_main(["structured", "--path", str(save / "checkpoint_last.pt"), "--data", str(data),
                         "--split", "valid", "--output", str(pred), "--device", "cpu"]) == 0
    predictions = json.loads(pred.read_text())
    assert sorted(predictions) == ["CONSTRUCTED-6", "CONSTRUCTED-7"]
    capsys.readouterr()
    assert evaluate_main(["structured", "--predictions", str(pred), "--gold", str(tmp_path / "valid.jsonl"),
                          "--label-level", level]) == 0
    scores = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for n in names:  # etc-evaluate on the predictions = what fairseq-validate logged
        assert scores[n] == pytest.approx(validated[n], abs=1e-3), (n, scores, validated)
    assert scores["missing"] == 0 and scores["labelled"] == {"record": 2, "global": 12, "span": 2}[level]


def test_model_inputs_equal_the_prepared_batch(tmp_path, pretrain_prepared):
    """``model_inputs`` (records -> the model's tensors, for the hub) gives exactly the batch that etc-prepare
    structured + the task's dataset give for the same records."""
    from etc_fairseq.data.structured import StructuredDataset
    from etc_fairseq.finetune.structured.convert import model_inputs, prepare_structured
    from etc_fairseq.finetune.structured.schema import target_fields
    from etc_fairseq.prepare.tokenizer import WordPieceTokenizer

    tok = WordPieceTokenizer.from_pretrain_dir(pretrain_prepared.bin_dir)
    a = Document("a")
    a.paragraph(["Anarchism is a political philosophy.", "Anarchists reject the state."], cut=True)
    a.entity("anarchism", hard_g2l=True).link_mentions()
    b = Document("b", cls=False)
    b.paragraph(["Proudhon wrote books."])
    write_jsonl([a, b], tmp_path / "r.jsonl")
    prepare_structured({"train": tmp_path / "r.jsonl"}, tmp_path / "out", tok, StructuredOptions("span"))
    ds = StructuredDataset(tmp_path / "out", "train", target_fields("span"), pad_idx=tok.dictionary.pad())
    want = ds.collater([ds[0], ds[1]])["net_input"]
    got = model_inputs([a, b], tok)
    for key in ("src_tokens", "global_tokens", "global_types"):
        assert torch.equal(got[key], want[key]), key
    assert sorted(got["structure"]) == sorted(want["structure"])
    for key, value in want["structure"].items():
        assert torch.equal(got["structure"][key], value), key
    assert got["structure"]["global_hard_g2l"].tolist() == [[0, 0, 0, 0, 1], [0, 0, 0, 0, 0]]


def test_record_head_input_long_mean_exact():
    """``--record-head-input long_mean``: the record head reads the mean of the long outputs, padding left
    out; ``global_cls`` (the default) the first CLS global token."""
    from types import SimpleNamespace

    from etc_fairseq.finetune.structured.decode import HEADS, record_logits
    from etc_fairseq.structure.global_tokens import GlobalTokenType

    model = SimpleNamespace(task_heads={HEADS["record"]: torch.nn.Identity()})
    features = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]],
                             [[5.0, 1.0], [7.0, 3.0], [9.0, 5.0]]])  # [2, 3, 2]
    padding = torch.tensor([[False, False, True], [False, False, False]])
    glob = torch.tensor([[[0.0, 0.0], [8.0, 9.0]], [[6.0, 6.0], [0.0, 0.0]]])  # [2, 2, 2]
    types = torch.tensor([[int(GlobalTokenType.SENTENCE), int(GlobalTokenType.CLS)],
                          [int(GlobalTokenType.CLS), int(GlobalTokenType.SENTENCE)]])
    extra = {"global_features": glob}
    assert record_logits(model, extra, types, features, padding, "long_mean").tolist() == [[2.0, 3.0], [7.0, 3.0]]
    assert record_logits(model, extra, types).tolist() == [[8.0, 9.0], [6.0, 6.0]]
    with pytest.raises(ValueError, match="record head input 'cls'"):
        record_logits(model, extra, types, features, padding, "cls")


def test_record_head_input_of_a_window_model():
    """A model that reads only the first W long tokens (``roberta_window``: features [B, W, D], W < L) is
    pooled over those W, its padding included in the count only where the window has it; its record head cannot
    read a CLS global token it does not have (a ConfigError naming the flag to use)."""
    from types import SimpleNamespace

    from etc_fairseq.errors import ConfigError
    from etc_fairseq.finetune.structured.decode import HEADS, record_logits
    from etc_fairseq.structure.global_tokens import GlobalTokenType

    model = SimpleNamespace(task_heads={HEADS["record"]: torch.nn.Identity()})
    features = torch.tensor([[[1.0, 2.0], [3.0, 4.0]], [[5.0, 1.0], [100.0, 100.0]]])  # [2, W=2, 2]
    padding = torch.tensor([[False, False, False, True], [False, True, True, True]])  # [2, L=4]
    types = torch.tensor([[int(GlobalTokenType.CLS)], [int(GlobalTokenType.CLS)]])
    extra = {"global_features": None}
    assert record_logits(model, extra, types, features, padding, "long_mean").tolist() == [[2.0, 3.0], [5.0, 1.0]]
    with pytest.raises(ConfigError, match="--record-head-input long_mean"):
        record_logits(model, extra, types, features, padding)
