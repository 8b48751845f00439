"""The etc_pretraining task (PretrainingDataset: CPC + whole-word MLM masking, packing, batching) and the
cpc_mlm criterion, on the real Wikipedia pre-training fixture; fairseq-train / fairseq-validate end to end."""
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn as nn
from fairseq import metrics
from fairseq.data import Dictionary

from etc_fairseq.pretraining.criterion import CpcMlmCriterion, nce_loss
from etc_fairseq.data.packing import Piece
from etc_fairseq.data.pretraining_dataset import PretrainingDataset
from etc_fairseq.models import EtcModel, config_for_arch
from etc_fairseq.structure.global_tokens import GlobalTokenType
from etc_fairseq.pretraining.task import EtcPretrainingConfig, EtcPretrainingTask
from forkserver import run_python

REPO = Path(__file__).resolve().parents[1]
USER_DIR = str(REPO / "user_dir")


def make_task(data, **kw):
    args = dict(data=str(data), max_long_len=256, max_global_len=32, seed=1)
    args.update(kw)
    return EtcPretrainingTask.setup_task(EtcPretrainingConfig(**args))


@pytest.fixture(scope="module")
def task(pretrain_data):
    t = make_task(pretrain_data)
    t.load_dataset("train")
    t.load_dataset("valid")
    return t


@pytest.fixture(scope="module")
def tiny_model(task):
    torch.manual_seed(0)
    cfg = config_for_arch("etc_tiny", dropout=0.0, attention_dropout=0.0)
    return EtcModel.build_model(cfg, task)


def original_long(ds, index):
    sents, starts, piece_of = ds._sentences(ds.examples[index])
    return np.concatenate(sents), np.concatenate(starts), [len(s) for s in sents]


def test_items_cpc_and_whole_word_mlm(task):
    ds = task.dataset("train")
    mask_idx = task.dictionary.index("<mask>")
    pad = task.dictionary.pad()
    n_cpc = n_sent = n_picked = n_eligible = 0
    for i in range(len(ds)):
        item = ds[i]
        orig, word_starts, lengths = original_long(ds, i)
        src, tgt = item["source"].numpy(), item["target"].numpy()
        types = item["global_types"].numpy()
        seg = item["long_segment"].numpy()
        assert len(src) == len(orig) == int(ds.sizes[i]) and len(types) == len(lengths)
        assert (item["global_tokens"].numpy() == task.dictionary.bos()).all()
        cpc = types == int(GlobalTokenType.CPC_MASK)
        assert set(types.tolist()) <= {int(GlobalTokenType.SENTENCE), int(GlobalTokenType.CPC_MASK)}
        long_cpc = cpc[seg]
        # CPC sentences: no visible long token, not MLM targets, original tokens kept for the second encoder
        assert (src[long_cpc] == mask_idx).all()
        assert (tgt[long_cpc] == pad).all()
        assert item["cpc_global_index"].tolist() == np.flatnonzero(cpc).tolist()
        for g, toks in zip(item["cpc_global_index"].tolist(), item["cpc_segment_tokens"]):
            assert toks.tolist() == orig[seg == g].tolist()
        # MLM: targets are the originals; untouched elsewhere; whole words
        picked = tgt != pad
        assert (tgt[picked] == orig[picked]).all()
        assert (src[~picked & ~long_cpc] == orig[~picked & ~long_cpc]).all()
        word = np.cumsum(word_starts)
        for w in np.unique(word[picked]):
            assert picked[word == w].all()
        n_cpc += cpc.sum()
        n_sent += len(cpc)
        n_picked += picked.sum()
        n_eligible += (~long_cpc).sum()
    assert 0.06 < n_cpc / n_sent < 0.14
    assert 0.13 < n_picked / n_eligible < 0.17


def test_collater_batch_format_and_fixed_padding(task, pretrain_data):
    ds = task.dataset("train")
    batch = ds.collater([ds[i] for i in range(4)])
    ni = batch["net_input"]
    B, L = ni["src_tokens"].shape
    G = ni["global_tokens"].size(1)
    assert B == 4 and L == max(ds.sizes[:4]) and ni["src_lengths"].tolist() == ds.sizes[:4].tolist()
    assert batch["target"].shape == (B, L) and ni["global_types"].shape == (B, G)
    assert set(ni["structure"]) == {"long_segment", "long_example", "global_example"}
    assert (ni["structure"]["long_segment"][ni["src_tokens"].eq(task.dictionary.pad())] == -1).all()
    cpc = batch["cpc"]
    assert cpc["segment_tokens"].size(0) == cpc["batch_index"].numel() == cpc["global_index"].numel()
    assert (ni["global_types"][cpc["batch_index"], cpc["global_index"]] == int(GlobalTokenType.CPC_MASK)).all()
    assert batch["ntokens"] == int(ds.sizes[:4].sum()) and batch["nsentences"] == 4

    fixed = make_task(pretrain_data, pad_to_fixed_length=True)
    fixed.load_dataset("valid")
    fds = fixed.dataset("valid")
    b = fds.collater([fds[0], fds[1]])
    assert b["net_input"]["src_tokens"].shape == (2, 256) and b["net_input"]["global_tokens"].shape == (2, 32)
    assert fds.num_tokens(0) == 256


def test_fixed_blocks_items(pretrain_data):
    t = make_task(pretrain_data, fixed_blocks=True, fixed_block_len=16)
    t.load_dataset("valid")
    ds = t.dataset("valid")
    for i in range(len(ds)):
        item = ds[i]
        n = len(item["source"])
        types = item["global_types"]
        assert (types == int(GlobalTokenType.FIXED_BLOCK)).all()
        assert len(types) == int(ds.global_sizes[i]) <= 32
        assert item["cpc_global_index"].numel() == 0
        seg, ex, gex = item["long_segment"], item["long_example"], item["global_example"]
        assert (gex[seg] == ex).all()  # a block never straddles two packed pieces
        assert torch.bincount(seg).max() <= 16 and n <= 256


def test_packed_example_blocks_every_cross_document_pair(task, tiny_model):
    ds = task.dataset("train")
    packed = [[Piece(0, 0, 3), Piece(1, 2, 5), Piece(2, 0, 2)], [Piece(3, 1, 4)]]
    pds = PretrainingDataset(ds.corpus, packed, task.dictionary, 512, 32, cpc_sentence_prob=0.3, seed=3)
    batch = pds.collater([pds[0], pds[1]])
    ni = batch["net_input"]
    st = ni["structure"]
    assert st["long_example"][0].unique().tolist() == [0, 1, 2]
    _, _, built = tiny_model.encoder.prepare_inputs(
        ni["src_tokens"], ni["global_tokens"], ni["global_types"], st
    )
    pad = task.dictionary.pad()
    lpad, gpad = ni["src_tokens"].eq(pad), ni["global_tokens"].eq(pad)
    le, ge = st["long_example"].masked_fill(lpad, -7), st["global_example"].masked_fill(gpad, -9)
    cross_l2g = le[:, :, None] != ge[:, None, :]
    cross_g2g = ge[:, :, None] != ge[:, None, :]
    assert not (built.l2g_mask & cross_l2g).any()
    assert not (built.g2l_mask & cross_l2g.transpose(1, 2)).any()
    assert not (built.g2g_mask & cross_g2g).any()
    r = built.local_radius
    L = le.size(1)
    j = torch.arange(L)[:, None] + torch.arange(-r, r + 1)[None, :]
    inside = (j >= 0) & (j < L)
    key_ex = le[:, j.clamp(0, L - 1)]
    cross_l2l = (key_ex != le[:, :, None]) & inside[None]
    assert cross_l2l.any() and not (built.l2l_mask & cross_l2l).any()
    # and the same-document pairs are not all blocked (the masks are not trivially empty)
    assert (built.l2l_mask & ~cross_l2l).any() and (built.g2g_mask & ~cross_g2g).any()


def test_determinism_and_epochs(task, pretrain_data):
    ds = task.dataset("train")
    a = ds.collater([ds[i] for i in (3, 1, 7)])
    ds[0], ds[5]  # other accesses in between change nothing
    b = ds.collater([ds[i] for i in (3, 1, 7)])
    t2 = make_task(pretrain_data)
    t2.load_dataset("train")
    c = t2.dataset("train").collater([t2.dataset("train")[i] for i in (3, 1, 7)])
    for x in (b, c):
        assert torch.equal(a["net_input"]["src_tokens"], x["net_input"]["src_tokens"])
        assert torch.equal(a["target"], x["target"])
        assert torch.equal(a["net_input"]["global_types"], x["net_input"]["global_types"])
        assert torch.equal(a["cpc"]["segment_tokens"], x["cpc"]["segment_tokens"])
    order1 = ds.ordered_indices()
    ds.set_epoch(2)
    try:
        d = ds.collater([ds[i] for i in (3, 1, 7)])
        assert not torch.equal(a["target"], d["target"])
        assert not torch.equal(a["net_input"]["src_tokens"], d["net_input"]["src_tokens"])
        order2 = ds.ordered_indices()
        assert sorted(order1.tolist()) == sorted(order2.tolist()) == list(range(len(ds)))
        assert (np.diff(ds.sizes[order2]) >= 0).all()
    finally:
        ds.set_epoch(1)


def test_max_tokens_batching(task):
    itr = task.get_batch_iterator(task.dataset("train"), max_tokens=1024, max_positions=256, seed=1, epoch=1)
    n = 0
    for batch in itr.next_epoch_itr(shuffle=True):
        B, L = batch["net_input"]["src_tokens"].shape
        assert B * L <= 1024
        n += B
    assert n == len(task.dataset("train"))


class FakeTask:
    def __init__(self, dictionary):
        self.target_dictionary = dictionary
        self.source_dictionary = dictionary


class FakeModel(nn.Module):
    """Fixed outputs: LM logits for the masked positions, global features, second-encoder outputs."""

    def __init__(self, logits, global_features, segment_features):
        super().__init__()
        self.logits, self.global_features, self.segment_features = logits, global_features, segment_features
        self.cpc_head = nn.Linear(2, 2)
        self.encoded = 0

    def forward(self, src_tokens, masked_tokens=None, **kw):
        return self.logits, {"global_features": self.global_features}

    def encode_segments_alone(self, segment_tokens):
        self.encoded += 1
        return self.segment_features

    def cpc_scores(self, predicted, targets):
        return predicted @ targets.t()


def test_nce_loss_equals_hand_computation():
    d = Dictionary()
    pad = d.pad()
    g = torch.tensor([[[1.0, 0.0], [0.5, 2.0], [0.0, 0.0]], [[-1.0, 1.0], [3.0, 0.5], [2.0, -1.0]]])
    seg = torch.tensor([[0.2, 1.0], [1.5, -0.5], [-1.0, 0.3]])
    cpc = {"segment_tokens": torch.full((3, 4), 7), "batch_index": torch.tensor([0, 1, 1]), "global_index": torch.tensor([1, 0, 2])}
    target = torch.full((2, 5), pad)
    target[0, 1], target[1, 3] = 5, 6
    logits = torch.tensor([[0.0, 1.0, 0.0, 0.0, 0.0, 2.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]])
    sample = {"net_input": {"src_tokens": torch.zeros(2, 5, dtype=torch.long)}, "target": target, "cpc": cpc,
              "ntokens": 10, "nsentences": 2}
    model = FakeModel(logits, g, seg)
    crit = CpcMlmCriterion(FakeTask(d), mlm_weight=0.8, cpc_weight=0.2)
    loss, sample_size, log = crit(model, sample)

    # hand computation
    pred = [g[0, 1].tolist(), g[1, 0].tolist(), g[1, 2].tolist()]
    cands = seg.tolist()
    nce = 0.0
    for i in range(3):
        s = [pred[i][0] * c[0] + pred[i][1] * c[1] for c in cands]
        nce += -(s[i] - math.log(sum(math.exp(v) for v in s)))
    mlm = 0.0
    for row, t in ((logits[0].tolist(), 5), (logits[1].tolist(), 6)):
        mlm += -(row[t] - math.log(sum(math.exp(v) for v in row)))
    expected = 0.8 * mlm / 2 + 0.2 * nce / 3
    assert abs(loss.item() - expected) < 1e-5
    assert abs(log["cpc_loss_sum"].item() - nce) < 1e-5 and log["cpc_count"] == 3
    assert abs(nce_loss(torch.tensor(pred) @ seg.t()).item() - nce) < 1e-5
    assert sample_size == 1 and log["mlm_count"] == 2 and model.encoded == 1
    # cpc_weight 0: the second encoder is not run
    model0 = FakeModel(logits, g, seg)
    model0.encode_segments_alone = None  # calling it would raise TypeError
    loss0, _, log0 = CpcMlmCriterion(FakeTask(d), 0.8, 0.0)(model0, sample)
    assert abs(loss0.item() - 0.8 * mlm / 2) < 1e-5 and log0["cpc_count"] == 0


def test_reduce_metrics_sums_across_workers():
    def out(mlm, nm, cm, cc, cpc, nc, ccorr):
        return {"loss": torch.tensor(1.0), "mlm_loss_sum": torch.tensor(mlm), "mlm_count": nm, "mlm_correct": cm,
                "cpc_loss_sum": torch.tensor(cpc), "cpc_count": nc, "cpc_correct": ccorr, "cpc_batches": int(nc > 0),
                "ntokens": 10, "nsentences": 2, "sample_size": 1}

    logs = [out(10.0, 5, 2, 3.0, 2.0, 4, 1), out(6.0, 3, 1, 0.0, 0.0, 0, 0)]
    summed = {k: sum(l[k] for l in logs) for k in logs[0]}
    for given in (logs, [summed]):
        with metrics.aggregate() as agg:
            CpcMlmCriterion.reduce_metrics(given)
            v = agg.get_smoothed_values()
        assert abs(v["mlm_loss"] - 16.0 / 8 / math.log(2)) < 1e-3
        assert abs(v["mlm_accuracy"] - 100 * 3 / 8) < 1e-3
        assert abs(v["cpc_loss"] - 2.0 / 4 / math.log(2)) < 1e-3
        assert abs(v["cpc_accuracy"] - 25.0) < 1e-3 and v["cpc_candidates"] == 4


def test_real_model_cpc_gradients_and_weight_zero(task, tiny_model):
    ds = task.dataset("train")
    idx = [i for i in range(len(ds)) if ds[i]["cpc_global_index"].numel() > 0][:3]
    batch = ds.collater([ds[i] for i in idx])
    n = batch["cpc"]["segment_tokens"].size(0)
    assert n >= 3
    tiny_model.zero_grad()
    crit = CpcMlmCriterion(task, 0.8, 0.2)
    loss, _, log = crit(tiny_model, batch)
    loss.backward()
    assert torch.isfinite(loss) and log["cpc_count"] == n and log["mlm_count"] > 0
    assert tiny_model.cpc_head.weight.grad.abs().sum() > 0
    assert tiny_model.encoder.sentence_encoder.embed_global_types.weight.grad.abs().sum() > 0

    def boom(*a, **k):
        raise AssertionError("the second CPC encoder must not run with cpc_weight 0")

    orig = tiny_model.encode_segments_alone
    tiny_model.encode_segments_alone = boom
    try:
        loss0, _, log0 = CpcMlmCriterion(task, 0.8, 0.0)(tiny_model, batch)
    finally:
        tiny_model.encode_segments_alone = orig
    assert torch.isfinite(loss0) and log0["cpc_count"] == 0


# ------------------------------------------------------------------------------------------------------
# fairseq command lines
# ------------------------------------------------------------------------------------------------------

COMMON = ["--user-dir", USER_DIR, "--task", "etc_pretraining", "--criterion", "cpc_mlm", "--arch", "etc_tiny",
          "--max-long-len", "256", "--max-global-len", "32", "--optimizer", "adam", "--lr", "1e-3",
          "--lr-scheduler", "fixed", "--cpu", "--seed", "1", "--log-format", "simple", "--log-interval", "1",
          "--num-workers", "0", "--no-epoch-checkpoints"]


def run_fairseq(module, *args):
    proc = run_python(["-m", module, *args], cwd=REPO, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{module} failed:\n{out[-4000:]}"
    return out


def test_fairseq_train_and_validate(pretrain_data, tmp_path):
    save = tmp_path / "ckpt"
    log = run_fairseq("fairseq_cli.train", str(pretrain_data), *COMMON, "--batch-size", "4", "--max-update", "6",
                      "--disable-validation", "--save-dir", str(save))
    inner = re.findall(r"train_inner \| .*", log)
    assert len(inner) == 6 and "num_updates=6" in inner[-1]
    assert all("mlm_loss=" in l and "cpc_loss=" in l and "cpc_accuracy=" in l for l in inner)
    cpc = [float(m) for m in re.findall(r"cpc_loss=([\d.]+)", log)]
    assert cpc and all(math.isfinite(c) for c in cpc)

    valid = run_fairseq("fairseq_cli.validate", str(pretrain_data), "--user-dir", USER_DIR, "--task", "etc_pretraining",
                        "--path", str(save / "checkpoint_last.pt"), "--cpu", "--max-tokens", "2048", "--num-workers", "0")
    m = re.search(r"valid on 'valid' subset \| (.*)", valid)
    assert m, valid[-3000:]
    for key in ("loss", "mlm_loss", "mlm_accuracy", "cpc_loss", "cpc_accuracy", "cpc_candidates"):
        assert re.search(rf"\| {key} [\d.]+", "| " + m.group(1)), m.group(1)
    mlm = float(re.search(r"mlm_loss ([\d.]+)", m.group(1)).group(1))
    assert 0 < mlm < 12  # log2 of the ~1k vocabulary is ~10


def test_fairseq_train_max_tokens_cpc_weight_zero(pretrain_data, tmp_path):
    log = run_fairseq("fairseq_cli.train", str(pretrain_data), *COMMON, "--max-tokens", "1024", "--max-update", "3",
                      "--cpc-weight", "0", "--disable-validation", "--save-dir", str(tmp_path / "c0"))
    inner = re.findall(r"train_inner \| .*", log)
    assert len(inner) == 3 and all("mlm_loss=" in l for l in inner)
    assert all(int(re.search(r"wpb=([\d.]+)", l).group(1).split(".")[0]) <= 1024 for l in inner)


def test_gpt2_bpe_data_trains_with_whole_word_masking(pretrain_gpt2_prepared, tmp_path):
    """RoBERTa's vocabulary path: GPT-2 BPE data (word starts from the BPE's leading spaces) through the
    task and criterion end to end."""
    data = pretrain_gpt2_prepared.bin_dir
    task = make_task(data)
    task.load_dataset("valid")
    ds = task.dataset("valid")
    assert ds.corpus.tokenizer == "gpt2"
    pad, n_multi_piece_words = task.dictionary.pad(), 0
    for i in range(len(ds)):
        orig, word_starts, _ = original_long(ds, i)
        picked = ds[i]["target"].numpy() != pad
        word = np.cumsum(word_starts)
        n_multi_piece_words += int((np.bincount(word) > 1).sum())
        for w in np.unique(word[picked]):
            assert picked[word == w].all()
    assert n_multi_piece_words > 100  # the check above really met words of several BPE pieces
    log = run_fairseq("fairseq_cli.train", str(data), *COMMON, "--batch-size", "2", "--max-update", "2",
                      "--disable-validation", "--save-dir", str(tmp_path / "g"))
    assert "num_updates=2" in re.findall(r"train_inner \| .*", log)[-1]


def test_etc_base_builds_and_trains_a_step(pretrain_data, tmp_path):
    args = [a if a != "etc_tiny" else "etc_base" for a in COMMON]
    log = run_fairseq("fairseq_cli.train", str(pretrain_data), *args, "--batch-size", "1", "--max-update", "1",
                      "--max-long-len", "128", "--max-global-len", "16", "--disable-validation", "--no-save",
                      # fairseq creates its save dir even with --no-save: keep it out of the repository
                      "--save-dir", str(tmp_path / "unused"))
    params = int(re.search(r"num\. shared model params: ([\d,]+)", log).group(1).replace(",", ""))
    assert 140e6 < params < 150e6  # etc_base without most of its 23M-parameter 30k-word embedding
    assert "num_updates=1" in re.findall(r"train_inner \| .*", log)[-1]
