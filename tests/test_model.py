"""The ``etc`` model: architectures and parameter counts, sharing switches, fixed-block inputs,
explicit structured inputs, padding invariance, activation checkpointing, heads, checkpoint versions."""

import dataclasses
import types

import pytest
import torch
from fairseq.data import Dictionary

from etc_fairseq.encoder.config import PRESETS, EtcEncoderConfig, as_encoder_config
from etc_fairseq.errors import CheckpointLoadError
from etc_fairseq.models import ETC_FORMAT_VERSION, EtcModel, config_for_arch
from etc_fairseq.structure.global_tokens import GlobalTokenType


def make_dictionary(size: int) -> Dictionary:
    d = Dictionary()
    for i in range(size - len(d)):
        d.add_symbol(f"w{i}")
    assert len(d) == size
    return d


def build(arch: str, vocab: int = 200, device=None, **overrides) -> EtcModel:
    cfg = config_for_arch(arch, **overrides)
    task = types.SimpleNamespace(source_dictionary=make_dictionary(vocab))
    if device is not None:
        with torch.device(device):
            return EtcModel.build_model(cfg, task)
    return EtcModel.build_model(cfg, task)


def num_params(model) -> int:
    # The LM head's output weight is the token embedding (tied): count each tensor once.
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


@pytest.mark.parametrize(
    "arch,vocab,paper_count",
    [
        ("etc_base", 30522, 166e6),
        ("etc_base_shared", 30522, 109e6),
        ("etc_large", 50265, 558e6),
    ],
)
def test_parameter_counts_match_paper(arch, vocab, paper_count):
    # Built on the meta device: shapes only, no memory, so etc_large costs nothing.
    model = build(arch, vocab, device="meta")
    n = num_params(model)
    assert abs(n - paper_count) / paper_count < 0.02, f"{arch}: {n / 1e6:.1f}M vs paper {paper_count / 1e6:.0f}M"


def test_sharing_switches_create_the_right_modules():
    sep = build("etc_tiny").encoder.sentence_encoder.layers[0]
    assert set(sep.self_attn.q_proj) == {"long", "global"}
    assert set(sep.self_attn.k_proj) == {"l2l", "l2g", "g2g", "g2l"}
    assert set(sep.self_attn.v_proj) == {"l2l", "l2g", "g2g", "g2l"}
    assert set(sep.self_attn.out_proj) == {"long", "global"}
    assert set(sep.ffn) == {"shared"}
    shared = build("etc_tiny", shared_q=True, shared_kv=True, shared_out_proj=True, separate_ffn=True).encoder
    layer = shared.sentence_encoder.layers[0]
    assert set(layer.self_attn.q_proj) == set(layer.self_attn.k_proj) == {"shared"}
    assert set(layer.ffn) == {"long", "global"}


def test_arch_defaults_and_overrides():
    cfg = config_for_arch("etc_large")
    assert (cfg.encoder_layers, cfg.encoder_embed_dim, cfg.encoder_attention_heads) == (24, 1024, 16)
    assert (cfg.encoder_ffn_embed_dim, cfg.local_radius, cfg.relative_pos_max_distance) == (4096, 169, 24)
    cfg = config_for_arch("etc_base", encoder_layers=3, local_radius=7)
    assert (cfg.encoder_layers, cfg.local_radius, cfg.encoder_embed_dim) == (3, 7, 768)
    assert config_for_arch("etc_base_shared").shared_kv and not config_for_arch("etc_base").shared_kv
    with pytest.raises(ValueError, match="unknown ETC architecture"):
        config_for_arch("roberta_base")


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_is_the_fairseq_architecture_of_its_name(name):
    """The core's presets and fairseq's ``--arch`` resolve to the same fields, and overrides win in both."""
    assert dataclasses.asdict(EtcEncoderConfig.preset(name)) == dataclasses.asdict(as_encoder_config(config_for_arch(name)))
    tuned = EtcEncoderConfig.preset(name, encoder_layers=1, local_radius=3)
    assert (tuned.encoder_layers, tuned.local_radius) == (1, 3)
    assert tuned == as_encoder_config(config_for_arch(name, encoder_layers=1, local_radius=3))


def test_unknown_preset_or_field_is_refused_by_name():
    with pytest.raises(ValueError, match="unknown ETC preset 'etc_huge'.*etc_base"):
        EtcEncoderConfig.preset("etc_huge")
    with pytest.raises(ValueError, match=r"unknown EtcEncoderConfig fields \['layers'\]"):
        EtcEncoderConfig.preset("etc_tiny", layers=3)


def test_lm_head_is_tied_to_token_embeddings():
    enc = build("etc_tiny").encoder
    assert enc.lm_head.weight is enc.sentence_encoder.embed_tokens.weight


def _tokens(lengths, pad=1, vocab=200, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = torch.full((len(lengths), max(lengths)), pad, dtype=torch.long)
    for b, n in enumerate(lengths):
        out[b, :n] = torch.randint(4, vocab, (n,), generator=g)
    return out


def test_fixed_block_forward_shapes_and_logits():
    model = build("etc_tiny").eval()
    src = _tokens([40, 23])
    logits, extra = model(src)
    assert logits.shape == (2, 40, 200)
    # fixed_block_len 16: ceil(40/16) = 3 global tokens, the second row uses 2 of them.
    assert extra["global_features"].shape == (2, 3, 64)
    assert extra["global_padding_mask"].tolist() == [[False, False, False], [False, False, True]]
    masked = torch.zeros_like(src, dtype=torch.bool)
    masked[0, 3] = masked[1, 5] = True
    assert model(src, masked_tokens=masked)[0].shape == (2, 200)
    assert torch.isfinite(logits).all()


def test_padding_does_not_change_features():
    """A sequence padded inside a batch gives the features it gets alone: padding is masked in all
    four attention pieces and fixed blocks are counted on real tokens."""
    model = build("etc_tiny", local_radius=3).eval()
    src = _tokens([37, 21], seed=1)
    feats, extra = model(src, features_only=True)
    alone, extra_alone = model(src[1:, :21], features_only=True)
    torch.testing.assert_close(feats[1, :21], alone[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(
        extra["global_features"][1, :2], extra_alone["global_features"][0], rtol=1e-5, atol=1e-5
    )


def test_structure_changes_the_output():
    """Explicit global tokens and structure ids reach the attention: cutting the long input into
    two contexts changes features that cross the cut, not the ones far from it."""
    model = build("etc_tiny", local_radius=2).eval()
    src = _tokens([12], seed=2)
    glob = torch.tensor([[0, 0]])
    types_ = torch.full_like(glob, int(GlobalTokenType.SENTENCE))
    seg = torch.tensor([[0] * 6 + [1] * 6])
    one_context = {"long_segment": seg}
    two_contexts = {"long_segment": seg, "long_context": torch.tensor([[0] * 6 + [1] * 6])}
    a, _ = model(src, features_only=True, global_tokens=glob, global_types=types_, structure=one_context)
    b, _ = model(src, features_only=True, global_tokens=glob, global_types=types_, structure=two_contexts)
    assert not torch.allclose(a[0, 5], b[0, 5])  # token 5 no longer sees tokens 6, 7
    with pytest.raises(ValueError, match="unknown structure keys"):
        model(src, global_tokens=glob, global_types=types_, structure={"sentence_ids": seg})


def test_relative_positions_take_any_length_absolute_tables_cap_it():
    """No absolute position embeddings (the default): nothing caps the length, so a model configured for
    512 long / 2 global tokens runs on 4096 long tokens with 256 fixed-block global tokens, and fairseq
    (``resolve_max_positions``) sees no model limit. With absolute tables the cap stays, naming the flag."""
    from fairseq.utils import resolve_max_positions

    torch.manual_seed(0)
    model = build("etc_tiny", max_positions=512, max_global_positions=2).eval()
    assert model.max_positions() is None and resolve_max_positions(4096, model.max_positions()) == 4096
    with torch.no_grad():
        long, extra = model(_tokens([4096, 700]), features_only=True)
    assert long.shape == (2, 4096, 64) and extra["global_features"].shape == (2, 256, 64)
    assert torch.isfinite(long[0]).all()
    # the same weights on the first 700 tokens alone: padding of the long row does not change them
    with torch.no_grad():
        short, _ = model(_tokens([4096, 700])[1:, :700], features_only=True)
    assert torch.allclose(short[0], long[1, :700], atol=1e-5)

    absolute = build("etc_tiny", max_positions=512, use_absolute_positions=True)
    assert absolute.max_positions() == 512 and resolve_max_positions(4096, absolute.max_positions()) == 512
    absolute(_tokens([512]))
    with pytest.raises(ValueError, match=r"length 513 exceeds max_positions=512 \(--max-positions\)"):
        absolute(_tokens([513]))
    indexed = build("etc_tiny", index_position_embeddings=100)
    assert indexed.max_positions() == 100
    with pytest.raises(ValueError, match=r"exceeds index_position_embeddings=100 \(--index-position-embeddings\)"):
        indexed(_tokens([101]))


def test_checkpoint_activations_same_outputs_and_grads_less_memory():
    torch.manual_seed(0)
    plain = build("etc_tiny", dropout=0.1, attention_dropout=0.1)
    ckpt = build("etc_tiny", dropout=0.1, attention_dropout=0.1, checkpoint_activations=True)
    ckpt.load_state_dict(plain.state_dict())
    src = _tokens([48, 30], seed=3)

    def run(model):
        saved = []

        def pack(t):
            saved.append(t.numel() * t.element_size())
            return t

        torch.manual_seed(123)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            logits, extra = model(src)
            loss = logits.float().logsumexp(-1).mean() + extra["global_features"].pow(2).mean()
        loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        return loss.detach(), grads, sum(saved)

    loss_a, grads_a, saved_a = run(plain.train())
    loss_b, grads_b, saved_b = run(ckpt.train())
    assert torch.equal(loss_a, loss_b)
    assert grads_a.keys() == grads_b.keys()
    for n in grads_a:
        torch.testing.assert_close(grads_a[n], grads_b[n], rtol=0, atol=1e-6, msg=n)
    assert saved_b < 0.6 * saved_a, (saved_a, saved_b)


def test_classification_head_on_long_or_global_cls():
    model = build("etc_tiny").eval()
    model.register_classification_head("cls", num_classes=3)
    src = _tokens([20, 20], seed=4)
    out, _ = model(src, classification_head_name="cls")
    assert out.shape == (2, 3)
    g_model = build("etc_tiny", classification_head_input="global_cls").eval()
    g_model.register_classification_head("cls", num_classes=3)
    g_model.load_state_dict(model.state_dict())
    out_g, extra = g_model(src, classification_head_name="cls")
    expected = g_model.classification_heads["cls"](extra["global_features"])
    torch.testing.assert_close(out_g, expected)
    assert not torch.allclose(out, out_g)


def test_upgrade_state_dict_checks_format_version_and_heads():
    model = build("etc_tiny")
    state = model.state_dict()
    assert state["encoder.version"].item() == ETC_FORMAT_VERSION
    newer = dict(state)
    newer["encoder.version"] = torch.tensor([ETC_FORMAT_VERSION + 1.0])
    with pytest.raises(CheckpointLoadError, match="newer than this installation"):
        model.upgrade_state_dict_named(newer, "")
    # A head stored in the checkpoint but absent from the model is dropped unless asked for.
    donor = build("etc_tiny")
    donor.register_classification_head("extra", num_classes=5)
    with_head = dict(donor.state_dict())
    model.upgrade_state_dict_named(with_head, "")
    assert not any(k.startswith("classification_heads.extra") for k in with_head)
    keeper = build("etc_tiny", load_checkpoint_heads=True)
    with_head = dict(donor.state_dict())
    keeper.upgrade_state_dict_named(with_head, "")
    keeper.load_state_dict(with_head)
    assert keeper.classification_heads["extra"].out_proj.out_features == 5


def test_label_vocabulary_config_must_keep_builder_labels():
    model = build("etc_tiny", relative_structure_labels="belongs,not_belongs,other_context,linked,parent,child,extra")
    assert model.encoder.sentence_encoder.label_vocab.size == 2 * 4 + 1 + 7
    assert model.encoder.sentence_encoder.layers[0].self_attn.rel_emb["long"].shape == (16, 4, 16)
    with pytest.raises(ValueError, match="lacks"):
        build("etc_tiny", relative_structure_labels="belongs,not_belongs")


def test_encode_segments_alone_matches_a_one_global_token_input():
    model = build("etc_tiny").eval()
    seg = _tokens([9, 5], seed=5)
    got = model.encode_segments_alone(seg)
    assert got.shape == (2, 64)
    # row 1 alone, unpadded, as an explicit single-sentence structured input
    row = seg[1:, :5]
    _, extra = model(
        row, features_only=True, global_tokens=torch.tensor([[0]]),
        global_types=torch.tensor([[int(GlobalTokenType.SENTENCE)]]),
        structure={"long_segment": torch.zeros_like(row)},
    )
    torch.testing.assert_close(got[1], extra["global_features"][0, 0], rtol=1e-5, atol=1e-5)
    scores = model.cpc_scores(got, got)
    assert scores.shape == (2, 2)
    torch.testing.assert_close(scores[0, 1], model.cpc_head(got[0]) @ got[1])


def test_fairseq_command_line_flags_switch_features_on_and_override_the_arch():
    from fairseq import options

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(
        parser,
        ["DATA", "--task", "masked_lm", "--arch", "etc_tiny", "--separate-ffn", "--shared-kv",
         "--encoder-layers", "3", "--local-radius", "5"],
    )
    assert args.separate_ffn and args.shared_kv and not args.shared_q
    assert (args.encoder_layers, args.local_radius, args.encoder_embed_dim) == (3, 5, 64)


def test_task_heads_are_saved_and_reconciled_on_load():
    from etc_fairseq.encoder.heads import PooledClassifier, TokenLogits

    pretrained = build("etc_tiny")
    state = dict(pretrained.state_dict())  # no task heads: a pre-training checkpoint
    model = build("etc_tiny")
    head = model.register_task_head("span", TokenLogits(64, 2))
    fresh = head.proj.weight.detach().clone()
    model.upgrade_state_dict_named(state, "")
    model.load_state_dict(state)  # strict: the missing head was filled in with its fresh weights
    assert torch.equal(model.task_heads["span"].proj.weight, fresh)
    # a checkpoint head the model lacks, or has with another shape, is dropped
    donor = build("etc_tiny")
    donor.register_task_head("span", TokenLogits(64, 3))
    donor.register_task_head("answer_type", PooledClassifier(64, 3))
    state = dict(donor.state_dict())
    model.upgrade_state_dict_named(state, "")
    model.load_state_dict(state)
    assert torch.equal(model.task_heads["span"].proj.weight, fresh)
    assert not any(k.startswith("task_heads.answer_type") for k in state)
    # a matching head is loaded from the checkpoint
    donor2 = build("etc_tiny")
    donor2.register_task_head("span", TokenLogits(64, 2))
    state = dict(donor2.state_dict())
    model.upgrade_state_dict_named(state, "")
    model.load_state_dict(state)
    assert torch.equal(model.task_heads["span"].proj.weight, donor2.task_heads["span"].proj.weight)
    with pytest.raises(ValueError, match="identifier"):
        model.register_task_head("not a name", TokenLogits(64, 1))


def test_extra_input_embeddings_are_added_before_the_embedding_layer_norm():
    model = build("etc_tiny").eval()
    src = _tokens([20, 12])
    gtok = torch.full((2, 2), model.encoder.special_global_id, dtype=torch.long)
    gtyp = torch.full((2, 2), int(GlobalTokenType.SENTENCE), dtype=torch.long)
    base, base_extra = model(src, features_only=True, global_tokens=gtok, global_types=gtyp)
    zeros_l = torch.zeros(2, 20, 64)
    zeros_g = torch.zeros(2, 2, 64)
    same, _ = model(src, features_only=True, global_tokens=gtok, global_types=gtyp,
                    long_extra_embeddings=zeros_l, global_extra_embeddings=zeros_g)
    assert torch.equal(same, base)
    # adding exactly the token embedding of another id to one global token == using that id's row
    enc = model.encoder.sentence_encoder
    delta = torch.zeros(2, 2, 64)
    delta[0, 1] = enc.embed_tokens.weight[7] - enc.embed_tokens.weight[gtok[0, 1]]
    shifted, shifted_extra = model(src, features_only=True, global_tokens=gtok, global_types=gtyp,
                                   global_extra_embeddings=delta)
    gtok2 = gtok.clone()
    gtok2[0, 1] = 7
    ref, ref_extra = model(src, features_only=True, global_tokens=gtok2, global_types=gtyp)
    torch.testing.assert_close(shifted, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(shifted_extra["global_features"], ref_extra["global_features"], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(shifted, base)
