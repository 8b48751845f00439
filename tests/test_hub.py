"""The hub interface (``EtcModel.from_pretrained`` -> ``etc_fairseq.hub.EtcHubInterface``), on a real
checkpoint that ``fairseq-train --task etc_pretraining`` writes here from the real Wikipedia pre-training
fixture (``pretrain_prepared``: sentencepiece, one item per sentence).

What is proven:

- loading from local files only: a self-contained model directory (``model.pt``, ``dict.txt``,
  ``spm.model``) and a training save directory with the ``etc-prepare pretrain`` data directory (tokenizer
  and sentence cut found through ``pretrain.json``);
- ``encode_documents`` lays out real validation documents exactly as the ``etc_pretraining`` task does
  (its dataset with masking switched off), tensor for tensor, also through the collater; the pure layout
  functions on exact small inputs;
- ``extract_features`` shapes, and equality with a forward of an independently built model holding the
  checkpoint's weights; batching equals one-by-one at non-pad positions;
- classification heads: ``predict`` is the head's log-softmax; a head saved in a checkpoint comes back;
- refusals: a checkpoint whose pickle calls ``os.system`` (zip and legacy serialization) is refused and
  does not run; missing directories and files are named; no tokenizer gives a clear error.
"""

import os
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from etc_fairseq.data.packing import Piece
from etc_fairseq.data.pretraining_corpus import PretrainingCorpus
from etc_fairseq.data.pretraining_dataset import PretrainingDataset
from etc_fairseq.data.batching import collate_inputs, structured_input
from etc_fairseq.hub import EtcHubInterface
from etc_fairseq.tokenization import byte_level_bpe_tokenizer, sentencepiece_tokenizer
from etc_fairseq.checkpoint_io import CheckpointLoadError
from etc_fairseq.lift import masked_lm_dictionary
from etc_fairseq.models.lifting import build_etc_model
from etc_fairseq.models import config_for_arch
from etc_fairseq.models.etc import EtcModel
from etc_fairseq.structure.global_tokens import GlobalTokenType



def raw_documents(out_dir: Path, split: str):
    """The sentences (text) of each document of ``out/raw/{split}.txt`` (blank line between documents)."""
    docs, cur = [], []
    for line in (Path(out_dir) / "raw" / f"{split}.txt").read_text(encoding="utf-8").splitlines():
        if line.strip():
            cur.append(line.strip())
        elif cur:
            docs.append(cur)
            cur = []
    if cur:
        docs.append(cur)
    return docs


@pytest.fixture(scope="module")
def trained(etc_tiny_checkpoint):
    """The session's real etc_pretraining checkpoint of etc_tiny (conftest ``etc_tiny_checkpoint``: 20
    updates on the real Wikipedia fixture), in its fairseq-train save directory."""
    assert etc_tiny_checkpoint.name == "checkpoint_last.pt"
    return etc_tiny_checkpoint


@pytest.fixture(scope="module")
def model_dir(trained, pretrain_prepared, tmp_path_factory):
    """A self-contained model directory, as a user would ship one: model.pt, dict.txt, spm.model."""
    d = tmp_path_factory.mktemp("hub_model")
    shutil.copyfile(trained, d / "model.pt")
    shutil.copyfile(Path(pretrain_prepared.bin_dir) / "dict.txt", d / "dict.txt")
    shutil.copyfile(pretrain_prepared.tokenizer_files["spm_model"], d / "spm.model")
    return d


@pytest.fixture(scope="module")
def hub(trained, pretrain_data):
    """Loaded from the training save directory, data from the etc-prepare pretrain bin/ directory."""
    h = EtcModel.from_pretrained(trained.parent, checkpoint_file=trained.name, data_name_or_path=str(pretrain_data))
    assert not h.training and not h.model.training  # eval mode on load, like a Hugging Face model
    return h


@pytest.fixture(scope="module")
def direct_model(trained, hub):
    """The same weights in an EtcModel built here, not through fairseq's loading path."""
    state = torch.load(trained)  # an all-dataclass checkpoint: torch's safe default loads it
    assert state["cfg"]["model"]["_name"] == "etc_tiny"
    model = build_etc_model(config_for_arch("etc_tiny"), hub.dictionary)
    model.load_state_dict(state["model"], strict=True)
    return model.eval()


def valid_dataset(pretrain_data, dictionary, examples):
    """The etc_pretraining task's dataset on the valid split, masking switched off, sizes large enough
    that it cuts nothing beyond what etc-prepare cut."""
    corpus = PretrainingCorpus.load(pretrain_data, "valid", dictionary=dictionary)
    return PretrainingDataset(corpus, examples, dictionary, max_long_len=10 ** 6, max_global_len=10 ** 4,
                              mask_prob=0.0, cpc_sentence_prob=0.0, seed=1)


# -------------------------------------------------------------------------------------------------------
# loading
# -------------------------------------------------------------------------------------------------------


def test_from_pretrained_finds_model_dictionary_and_tokenizer(hub, model_dir, pretrain_prepared):
    assert isinstance(hub, EtcHubInterface) and isinstance(hub.model, EtcModel)
    assert hub.pretraining_layout  # trained with etc_pretraining: no <s> ... </s> around plain text
    assert len(hub.dictionary) == pretrain_prepared.vocab_size + 1 and hub.dictionary[-1] == "<mask>"
    # found through bin/pretrain.json, which also gives the training data's sentence cut
    assert hub.tokenizer.kind == "sentencepiece"
    assert Path(hub.tokenizer.files[0]).resolve() == Path(pretrain_prepared.tokenizer_files["spm_model"]).resolve()
    assert hub.max_sentence_pieces == 128

    own = EtcModel.from_pretrained(model_dir)  # defaults: model.pt, data ".", spm.model beside it
    assert Path(own.tokenizer.files[0]) == (model_dir / "spm.model").resolve() and own.max_sentence_pieces == 0
    text = "The history of anarchism goes back to prehistory."
    assert torch.equal(own.encode(text), hub.encode(text))
    for a, b in zip(own.model.state_dict().values(), hub.model.state_dict().values()):
        assert torch.equal(a, b)
    assert own.encode(text, add_special_tokens=True)[0].item() == own.dictionary.bos()
    assert own.decode(own.encode(text)) == text


def test_encode_documents_is_the_pretraining_task_layout(hub, pretrain_prepared, pretrain_data):
    docs = raw_documents(pretrain_prepared.out_dir, "valid")
    corpus = PretrainingCorpus.load(pretrain_data, "valid", dictionary=hub.dictionary)
    assert len(docs) == corpus.num_docs == 2
    n_items = [corpus.doc_range(i)[1] - corpus.doc_range(i)[0] for i in range(2)]
    # both whole validation documents packed into one example (etc-prepare cut sentences over 128
    # pieces into several items: the hub cuts them the same way, from pretrain.json)
    got = hub.encode_packed(docs)
    item = valid_dataset(pretrain_data, hub.dictionary, [[Piece(0, 0, n_items[0]), Piece(1, 0, n_items[1])]])[0]
    assert len(item["source"]) > 1000 and len(item["global_tokens"]) == sum(n_items) > sum(map(len, docs))
    assert torch.equal(got["src_tokens"], item["source"])
    assert torch.equal(got["global_tokens"], item["global_tokens"])
    assert torch.equal(got["global_types"], item["global_types"])
    for k in ("long_segment", "long_example", "global_example"):
        assert torch.equal(got["structure"][k], item[k]), k
    assert set(item["global_types"].tolist()) == {int(GlobalTokenType.SENTENCE)}
    assert item["target"].eq(hub.dictionary.pad()).all()  # nothing masked: the comparison is meaningful

    # through the collaters: a padded 2-example batch (the second: the first 3 sentences of document 1,
    # which etc-prepare did not cut)
    ds = valid_dataset(pretrain_data, hub.dictionary, [[Piece(0, 0, n_items[0])], [Piece(1, 0, 3)]])
    theirs = ds.collater([ds[0], ds[1]])["net_input"]
    ours = collate_inputs([hub.encode_packed([docs[0]]), hub.encode_packed([docs[1][:3]])], hub.dictionary.pad())
    assert theirs["structure"]["long_segment"].eq(-1).any()  # padding was exercised
    for k in ("src_tokens", "global_tokens", "global_types"):
        assert torch.equal(ours[k], theirs[k]), k
    for k in ("long_segment", "long_example", "global_example"):
        assert torch.equal(ours["structure"][k], theirs["structure"][k]), k


def test_structured_input_exact_small():
    x = structured_input([[[5, 6, 7], [8]], [[9, 10]]], global_id=0)
    assert x["src_tokens"].tolist() == [5, 6, 7, 8, 9, 10]
    assert x["global_tokens"].tolist() == [0, 0, 0]
    assert x["global_types"].tolist() == [int(GlobalTokenType.SENTENCE)] * 3
    assert x["structure"]["long_segment"].tolist() == [0, 0, 0, 1, 2, 2]
    assert x["structure"]["long_example"].tolist() == [0, 0, 0, 0, 1, 1]
    assert x["structure"]["global_example"].tolist() == [0, 0, 1]
    assert all(t.dtype == torch.long for t in [x["src_tokens"], x["global_tokens"], *x["structure"].values()])

    y = structured_input([[[11]]], global_id=0)
    net = collate_inputs([x, y], pad=1)
    assert net["src_tokens"].tolist() == [[5, 6, 7, 8, 9, 10], [11, 1, 1, 1, 1, 1]]
    assert net["global_tokens"].tolist() == [[0, 0, 0], [0, 1, 1]]
    assert net["global_types"].tolist() == [[3, 3, 3], [3, 0, 0]]
    assert net["structure"]["long_segment"].tolist() == [[0, 0, 0, 1, 2, 2], [0, -1, -1, -1, -1, -1]]
    assert net["structure"]["long_example"].tolist() == [[0, 0, 0, 0, 1, 1], [0, 0, 0, 0, 0, 0]]
    assert net["structure"]["global_example"].tolist() == [[0, 0, 1], [0, 0, 0]]
    plain = collate_inputs([{"src_tokens": torch.tensor([4, 5])}, {"src_tokens": torch.tensor([6])}], pad=1)
    assert list(plain) == ["src_tokens"] and plain["src_tokens"].tolist() == [[4, 5], [6, 1]]

    with pytest.raises(ValueError, match="document 1 has no sentences"):
        structured_input([[[5]], []], global_id=0)
    with pytest.raises(ValueError, match="document 0, sentence 1: no tokens"):
        structured_input([[[5], []]], global_id=0)
    with pytest.raises(ValueError, match="plain token inputs with structured"):
        collate_inputs([x, {"src_tokens": torch.tensor([4])}], pad=1)


# -------------------------------------------------------------------------------------------------------
# features
# -------------------------------------------------------------------------------------------------------


def test_extract_features_equal_a_direct_forward(hub, direct_model, pretrain_prepared):
    docs = raw_documents(pretrain_prepared.out_dir, "valid")
    doc = hub.encode_packed([docs[0][:6], docs[1][:3]])
    L, G = len(doc["src_tokens"]), len(doc["global_tokens"])
    assert G >= 9 and L > 100
    with torch.no_grad():
        long, glob = hub.extract_features(doc)
        assert long.shape == (1, L, 64) and glob.shape == (1, G, 64)
        net = collate_inputs([doc], hub.dictionary.pad())
        ref_long, extra = direct_model(**net, features_only=True)
        assert torch.allclose(long, ref_long, atol=1e-6) and torch.allclose(glob, extra["global_features"], atol=1e-6)
        assert long.abs().sum() > 0 and glob.std(dim=1).mean() > 0  # real, sentence-dependent features

        # plain text: the model adds one fixed-block global token per 16 long tokens
        tokens = hub.encode(" ".join(docs[0][:3]))
        long, glob = hub.extract_features(tokens)
        n = len(tokens)
        assert long.shape == (1, n, 64) and glob.shape == (1, -(-n // 16), 64)
        ref_long, extra = direct_model(tokens.unsqueeze(0), features_only=True)
        assert torch.allclose(long, ref_long, atol=1e-6) and torch.allclose(glob, extra["global_features"], atol=1e-6)

        # all layers: the embeddings and one output per layer; the last is extract_features' output
        longs, globs = hub.extract_features(doc, return_all_hiddens=True)
        assert len(longs) == len(globs) == 3
        assert torch.allclose(longs[-1], hub.extract_features(doc)[0], atol=1e-6)

        # a padded batch gives each item's own features at its non-pad positions
        other = hub.encode_packed([docs[1][5:7]])
        long_b, glob_b = hub.extract_features([doc, other])
        long_1, glob_1 = hub.extract_features(other)
        n1, g1 = len(other["src_tokens"]), len(other["global_tokens"])
        assert long_b.shape == (2, L, 64) and n1 < L
        assert torch.allclose(long_b[0], hub.extract_features(doc)[0][0], atol=1e-5)
        assert torch.allclose(long_b[1, :n1], long_1[0], atol=1e-5)
        assert torch.allclose(glob_b[1, :g1], glob_1[0], atol=1e-5)


def test_classification_head_predict_and_reload(hub, model_dir, trained, tmp_path, pretrain_prepared):
    docs = raw_documents(pretrain_prepared.out_dir, "valid")
    batch = hub.encode_documents([docs[0][:3], docs[1][:2]])
    assert batch["src_tokens"][:, 0].eq(hub.dictionary.bos()).all()  # the head reads a CLS, not a word piece
    hub.register_classification_head("topic", num_classes=3)
    with torch.no_grad():
        log_probs = hub.predict("topic", batch)
        assert log_probs.shape == (2, 3)
        assert torch.allclose(log_probs.exp().sum(-1), torch.ones(2), atol=1e-6)
        long, _ = hub.extract_features(batch)
        head = hub.model.classification_heads["topic"]
        assert torch.allclose(log_probs, torch.log_softmax(head(long), dim=-1), atol=1e-6)
        logits = hub.predict("topic", batch, return_logits=True)
        assert torch.allclose(torch.log_softmax(logits, -1), log_probs, atol=1e-6)
        assert not torch.allclose(log_probs[0], log_probs[1])
    with pytest.raises(KeyError, match="no classification head 'nope'"):
        hub.predict("nope", batch)

    # a checkpoint holding the head: from_pretrained registers it with its weights
    state = torch.load(trained)
    for k, v in head.state_dict().items():
        state["model"][f"classification_heads.topic.{k}"] = v.clone()
    d = tmp_path / "with_head"
    d.mkdir()
    torch.save(state, d / "model.pt")
    for f in ("dict.txt", "spm.model"):
        shutil.copyfile(model_dir / f, d / f)
    again = EtcModel.from_pretrained(d)
    assert "topic" in again.model.classification_heads
    with torch.no_grad():
        assert torch.allclose(again.predict("topic", batch), log_probs, atol=1e-6)


def test_global_tokens_use_the_pretrained_role_ids(pretrain_prepared, hub):
    """A converted model's pretrain.json names the ids its global tokens were pretrained with: the hub's
    documents use them, as the etc_pretraining dataset does."""
    roles = {"cls": 5, "sentence": 6}
    h = EtcHubInterface(None, SimpleNamespace(source_dictionary=hub.dictionary), None,
                        sentencepiece_tokenizer(pretrain_prepared.tokenizer_files["spm_model"]), global_role_ids=roles)
    x = h.encode_document(["First sentence here.", "Second one."])
    assert x["global_tokens"].tolist() == [5, 6, 6] and x["src_tokens"][0].item() == 5
    assert h.encode_packed([["First sentence here."]])["global_tokens"].tolist() == [6]
    assert hub.encode_document(["First sentence here."])["global_tokens"].tolist() == [hub.dictionary.bos()] * 2


def test_gpt2_tokenizer_encodes_like_etc_prepare(pretrain_gpt2_prepared):
    """GPT-2 BPE data: the interface's sentence encoding gives the corpus's own token ids."""
    out = Path(pretrain_gpt2_prepared.out_dir)
    files = pretrain_gpt2_prepared.tokenizer_files
    dictionary = masked_lm_dictionary(Path(pretrain_gpt2_prepared.bin_dir) / "dict.txt")
    hub = EtcHubInterface(None, SimpleNamespace(source_dictionary=dictionary), None,
                          byte_level_bpe_tokenizer(files["gpt2_encoder_json"], files["gpt2_vocab_bpe"], gpt2_ids=True),
                          max_sentence_pieces=pretrain_gpt2_prepared.max_sentence_pieces)
    docs = raw_documents(out, "valid")
    corpus = PretrainingCorpus.load(pretrain_gpt2_prepared.bin_dir, "valid", dictionary=dictionary)
    got = hub.encode_packed([docs[0]])
    expected = corpus.document(0)
    assert len(got["global_tokens"]) == len(expected)
    assert got["src_tokens"].tolist() == [int(t) for s in expected for t in s]
    # decoding gives the text back where every token is in the dictionary (it is built from the
    # training text, so some valid tokens are <unk>)
    starts = [0]
    for sent in expected:
        starts.append(starts[-1] + len(sent))
    clean = [j for j, sent in enumerate(expected) if dictionary.unk() not in sent.tolist()]
    assert clean
    j = clean[0]
    assert hub.decode(got["src_tokens"][starts[j]: starts[j + 1]]) == docs[0][j]


# -------------------------------------------------------------------------------------------------------
# refusals
# -------------------------------------------------------------------------------------------------------


class _RunsCode:
    """Pickles as a call to os.system: what a malicious checkpoint looks like."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("legacy_format", [False, True])
def test_malicious_checkpoint_is_refused_and_not_run(legacy_format, model_dir, tmp_path):
    marker = tmp_path / "pwned"
    d = tmp_path / "evil"
    d.mkdir()
    shutil.copyfile(model_dir / "dict.txt", d / "dict.txt")
    torch.save({"cfg": {"model": _RunsCode(marker)}, "model": {"w": torch.zeros(1)}}, d / "model.pt",
               _use_new_zipfile_serialization=not legacy_format)
    assert not marker.exists()
    with pytest.raises(CheckpointLoadError) as e:
        EtcModel.from_pretrained(d)
    msg = str(e.value)
    assert str(d / "model.pt") in msg and "refusing" in msg and f"{os.system.__module__}.system" in msg
    assert not marker.exists()


def test_missing_files_and_tokenizer_are_named(model_dir, tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing is downloaded"):
        EtcModel.from_pretrained("https://dl.fbaipublicfiles.com/fairseq/models/roberta.base.tar.gz")
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "absent"))):
        EtcModel.from_pretrained(tmp_path / "absent")
    d = tmp_path / "no_dict"
    d.mkdir()
    shutil.copyfile(model_dir / "model.pt", d / "model.pt")
    with pytest.raises(FileNotFoundError, match="dict.txt: no such file"):
        EtcModel.from_pretrained(d)
    shutil.copyfile(model_dir / "dict.txt", d / "dict.txt")
    with pytest.raises(FileNotFoundError, match="checkpoint_9.pt: no such checkpoint file"):
        EtcModel.from_pretrained(d, checkpoint_file="checkpoint_9.pt")
    # no tokenizer anywhere: token ids still work, text gives an error saying where it looked
    h = EtcModel.from_pretrained(d)
    assert h.tokenizer is None
    with pytest.raises(ValueError, match=r"no tokenizer found .*spm\.model.*spm_model="):
        h.encode("Some text.")
    with torch.no_grad():
        long, glob = h.extract_features(torch.tensor([[10, 11, 12, 13]]))
    assert long.shape == (1, 4, 64) and glob.shape == (1, 1, 64)


# -------------------------------------------------------------------------------------------------------
# Hugging Face / RoBERTa habits: eval mode, truncation, batches, CLS, fill_mask, sentence_prediction
# -------------------------------------------------------------------------------------------------------


def test_loaded_in_eval_mode_same_text_same_features(model_dir):
    h = EtcModel.from_pretrained(model_dir)
    assert not h.training and h.model.cfg.dropout > 0  # dropout would make the two calls differ
    tokens = h.encode("The history of anarchism goes back to prehistory.")
    a, _ = h.extract_features(tokens)
    b, _ = h.extract_features(tokens)
    assert torch.equal(a, b)
    h.train()
    c, _ = h.extract_features(tokens)
    assert not torch.equal(a, c)  # .train() switches dropout back on


def test_encode_truncation_options_and_long_inputs(hub, pretrain_prepared, caplog):
    text = " ".join(s for d in raw_documents(pretrain_prepared.out_dir, "valid") for s in d)
    assert hub.max_length is None  # relative positions only: no limit of the model's own
    full = hub.encode(text)
    assert len(full) > 8115 and full[0].item() == hub.dictionary.bos() and full[-1].item() == hub.dictionary.eos()
    with pytest.raises(ValueError, match=r"more than max_length=20; pass truncation=True"):
        hub.encode(text, max_length=20)
    with caplog.at_level("WARNING", logger="etc_fairseq.hub"):
        cut = hub.encode(text, truncation=True, max_length=20)
    assert len(cut) == 20 and torch.equal(cut[:19], full[:19]) and cut[-1].item() == hub.dictionary.eos()
    assert f"truncated a text of {len(full)} tokens to max_length=20 ({len(full) - 20} cut)" in caplog.text
    with pytest.raises(ValueError, match="truncation=True needs max_length="):
        hub.encode(text, truncation=True)
    # 8,115 tokens (507 fixed-block global tokens, 64 in training) run: relative positions extrapolate
    tokens = hub.encode(text, truncation=True, max_length=8115)
    with torch.no_grad():
        long, glob = hub.extract_features(tokens)
    assert long.shape == (1, 8115, 64) and glob.shape == (1, -(-8115 // 16), 64)
    assert torch.isfinite(long).all() and torch.isfinite(glob).all()


def test_encode_documents_is_a_padded_batch_with_a_cls(hub, pretrain_prepared):
    docs = raw_documents(pretrain_prepared.out_dir, "valid")
    d0, d1 = docs[0][:4], docs[1][:2]
    batch = hub.encode_documents([d0, d1])
    one = [hub.encode_document(d0), hub.encode_document(d1)]
    n = [len(x["src_tokens"]) for x in one]
    g = [len(x["global_tokens"]) for x in one]
    assert batch["src_tokens"].shape == (2, max(n)) and batch["global_tokens"].shape == (2, max(g))
    assert g == [1 + 4, 1 + 2]  # CLS + one token per sentence (no sentence here is over 128 pieces)
    bos, pad = hub.dictionary.bos(), hub.dictionary.pad()
    assert batch["src_tokens"][:, 0].tolist() == [bos, bos]
    assert batch["global_types"][:, 0].tolist() == [int(GlobalTokenType.CLS)] * 2
    assert batch["structure"]["long_segment"][:, 0].tolist() == [0, 0]  # the long CLS belongs to the global CLS
    first = len(hub.encode_sentence(d0[0])[0])
    assert batch["structure"]["long_segment"][0, 1:1 + first].eq(1).all()  # sentence 0 -> global token 1
    assert batch["src_tokens"][1, n[1]:].eq(pad).all() and batch["global_tokens"][1, g[1]:].eq(pad).all()
    # the same as the CLS-free packed layout after the CLS
    packed = hub.encode_packed([d0])
    assert torch.equal(one[0]["src_tokens"][1:], packed["src_tokens"])
    assert torch.equal(one[0]["structure"]["long_segment"][1:], packed["structure"]["long_segment"] + 1)
    with torch.no_grad():
        long_b, glob_b = hub.extract_features(batch)
        for i in range(2):
            long_i, glob_i = hub.extract_features(one[i])
            assert torch.allclose(long_b[i, : n[i]], long_i[0], atol=1e-5)
            assert torch.allclose(glob_b[i, : g[i]], glob_i[0], atol=1e-5)
    with pytest.raises(TypeError, match="document 0 is a string"):
        hub.encode_documents(["not a list of sentences"])


def test_fill_mask_top_k_like_roberta(hub, direct_model):
    text = "The history of anarchism goes back to <mask>."
    out = hub.fill_mask(text, topk=4)
    assert len(out) == 4
    probs = [p for _, p, _ in out]
    assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1 + 1e-6
    left, right = text.split("<mask>")
    for filled, _, symbol in out:
        assert "<mask>" not in filled and filled.startswith(left.rstrip()) and filled.endswith(right)
        assert hub.dictionary.index(symbol) != hub.dictionary.unk() or symbol == "<unk>"
    # the probabilities are the model's softmax at the masked position (etc_pretraining: bare pieces)
    mask_id = hub.dictionary.index("<mask>")
    ids = hub.encode(left.rstrip(), add_special_tokens=False).tolist() + [mask_id] + hub.encode(right, add_special_tokens=False).tolist()
    with torch.no_grad():
        logits, _ = direct_model(torch.tensor([ids]))
    p = logits[0, ids.index(mask_id)].softmax(-1)
    top = p.topk(4)
    assert [hub.dictionary[i] for i in top.indices.tolist()] == [s for _, _, s in out]
    assert torch.allclose(top.values, torch.tensor(probs), atol=1e-5)
    with pytest.raises(ValueError, match="exactly one <mask>"):
        hub.fill_mask("no mask here")


def test_sentence_prediction_checkpoint_loads_like_fairseq_hub(etc_tiny_sentence_prediction_checkpoint, classification_data):
    from fairseq import hub_utils

    ckpt = etc_tiny_sentence_prediction_checkpoint
    data_dir, num_classes = classification_data
    assert (data_dir / "input0" / "dict.txt").is_file() and not (data_dir / "dict.txt").exists()
    theirs = hub_utils.from_pretrained(str(ckpt.parent), ckpt.name, str(data_dir))["models"][0].eval()
    text = "Anarchism is a political philosophy and movement."
    for data in (data_dir, data_dir / "input0"):  # the fairseq data dir, or its input0/ as users pass it
        h = EtcModel.from_pretrained(ckpt.parent, checkpoint_file=ckpt.name, data_name_or_path=str(data))
        assert h.tokenizer is not None and h.tokenizer.kind == "sentencepiece"  # bin/../spm.model of etc-prepare
        tokens = h.encode(text)
        log_probs = h.predict("sentence_classification_head", tokens)
        assert log_probs.shape == (1, num_classes)
        with torch.no_grad():
            logits, _ = theirs(tokens.unsqueeze(0), classification_head_name="sentence_classification_head")
        assert torch.allclose(log_probs, logits.log_softmax(-1), atol=1e-5)
        label = h.task.label_dictionary.string([log_probs.argmax(-1).item() + h.task.label_dictionary.nspecial])
        assert 0 <= int(label) < num_classes
    with pytest.raises(FileNotFoundError, match=r"input0/dict.txt: no such file .*sentence_prediction"):
        EtcModel.from_pretrained(ckpt.parent, checkpoint_file=ckpt.name, data_name_or_path=str(data_dir.parent))
