"""``etc_fairseq.hf``'s model classes: the same outputs as the fairseq ``etc`` model on the same weights (the
encoder and every head, fixed blocks and structured inputs, sharing and official-ETC options), the Auto
classes, save_pretrained / from_pretrained bit for bit, the Hugging Face switches (hidden states, gradient
checkpointing, bfloat16, attn_implementation), and bad input refused in one line."""
import json
import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers")

import etc_fairseq.hf as hf  # noqa: E402
from etc_fairseq.errors import CheckpointLoadError  # noqa: E402
from etc_fairseq.hf.convert import export_to_hf  # noqa: E402
from etc_fairseq.models.lifting import build_etc_model  # noqa: E402
from etc_fairseq.lift.huggingface import fairseq_dictionary  # noqa: E402
from etc_fairseq.models import config_for_arch  # noqa: E402
from etc_fairseq.structure.builders import STRUCTURE_KEYS  # noqa: E402
from etc_fairseq.structure.global_tokens import GlobalTokenType  # noqa: E402

SYMBOLS = ["<s>", "<pad>", "</s>", "<unk>"] + [f"w{i}" for i in range(44)] + ["<mask>"]
TINY = dict(encoder_layers=2, encoder_embed_dim=32, encoder_ffn_embed_dim=64, encoder_attention_heads=4,
            local_radius=3, relative_pos_max_distance=2, fixed_block_len=4, dropout=0.0, attention_dropout=0.0)
#: option sets of the encoder (the defaults, official ETC's, RoBERTa's absolute positions, hard masks, sharing)
VARIANTS = {
    "default": {},
    "official": dict(relative_bias=True, shared_kv_per_side=True, shared_out_proj=True, separate_attention_layer_norm=True,
                     pre_layer_norm=True, layer_norm_eps=1e-12, embedding_size=16, segment_vocab_size=4,
                     long_segment_id=1, global_segment_id=0, separate_embedding_layer_norm=True,
                     no_global_type_embeddings=True, index_position_embeddings=64, activation_fn="gelu_accurate",
                     relative_vocab_size=16),
    "roberta": dict(use_absolute_positions=True, max_positions=64, hard_g2l=True, hard_l2g=True),
    "shared": dict(shared_q=True, shared_kv=True, shared_out_proj=True, separate_ffn=True,
                   shared_relative_embeddings=True, classification_head_input="global_cls"),
}


def fairseq_model(variant="default", seed=0, heads=()):
    cfg = config_for_arch("etc", **TINY, **VARIANTS[variant])
    model = build_etc_model(cfg, fairseq_dictionary(SYMBOLS), seed=seed)
    for name in heads:
        model.register_classification_head(name, num_classes=3)
    with torch.no_grad():  # non-zero biases and relative tables, so that a swapped tensor shows
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())) * 0.05)
    return cfg, model.eval()


def inputs(batch=2, long_len=13, seed=1):
    """Padded long input with a document structure: CLS + 2 sentences per row; the second row shorter."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, len(SYMBOLS) - 1, (batch, long_len), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0
    glob = torch.tensor([[0, 0, 0], [0, 0, 1]])  # <s> <s> <s> / <s> <s> <pad>
    gmask = glob.ne(1).long()
    types_ = torch.tensor([[int(GlobalTokenType.CLS)] + [int(GlobalTokenType.SENTENCE)] * 2] * 2)
    seg = torch.tensor([[0] + [1] * 6 + [2] * 6, [0] + [1] * 8 + [-1] * 4])
    return dict(input_ids=ids, attention_mask=mask), dict(global_input_ids=glob, global_attention_mask=gmask,
                                                          global_types=types_, long_segment=seg)


def fairseq_net_input(plain, structured=None):
    src = plain["input_ids"].masked_fill(plain["attention_mask"].eq(0), 1)
    if structured is None:
        return dict(src_tokens=src)
    glob = structured["global_input_ids"].masked_fill(structured["global_attention_mask"].eq(0), 1)
    return dict(src_tokens=src, global_tokens=glob, global_types=structured["global_types"],
                structure={"long_segment": structured["long_segment"]})


def to_hf(cfg, model, head=None):
    return export_to_hf(model.state_dict(), cfg, SYMBOLS, head=head).model.eval()


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_hf_encoder_and_heads_equal_the_fairseq_model(variant):
    cfg, model = fairseq_model(variant, heads=["topic"])
    plain, structured = inputs()
    base = to_hf(cfg, model, head="none")
    mlm = to_hf(cfg, model, head="lm")
    cls = to_hf(cfg, model, head="classification_heads.topic")
    assert isinstance(base, hf.EtcModel) and isinstance(mlm, hf.EtcForMaskedLM)
    assert isinstance(cls, hf.EtcForSequenceClassification) and cls.config.fairseq_head == "classification_heads.topic"
    with torch.no_grad():
        for extra in (None, structured):
            net = fairseq_net_input(plain, extra)
            segments, fs_segments = {}, {}
            if cfg.segment_vocab_size:  # segment ids other than the defaults (long 1, global 0)
                segments = dict(token_type_ids=plain["attention_mask"] * 2)
                fs_segments = dict(segment_ids=segments["token_type_ids"])
                if extra is not None:
                    segments["global_token_type_ids"] = fs_segments["global_segment_ids"] = extra["global_types"] % 4
            long, out = model(**net, **fs_segments, features_only=True)
            ours = base(**plain, **(extra or {}), **segments)
            keep = plain["attention_mask"].bool()
            gkeep = ~out["global_padding_mask"]
            torch.testing.assert_close(ours.last_hidden_state[keep], long[keep], atol=1e-6, rtol=0)
            torch.testing.assert_close(ours.global_last_hidden_state[gkeep], out["global_features"][gkeep], atol=1e-6, rtol=0)
            assert torch.equal(ours.global_attention_mask.bool(), gkeep)
            logits, _ = model(**net, **fs_segments)
            torch.testing.assert_close(mlm(**plain, **(extra or {}), **segments).logits[keep], logits[keep], atol=1e-6, rtol=0)
            fs_cls, _ = model(**net, **fs_segments, classification_head_name="topic")
            torch.testing.assert_close(cls(**plain, **(extra or {}), **segments).logits, fs_cls, atol=1e-6, rtol=0)


def test_structured_task_heads_equal_the_fairseq_heads():
    """The etc_structured heads (record: a pooled classifier on the first CLS global token; global: a class per
    global token; span: start/end logits per long token) go to the sequence / token classification and
    question-answering classes and give the task's logits."""
    from etc_fairseq.encoder.heads import PooledClassifier, TokenLogits
    from etc_fairseq.finetune.structured.decode import HEADS, global_logits, record_logits, span_logits

    cfg, model = fairseq_model()
    model.register_task_head(HEADS["record"], PooledClassifier(32, 3, activation_fn="tanh"))
    model.register_task_head(HEADS["global"], TokenLogits(32, 5))
    model.register_task_head(HEADS["span"], TokenLogits(32, 2))
    plain, structured = inputs()
    net = fairseq_net_input(plain, structured)
    with torch.no_grad():
        long, extra = model(**net, features_only=True)
        record = to_hf(cfg, model, head="task_heads.structured_record")
        assert record.config.classification_head_input == "global_cls" and record.config.num_labels == 3
        torch.testing.assert_close(record(**plain, **structured).logits, record_logits(model, extra, net["global_types"]),
                                   atol=1e-6, rtol=0)
        glob = to_hf(cfg, model, head="task_heads.structured_global")
        assert isinstance(glob, hf.EtcForTokenClassification) and glob.config.token_classification_input == "global"
        torch.testing.assert_close(glob(**plain, **structured).logits, global_logits(model, extra), atol=1e-6, rtol=0)
        span = to_hf(cfg, model, head="task_heads.structured_span")
        start, end = span_logits(model, long, extra["long_padding_mask"])
        out = span(**plain, **structured)
        keep = plain["attention_mask"].bool()
        torch.testing.assert_close(out.start_logits[keep], start[keep], atol=1e-6, rtol=0)
        torch.testing.assert_close(out.end_logits[keep], end[keep], atol=1e-6, rtol=0)


def test_several_heads_need_head_and_unknown_task_heads_are_refused():
    from etc_fairseq.encoder.heads import TokenLogits
    from etc_fairseq.lift import LiftError

    cfg, model = fairseq_model(heads=["a", "b"])
    with pytest.raises(LiftError, match=r"several heads \(classification_heads.a, classification_heads.b\); pick one with --head"):
        to_hf(cfg, model)
    model.register_task_head("nq_long_span", TokenLogits(32, 2))
    with pytest.raises(LiftError, match="head 'task_heads.nq_long_span' has no Hugging Face class"):
        to_hf(cfg, model, head="task_heads.nq_long_span")
    assert isinstance(to_hf(cfg, model, head="none"), hf.EtcModel)


def test_config_carries_every_encoder_field_and_refuses_unknown_ones(tmp_path):
    from etc_fairseq.encoder.config import encoder_config_fields

    config = hf.EtcConfig(vocab_size=49, hidden_size=32, num_attention_heads=4, encoder_layers=1, local_radius=5)
    assert config.encoder_embed_dim == 32 and config.num_hidden_layers == 1
    config.save_pretrained(tmp_path)
    stored = json.loads((tmp_path / "config.json").read_text())
    assert set(encoder_config_fields()) <= set(stored) and stored["model_type"] == "etc"
    assert hf.EtcConfig.from_pretrained(tmp_path).to_dict() == config.to_dict()
    for field, value, words in [("attention_window", 3, "unknown field 'attention_window'"),
                                ("local_radius", "3", "config field 'local_radius' = '3': expected int"),
                                ("activation_fn", "gelu_fast", "activation_fn='gelu_fast'"),
                                ("pad_token_id", 49, "field 'pad_token_id' = 49: expected a token id in 0..48"),
                                ("relative_vocab_size", 3, "relative_vocab_size=3 is smaller")]:
        bad = dict(stored, **{field: value})
        (tmp_path / "config.json").write_text(json.dumps(bad))
        with pytest.raises(CheckpointLoadError) as e:
            transformers.AutoConfig.from_pretrained(tmp_path)
        assert str(e.value).startswith(f"{tmp_path / 'config.json'}: ") and words in str(e.value)
        assert "\n" not in str(e.value)


def test_presets_are_the_encoders_named_sizes():
    from etc_fairseq.encoder import EtcEncoderConfig

    config = hf.EtcConfig.preset("etc_base", vocab_size=30522, num_labels=4, local_radius=42)
    assert config.encoder_config() == EtcEncoderConfig.preset("etc_base", local_radius=42)
    assert (config.hidden_size, config.num_hidden_layers, config.vocab_size, config.num_labels) == (768, 12, 30522, 4)
    with torch.device("meta"):  # shapes only: the paper's parameter count (tests/test_model.py's, fairseq side)
        model = hf.EtcForMaskedLM(config)
    assert abs(sum(p.numel() for p in model.parameters()) - 166e6) / 166e6 < 0.02
    with pytest.raises(ValueError, match="unknown ETC preset 'etc_huge'"):
        hf.EtcConfig.preset("etc_huge")


def tiny_hf(cls=None, **overrides):
    torch.manual_seed(0)
    config = hf.EtcConfig(vocab_size=len(SYMBOLS), pad_token_id=1, num_labels=3, **{**TINY, **overrides})
    return (cls or hf.EtcForMaskedLM)(config).eval()


def test_save_pretrained_from_pretrained_round_trip_bit_for_bit_through_auto_classes(tmp_path):
    plain, structured = inputs()
    for cls, auto in [(hf.EtcModel, transformers.AutoModel), (hf.EtcForMaskedLM, transformers.AutoModelForMaskedLM),
                      (hf.EtcForSequenceClassification, transformers.AutoModelForSequenceClassification),
                      (hf.EtcForTokenClassification, transformers.AutoModelForTokenClassification),
                      (hf.EtcForQuestionAnswering, transformers.AutoModelForQuestionAnswering)]:
        model = tiny_hf(cls)
        out = tmp_path / cls.__name__
        model.save_pretrained(out)
        loaded = auto.from_pretrained(out).eval()
        assert type(loaded) is cls
        a, b = model.state_dict(), loaded.state_dict()
        assert sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a)
        with torch.no_grad():
            for x, y in zip(model(**plain, **structured).to_tuple(), loaded(**plain, **structured).to_tuple()):
                assert torch.equal(x, y)
        # saving is deterministic: the loaded model saves the same files, byte for byte
        again = tmp_path / (cls.__name__ + "_again")
        loaded.save_pretrained(again)
        assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in again.iterdir())
        assert (out / "model.safetensors").read_bytes() == (again / "model.safetensors").read_bytes()
    mlm = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "EtcForMaskedLM")
    assert mlm.lm_head.weight is mlm.etc.encoder.embed_tokens.weight  # tied again after loading


def test_encoder_tensors_that_do_not_fit_are_refused_in_one_line(tmp_path):
    from safetensors.torch import load_file, save_file

    model = tiny_hf()
    model.save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    state = load_file(str(weights))
    key = "etc.encoder.layers.1.self_attn.q_proj.long.weight"
    cases = {"missing": {k: v for k, v in state.items() if k != key},
             "not part of this model": dict(state, **{"etc.encoder.layers.2.fc.weight": torch.zeros(2)}),
             "of another shape": dict(state, **{key: torch.zeros(32, 16)})}
    for words, damaged in cases.items():
        save_file(damaged, str(weights), metadata={"format": "pt"})
        with pytest.raises(CheckpointLoadError) as e:
            transformers.AutoModelForMaskedLM.from_pretrained(tmp_path)
        assert str(e.value).startswith(f"{weights}: encoder tensor 'etc.encoder.layers.") and words in str(e.value)
        assert "\n" not in str(e.value)
    # a head the checkpoint lacks starts fresh (Hugging Face's rule for fine-tuning)
    save_file(state, str(weights), metadata={"format": "pt"})
    cls, info = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path, output_loading_info=True)
    assert {k for k in info["missing_keys"]} == {f"classifier.{m}.{p}" for m in ("dense", "out_proj") for p in ("weight", "bias")}


def test_hidden_states_losses_and_return_dict():
    plain, structured = inputs()
    model = tiny_hf()
    out = model(**plain, **structured, output_hidden_states=True)
    assert len(out.hidden_states) == len(out.global_hidden_states) == 3  # embeddings + 2 layers
    base = model.etc(**plain, **structured, output_hidden_states=True)
    assert torch.equal(base.hidden_states[-1], base.last_hidden_state)
    assert torch.equal(out.global_hidden_states[-1], out.global_last_hidden_state)
    labels = torch.full_like(plain["input_ids"], -100)
    labels[0, 3] = 7
    out = model(**plain, labels=labels)
    expected = torch.nn.functional.cross_entropy(out.logits[0, 3:4], torch.tensor([7]))
    torch.testing.assert_close(out.loss, expected)
    loss, logits = model(**plain, labels=labels, return_dict=False)[:2]
    assert torch.equal(loss, out.loss) and torch.equal(logits, out.logits)
    seq = tiny_hf(hf.EtcForSequenceClassification)
    assert seq(**plain, labels=torch.tensor([0, 2])).loss.item() > 0 and seq.config.problem_type == "single_label_classification"
    tok = tiny_hf(hf.EtcForTokenClassification, token_classification_input="global")
    assert tok(**plain, **structured, labels=torch.tensor([[0, 1, 2], [1, 1, -100]])).logits.shape == (2, 3, 3)
    qa = tiny_hf(hf.EtcForQuestionAnswering)
    assert qa(**plain, start_positions=torch.tensor([1, 2]), end_positions=torch.tensor([3, 99])).loss.item() > 0


def test_forward_arguments_are_the_structure_keys():
    import inspect

    for cls in (hf.EtcModel, hf.EtcForMaskedLM, hf.EtcForSequenceClassification, hf.EtcForTokenClassification,
                hf.EtcForQuestionAnswering):
        names = list(inspect.signature(cls.forward).parameters)
        assert [n for n in names if n in STRUCTURE_KEYS] == list(STRUCTURE_KEYS)


def test_attn_implementations_give_the_same_outputs():
    plain, structured = inputs()
    model = tiny_hf()
    with torch.no_grad():
        ref = model(**plain, **structured).logits
        assert model.config._attn_implementation == "auto"
        for name in ("blocked", "dense", "eager", "autograd"):
            model.set_attn_implementation(name)
            torch.testing.assert_close(model(**plain, **structured).logits, ref, atol=1e-5, rtol=0)
            assert model.etc.encoder.backend == hf.ATTN_IMPLEMENTATIONS[name]
    with pytest.raises(ValueError, match="attn_implementation='sdpa': ETC's attention kernels are"):
        model.set_attn_implementation("sdpa")
    with pytest.raises(ValueError, match="output_attentions: ETC's attention kernels never form"):
        model(**plain, output_attentions=True)


def test_gradient_checkpointing_gives_the_same_gradients():
    plain, structured = inputs()
    labels = plain["input_ids"].masked_fill(plain["attention_mask"].eq(0), -100)

    def grads(model):
        model.train()
        torch.manual_seed(3)
        model(**plain, **structured, labels=labels).loss.backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    plain_run = grads(tiny_hf(dropout=0.1))
    model = tiny_hf(dropout=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # transformers 5 renamed it activation_checkpointing_enable
        model.gradient_checkpointing_enable()
    assert model.is_activation_checkpointing and model.etc.encoder.cfg.checkpoint_activations
    ckpt_run = grads(model)
    assert sorted(plain_run) == sorted(ckpt_run)
    for k in plain_run:
        torch.testing.assert_close(ckpt_run[k], plain_run[k], atol=1e-6, rtol=0)
    model.activation_checkpointing_disable()
    assert not model.etc.encoder.cfg.checkpoint_activations


def test_bfloat16_loading_runs_close_to_float32(tmp_path):
    plain, structured = inputs()
    model = tiny_hf()
    model.save_pretrained(tmp_path)
    half = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path, dtype=torch.bfloat16).eval()
    assert {p.dtype for p in half.parameters()} == {torch.bfloat16}
    old_spelling = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path, torch_dtype=torch.bfloat16)
    assert {p.dtype for p in old_spelling.parameters()} == {torch.bfloat16}  # transformers 4's name still works
    with torch.no_grad():
        ref = model(**plain, **structured).logits
        out = half(**plain, **structured).logits
    assert out.dtype == torch.bfloat16
    keep = plain["attention_mask"].bool()
    assert (out.float() - ref)[keep].abs().max() < 0.1 * ref[keep].abs().max()


def test_ids_outside_the_vocabulary_are_named():
    plain, _ = inputs()
    bad = plain["input_ids"].clone()
    bad[0, 2] = len(SYMBOLS)
    with pytest.raises(ValueError, match=r"input_ids holds the id 49, outside the model's vocabulary 0..48"):
        tiny_hf()(input_ids=bad)


NO_FAIRSEQ = r'''
import sys
sys.modules["fairseq"] = None  # importing fairseq now fails: the Hugging Face adapter must not need it
from pathlib import Path
import torch
import transformers
import etc_fairseq.hf as hf
from etc_fairseq.finetune.structured.builder import Document
from etc_fairseq.hf.tokenization import fast_tokenizer
from etc_fairseq.lift.huggingface import fairseq_order

fixture, out = Path(sys.argv[1]), Path(sys.argv[2])
vocab = (fixture / "vocab_bert_uncased_english.txt").read_text().split("\n")[:128]
symbols, _ = fairseq_order(vocab, "bert", "vocab")
tok, _ = fast_tokenizer({"type": "wordpiece", "vocab": "vocab_bert_uncased_english.txt"}, fixture, symbols)
config = hf.EtcConfig(vocab_size=len(symbols), encoder_layers=1, hidden_size=32, num_attention_heads=4,
                      intermediate_size=64, global_token_ids={"sentence": symbols.index("[unused0]")})
hf.EtcForMaskedLM(config).save_pretrained(out)
tok.save_pretrained(out)
model = transformers.AutoModelForMaskedLM.from_pretrained(out).eval()
processor = hf.EtcProcessor.from_pretrained(out)
doc = Document("d")
doc.paragraph(["the cat sat on the mat", "it was a cat"])
for batch in (processor.encode_documents([["the cat sat.", "it was."], ["the mat."]]), processor.encode_records([doc]),
              processor.tokenizer(["the cat", "the"], padding=True, return_tensors="pt")):
    with torch.no_grad():
        assert model(**batch).logits.shape[:2] == batch["input_ids"].shape
assert "fairseq" not in {m.split(".")[0] for m, v in sys.modules.items() if v is not None}
print("ok")
'''


def test_the_adapter_runs_without_fairseq(tmp_path):
    """``pip install etc-fairseq[hf]`` without fairseq: configs, models, tokenizers, the processor (documents
    and Document records) and the Auto classes work with ``import fairseq`` failing."""
    import subprocess
    import sys
    from pathlib import Path

    fixture = Path(__file__).parent / "fixtures" / "official" / "shared"
    proc = subprocess.run([sys.executable, "-c", NO_FAIRSEQ, str(fixture), str(tmp_path / "m")], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]


def test_push_to_hub_uploads_the_saved_directory(tmp_path, monkeypatch):
    """push_to_hub is not run against the Hub (no network): its repository creation, model card and upload are
    replaced, and the folder it would upload is compared with what save_pretrained writes."""
    import transformers.utils.hub as hub

    uploaded = {}

    class Repo:
        repo_id = "someone/etc-tiny"

    class Api:
        def create_repo(self, repo_id, **kwargs):
            return Repo()

    class Card:
        def save(self, path):
            open(path, "w").write("card\n")

    def upload(working_dir, repo_id, **kwargs):
        from pathlib import Path

        uploaded.update({p.name: p.read_bytes() for p in Path(working_dir).iterdir()})

    monkeypatch.setattr(hub, "hf_api", lambda: Api())
    monkeypatch.setattr(hub, "create_and_tag_model_card", lambda *args, **kwargs: Card())
    model = tiny_hf(hf.EtcForSequenceClassification)
    monkeypatch.setattr(model, "_upload_modified_files", upload)
    model.push_to_hub("someone/etc-tiny")
    model.save_pretrained(tmp_path)
    saved = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    assert uploaded.pop("README.md") == b"card\n" and uploaded == saved


def test_question_answering_ignores_unlabelled_and_outside_positions():
    plain, _ = inputs()
    qa = tiny_hf(hf.EtcForQuestionAnswering)
    with torch.no_grad():
        out = qa(**plain)
        one = qa(**plain, start_positions=torch.tensor([1, -100]), end_positions=torch.tensor([3, -100])).loss
        beyond = qa(**plain, start_positions=torch.tensor([1, 500]), end_positions=torch.tensor([3, 500])).loss
    expected = (torch.nn.functional.cross_entropy(out.start_logits[:1], torch.tensor([1]))
                + torch.nn.functional.cross_entropy(out.end_logits[:1], torch.tensor([3]))) / 2
    torch.testing.assert_close(one, expected)
    torch.testing.assert_close(beyond, expected)


def test_resize_token_embeddings_keeps_the_lm_head_tied(tmp_path):
    plain, _ = inputs()
    model = tiny_hf()
    with torch.no_grad():
        before = model(**plain).logits
    model.resize_token_embeddings(len(SYMBOLS) + 7)
    assert model.config.vocab_size == model.etc.encoder.vocab_size == len(SYMBOLS) + 7
    assert model.lm_head.weight is model.etc.encoder.embed_tokens.weight and model.lm_head.bias.shape == (len(SYMBOLS) + 7,)
    with torch.no_grad():
        after = model(**plain).logits
    torch.testing.assert_close(after[..., : len(SYMBOLS)], before)  # the old rows compute what they did
    model.save_pretrained(tmp_path)
    assert transformers.AutoModelForMaskedLM.from_pretrained(tmp_path).config.vocab_size == len(SYMBOLS) + 7
