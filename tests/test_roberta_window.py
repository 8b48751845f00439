"""The ``roberta_window`` baseline of issue 21's ablations (etc_fairseq/finetune/common/roberta.py,
etc_fairseq/finetune/common/roberta_window.py): a fairseq RoBERTa encoder reading only the first ``max_positions`` long
tokens, scoring each sentence from the mean of its tokens' features with the nextsent head.

- exact scoring on a tiny input: which tokens are read, the pooled means, sentences beyond the window
  unscored, the criterion counting an answer beyond the window as lost (0, no loss, no NaN);
- the converted checkpoint computes what fairseq's own RobertaModel computes from the original file;
- a real fairseq RoBERTa (masked_lm, 2 updates on real Wikipedia text) -> convert -> fairseq-train
  ``--arch roberta_window --finetune-from-model`` (2 updates) -> fairseq-validate, whose ``lost`` equals the
  share of held-out answers with no token in the window, computed here from the prepared data.
"""
import argparse
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from etc_fairseq.checkpoint_io import load_checkpoint
from etc_fairseq.models.checkpoint_config import validate_checkpoint_config
from forkserver import run_python

REPO = Path(__file__).resolve().parents[1]
WINDOW = 64
ROBERTA_SIZE = ["--encoder-layers", "2", "--encoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64",
                "--encoder-attention-heads", "2"]


def run(cmd, timeout=600):
    proc = run_python(cmd, cwd=REPO, timeout=timeout)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{cmd[:4]} failed:\n{out[-4000:]}"
    return out


def tiny_model(vocab=20, window=8, seed=0):
    from fairseq.data import Dictionary

    import etc_fairseq.register  # noqa: F401
    from etc_fairseq.finetune.nextsent.decode import SENTENCE_HEAD
    from etc_fairseq.encoder.heads import TokenLogits
    from etc_fairseq.finetune.common.roberta import RobertaWindowConfig, RobertaWindowModel

    d = Dictionary()
    for i in range(vocab):
        d.add_symbol(f"w{i}")
    torch.manual_seed(seed)
    cfg = RobertaWindowConfig(encoder_layers=1, encoder_embed_dim=8, encoder_ffn_embed_dim=16,
                              encoder_attention_heads=2, max_positions=window, dropout=0.0, attention_dropout=0.0)
    model = RobertaWindowModel.build_model(cfg, SimpleNamespace(source_dictionary=d))
    model.register_task_head(SENTENCE_HEAD, TokenLogits(8, 1))
    return model.eval(), d


def tiny_sample(d):
    """One example of 12 long tokens: CLS, question (1..2), sentence 0 at 3..5, sentence 1 at 6..9 (crossing
    the window of 8), sentence 2 at 10..11 (beyond it); a second, shorter example padded."""
    L = 12
    toks = torch.tensor([[d.bos()] + [d.index(f"w{i}") for i in range(L - 1)],
                         [d.bos()] + [d.index(f"w{i}") for i in range(5)] + [d.pad()] * (L - 6)])
    long_sentence = torch.tensor([[-1, -1, -1, 0, 0, 0, 1, 1, 1, 1, 2, 2],
                                  [-1, 0, 0, 1, 1, 1] + [-1] * (L - 6)])
    return {
        "net_input": {"src_tokens": toks, "global_tokens": toks[:, :1], "global_types": torch.zeros(2, 1, dtype=torch.long)},
        "target": {"num_sentences": torch.tensor([[3], [2]]), "long_sentence": long_sentence,
                   "answer_index": torch.tensor([[2], [1]])},
        "ntokens": int(toks.ne(d.pad()).sum()), "nsentences": 2,
    }


def test_scores_read_only_the_window_and_pool_each_sentence():
    from etc_fairseq.finetune.nextsent.decode import SENTENCE_HEAD, sentence_scores

    model, d = tiny_model()
    sample = tiny_sample(d)
    with torch.no_grad():
        features, extra = model(**sample["net_input"], features_only=True)
        assert features.shape == (2, 8, 8) and extra["global_features"] is None
        # the window is fairseq's RoBERTa encoder on the first 8 tokens, nothing else
        ref, _ = model.encoder.extract_features(sample["net_input"]["src_tokens"][:, :8])
        assert torch.equal(features, ref)
        logits, mask = sentence_scores(model, sample, features, extra)
        head = model.task_heads[SENTENCE_HEAD]
        want0 = head(features[0, 3:6].mean(0)).squeeze(-1)
        want1 = head(features[0, 6:8].mean(0)).squeeze(-1)  # only the part of sentence 1 inside the window
        assert mask.tolist() == [[True, True, False], [True, True, False]]
        assert torch.allclose(logits[0, :2], torch.stack([want0, want1]), atol=1e-6)
        assert logits[0, 2] == float("-inf") and logits[1, 2] == float("-inf")
        assert torch.allclose(logits[1, 1], head(features[1, 3:6].mean(0)).squeeze(-1), atol=1e-6)
        # what lies beyond the window cannot change any score
        changed = {**sample, "net_input": {**sample["net_input"], "src_tokens": sample["net_input"]["src_tokens"].clone()}}
        changed["net_input"]["src_tokens"][0, 8:] = d.index("w3")
        f2, e2 = model(**changed["net_input"], features_only=True)
        assert torch.equal(sentence_scores(model, changed, f2, e2)[0], logits)


def test_criterion_counts_an_answer_beyond_the_window_as_lost():
    from etc_fairseq.finetune.nextsent.criterion import EtcNextSentCriterion
    from etc_fairseq.finetune.nextsent.decode import sentence_scores

    model, d = tiny_model()
    model.train()
    sample = tiny_sample(d)
    task = SimpleNamespace(forward_features=lambda m, s: m(**s["net_input"], features_only=True))
    crit = EtcNextSentCriterion(None, task)
    loss, sample_size, log = crit(model, sample)
    assert sample_size == 1 and log["lost_sum"] == 1 and log["nexamples"] == 2
    loss.backward()
    assert torch.isfinite(loss) and all(p.grad is None or torch.isfinite(p.grad).all() for p in model.parameters())
    with torch.no_grad():
        model.eval()
        logits, _ = sentence_scores(model, sample, *model(**sample["net_input"], features_only=True))
        nll = -torch.log_softmax(logits[1, :2], -1)[1]
        _, _, log = crit(model, sample)
    # only the second example (answer in the window) contributes; the first scores 0
    assert log["loss"] == pytest.approx(float(nll), abs=1e-5)
    top = int(logits[1].argmax())
    assert log["acc_sum"] == pytest.approx(1.0 if top == 1 else 0.0)


# ---------------------------------------------------------------------------------------------------------
# through fairseq: a real RoBERTa, converted, fine-tuned and validated on nextsent
# ---------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def roberta_checkpoint(pretrain_data, tmp_path_factory) -> Path:
    """fairseq-train --arch roberta_base (tiny), masked_lm, 2 updates on the real Wikipedia fixture."""
    save = tmp_path_factory.mktemp("roberta_window_src")
    run(["-m", "fairseq_cli.train", str(pretrain_data), "--task", "masked_lm", "--criterion",
         "masked_lm", "--arch", "roberta_base", *ROBERTA_SIZE, "--max-positions", str(WINDOW),
         "--tokens-per-sample", str(WINDOW), "--sample-break-mode", "complete", "--batch-size", "4",
         "--optimizer", "adam", "--lr", "1e-3", "--lr-scheduler", "fixed", "--max-update", "2", "--cpu",
         "--seed", "1", "--num-workers", "0", "--disable-validation", "--no-epoch-checkpoints",
         "--save-dir", str(save)])
    return save / "checkpoint_last.pt"


@pytest.fixture(scope="module")
def converted(roberta_checkpoint, tmp_path_factory):
    from etc_fairseq.finetune.common.roberta_window import main

    out = tmp_path_factory.mktemp("roberta_window") / "init.pt"
    assert main([str(roberta_checkpoint), "--out", str(out)]) == 0
    return out


def test_conversion_keeps_the_encoder_exactly(roberta_checkpoint, converted, pretrain_data, capsys):
    from fairseq import checkpoint_utils

    from etc_fairseq.finetune.common.roberta import RobertaWindowModel, RobertaWindowConfig
    from etc_fairseq.lift.fairseq_roberta import masked_lm_dictionary
    from etc_fairseq.finetune.common.roberta_window import main

    state = load_checkpoint(converted)  # torch's weights-only loader, no extra globals
    validate_checkpoint_config(state, converted)  # the gate fairseq-train --finetune-from-model passes through
    cfg = state["cfg"]["model"]
    assert cfg["_name"] == "roberta_window" and cfg["max_positions"] == WINDOW
    assert (cfg["encoder_layers"], cfg["encoder_embed_dim"], cfg["encoder_ffn_embed_dim"]) == (2, 32, 64)
    assert all(k.startswith("encoder.sentence_encoder.") for k in state["model"])
    # refuses to overwrite, names the file
    capsys.readouterr()
    assert main([str(roberta_checkpoint), "--out", str(converted)]) == 1
    assert str(converted) in capsys.readouterr().err
    # the model flags fairseq-train needs (run.sh reads them)
    assert main(["--flags", str(converted)]) == 0
    assert capsys.readouterr().out.split() == ["--arch", "roberta_window", "--encoder-layers", "2",
                                               "--encoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64",
                                               "--encoder-attention-heads", "2", "--activation-fn", "gelu",
                                               "--max-positions", str(WINDOW)]
    assert main(["--flags", str(roberta_checkpoint)]) == 1  # the unconverted file: refused, not misread

    # fairseq's own RobertaModel from the original file == roberta_window from the converted one
    load = getattr(checkpoint_utils.load_checkpoint_to_cpu, "__wrapped__", checkpoint_utils.load_checkpoint_to_cpu)
    with torch.serialization.safe_globals([argparse.Namespace]):
        orig = load(str(roberta_checkpoint), {"data": str(pretrain_data)})
        models, _, task = checkpoint_utils.load_model_ensemble_and_task([str(roberta_checkpoint)], state=orig)
    ref = models[0].eval()
    d = masked_lm_dictionary(pretrain_data / "dict.txt")
    model = RobertaWindowModel.build_model(RobertaWindowConfig(**{k: v for k, v in cfg.items() if k != "_name"}),
                                           SimpleNamespace(source_dictionary=d))
    model.upgrade_state_dict_named(state["model"], "")
    model.load_state_dict(state["model"], strict=True)
    model.eval()
    torch.manual_seed(0)
    toks = torch.randint(4, len(d) - 1, (2, WINDOW + 20))
    toks[:, 0] = d.bos()
    with torch.no_grad():
        want, _ = ref(toks[:, :WINDOW], features_only=True)
        got, _ = model(toks, features_only=True)
    assert got.shape == (2, WINDOW, 32) and torch.allclose(got, want, atol=1e-5)


def test_finetune_and_validate_through_fairseq(converted, pretrain_data, wiki_dump, tmp_path):
    from etc_fairseq.cli.prepare import main as prepare_main
    from etc_fairseq.data.structured import StructuredDataset
    from etc_fairseq.finetune.nextsent.schema import target_fields

    data = tmp_path / "data"
    assert prepare_main([
        "nextsent", "--dump", str(wiki_dump), "--train", "8", "--valid", "6", "--seed", "2",
        "--out", str(data), "--pretrain-dir", str(pretrain_data), "--max-long-len", "512", "--no-globals",
        "--distractors", "2", "--distractor-paragraphs", "1", "--same-article", "1",
    ]) == 0
    common = ["--user-dir", str(REPO / "user_dir"), "--task", "etc_nextsent", "--criterion", "etc_nextsent",
              "--max-long-len", "512", "--max-global-len", "8", "--cpu", "--num-workers", "0",
              "--required-batch-size-multiple", "1"]
    save = tmp_path / "ckpt"
    log = run(["-m", "fairseq_cli.train", str(data), *common, "--arch", "roberta_window",
               *ROBERTA_SIZE, "--max-positions", str(WINDOW), "--finetune-from-model", str(converted),
               "--batch-size", "4", "--optimizer", "adam", "--lr", "1e-3", "--lr-scheduler", "fixed",
               "--max-update", "2", "--seed", "1", "--no-epoch-checkpoints", "--disable-validation",
               "--log-format", "simple", "--log-interval", "1", "--save-dir", str(save)])
    assert re.search(r"num_updates=2\b", log) and f"Loaded checkpoint {converted}" in log, log[-3000:]
    out = run(["-m", "fairseq_cli.validate", str(data), *common,
               "--path", str(save / "checkpoint_last.pt"), "--valid-subset", "valid", "--batch-size", "2"])
    m = re.search(r"valid on 'valid' subset .*\| accuracy ([\d.]+) \| mrr ([\d.]+) \| lost ([\d.]+)", out)
    assert m, out[-2000:]
    # the answers with no token among the first WINDOW long tokens, counted from the prepared data
    ds = StructuredDataset(str(data), "valid", target_fields(), pad_idx=1, max_long_len=512, max_global_len=8)
    lost = 0
    for i in range(len(ds)):
        ex = ds[i]
        a = int(ex["answer_index"][0])
        lost += a < 0 or not bool((ex["long_sentence"][:WINDOW] == a).any())
    assert lost > 0  # the records are longer than the window: some answers must lie beyond it
    assert float(m.group(3)) == pytest.approx(100.0 * lost / len(ds), abs=0.01)
    assert float(m.group(1)) <= 100.0 - float(m.group(3)) + 1e-6


def test_wikihop_candidates_in_the_window_through_fairseq(converted, pretrain_data, wiki_dump, tmp_path, capsys):
    """The WikiHop-format flat-encoder arm: --no-globals data (query and candidates first), roberta_window with
    the question-cosine head, 2 updates; fairseq-validate's accuracy equals etc-evaluate's on etc-predict's
    file, every record gets one of its candidates."""
    import json

    from etc_fairseq.cli.evaluate import main as evaluate_main
    from etc_fairseq.cli.predict import main as predict_main
    from etc_fairseq.cli.prepare import main as prepare_main
    from examples.wikihop import construct

    raw, data = tmp_path / "raw", tmp_path / "data"
    assert construct.main(["--dump", str(wiki_dump), "--out", str(raw), "--train", "6", "--valid", "4", "--supports",
                           "3", "--seed", "3", "--max-articles", "30", "--train-articles", "20"]) == 0
    assert prepare_main(["wikihop", "--train", str(raw / "train.json"), "--valid", str(raw / "dev.json"), "--out",
                         str(data), "--pretrain-dir", str(pretrain_data), "--max-long-len", "384",
                         "--max-global-len", "8", "--no-globals"]) == 0
    common = ["--user-dir", str(REPO / "user_dir"), "--task", "etc_wikihop", "--criterion", "etc_wikihop",
              "--max-long-len", "384", "--max-global-len", "8", "--cpu", "--num-workers", "0",
              "--required-batch-size-multiple", "1", "--question-cosine"]
    save = tmp_path / "ckpt"
    log = run(["-m", "fairseq_cli.train", str(data), *common, "--arch", "roberta_window", *ROBERTA_SIZE,
               "--max-positions", str(WINDOW), "--finetune-from-model", str(converted), "--batch-size", "3",
               "--optimizer", "adam", "--lr", "1e-3", "--lr-scheduler", "fixed", "--max-update", "2", "--seed", "1",
               "--no-epoch-checkpoints", "--disable-validation", "--log-format", "simple", "--log-interval", "1",
               "--save-dir", str(save)])
    assert re.search(r"num_updates=2\b", log), log[-3000:]
    out = run(["-m", "fairseq_cli.validate", str(data), *common, "--path", str(save / "checkpoint_last.pt"),
               "--valid-subset", "valid", "--batch-size", "2"])
    m = re.search(r"valid on 'valid' subset .*\| accuracy ([\d.]+)", out)
    assert m, out[-2000:]
    pred = tmp_path / "pred.json"
    assert predict_main(["wikihop", "--path", str(save / "checkpoint_last.pt"), "--data", str(data), "--output",
                         str(pred), "--batch-size", "3", "--device", "cpu"]) == 0
    gold = json.loads((raw / "dev.json").read_text())
    predictions = json.loads(pred.read_text())
    assert all(predictions[r["id"]] in r["candidates"] for r in gold)
    capsys.readouterr()
    assert evaluate_main(["wikihop", "--predictions", str(pred), "--gold", str(raw / "dev.json")]) == 0
    assert json.loads(capsys.readouterr().out)["accuracy"] == pytest.approx(float(m.group(1)), abs=1e-3)


def test_huggingface_bert_converts_to_the_same_function(tmp_path):
    """A Hugging Face BERT directory -> roberta_window (the "source model itself" arm of
    examples/lifted_minilm): BERT's positions and token type 0 folded into fairseq's offset position table, so
    the model's features over the first ``max_position_embeddings`` tokens are BERT's own."""
    transformers = pytest.importorskip("transformers")
    from etc_fairseq.finetune.common.roberta import RobertaWindowConfig, RobertaWindowModel
    from etc_fairseq.lift.huggingface import fairseq_dictionary, read_huggingface
    from etc_fairseq.finetune.common.roberta_window import main as convert_main

    vocab, window = 40, 16
    cfg = transformers.BertConfig(vocab_size=vocab, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=32, max_position_embeddings=window, type_vocab_size=2,
                                  layer_norm_eps=1e-5)  # fairseq's LayerNorm epsilon: the functions are then equal
    torch.manual_seed(0)
    bert = transformers.BertModel(cfg).eval()
    with torch.no_grad():  # non-trivial token types, LayerNorms and biases (HF initialises them to 1 / 0)
        for name, p in bert.named_parameters():
            if "LayerNorm" in name or name.endswith("bias") or "token_type" in name:
                p.add_(torch.randn_like(p) * 0.1)
    bert.save_pretrained(tmp_path / "bert")
    words = ["[PAD]", "[unused0]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(vocab - 6)]
    (tmp_path / "bert" / "vocab.txt").write_text("\n".join(words) + "\n")
    out = tmp_path / "window.pt"
    assert convert_main([str(tmp_path / "bert"), "--out", str(out)]) == 0
    ckpt = load_checkpoint(out)
    model_cfg = ckpt["cfg"]["model"]
    assert model_cfg["max_positions"] == window and model_cfg["encoder_layers"] == 2
    src = read_huggingface(tmp_path / "bert")
    model = RobertaWindowModel.build_model(
        RobertaWindowConfig(**{k: v for k, v in model_cfg.items() if k != "_name"}, dropout=0.0, attention_dropout=0.0),
        SimpleNamespace(source_dictionary=fairseq_dictionary(src.symbols)))
    missing, unexpected = model.load_state_dict(ckpt["model"], strict=False)
    assert not unexpected and all(k.startswith("task_heads.") or "version" in k for k in missing)
    model.eval()
    hf_ids = torch.randint(6, vocab, (2, window + 5), generator=torch.Generator().manual_seed(1))
    hf_ids[:, 0] = 3  # [CLS]
    with torch.no_grad():
        features, _ = model(src.fairseq_ids[hf_ids])
        reference = bert(input_ids=hf_ids[:, :window]).last_hidden_state
    assert features.shape == reference.shape == (2, window, 16)
    assert (features - reference).abs().max().item() < 1e-5
