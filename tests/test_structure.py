"""Exact-matrix tests for etc_fairseq.structure (labels, global token types, builders).

Expected matrices are written out by hand.  With ``RelativeLabelVocab(1)`` the ids are:
    0 = pos+0, 1 = pos+1 (key right), 2 = pos-1 (key left),
    3 = belongs, 4 = not_belongs, 5 = other_context, 6 = parent, 7 = child
"""

import pytest
import torch

from etc_fairseq.structure import (
    DEFAULT_STRUCTURE_LABELS,
    MAX_HIERARCHY_DEPTH,
    NUM_GLOBAL_TOKEN_TYPES,
    GlobalLocalStructure,
    GlobalTokenType,
    RelativeLabelVocab,
    build_structure,
    fixed_block_ids,
    global_token_id,
    segment_ids_from_lengths,
    special_global_token_id,
)

T, F = True, False
V1 = RelativeLabelVocab(1)
BEL, NOT, OTH, PAR, CHI = 3, 4, 5, 6, 7
PIECES = ("l2l", "l2g", "g2g", "g2l")


def t(x):
    return torch.tensor(x)


def no_pad(b, n):
    return torch.zeros(b, n, dtype=torch.bool)


def build(long_len, global_len, batch=1, **kw):
    kw.setdefault("vocab", V1)
    kw.setdefault("local_radius", 1)
    kw.setdefault("long_padding_mask", no_pad(batch, long_len))
    kw.setdefault("global_padding_mask", no_pad(batch, global_len))
    return build_structure(**kw)


def assert_equal(actual, expected):
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert torch.equal(actual, expected), f"\nactual:\n{actual}\nexpected:\n{expected}"


# --------------------------------------------------------------------------- vocab
def test_vocab_position_ids_and_layout():
    v = RelativeLabelVocab(2)
    ids = v.position_ids(torch.arange(-5, 6))
    assert_equal(ids, t([4, 4, 4, 4, 3, 0, 1, 2, 2, 2, 2]))
    assert v.size == 2 * 2 + 1 + 5 == 10 == len(v)
    assert v.names() == [
        "pos+0", "pos+1", "pos+2", "pos-1", "pos-2",
        "belongs", "not_belongs", "other_context", "parent", "child",
    ]
    assert [v.label(n) for n in DEFAULT_STRUCTURE_LABELS] == [5, 6, 7, 8, 9]
    assert v.label("pos-2") == 4 and v.position_id(-7) == 4
    # shapes are kept
    assert_equal(v.position_ids(t([[0, 3], [-1, -3]])), t([[0, 2], [3, 4]]))
    # the k=1 constants used in every test below
    assert [V1.label(n) for n in DEFAULT_STRUCTURE_LABELS] == [BEL, NOT, OTH, PAR, CHI]


def test_vocab_custom_labels_and_errors():
    v = RelativeLabelVocab(0, structure_labels=["a", "b"])
    assert v.size == 3 and v.names() == ["pos+0", "a", "b"]
    assert_equal(v.position_ids(t([-3, 0, 3])), t([0, 0, 0]))
    with pytest.raises(KeyError, match=r"unknown relative label 'nope'.*'belongs'"):
        V1.label("nope")
    with pytest.raises(ValueError, match="unique"):
        RelativeLabelVocab(1, ("a", "a"))
    with pytest.raises(ValueError, match="max_distance"):
        RelativeLabelVocab(-1)
    with pytest.raises(ValueError, match="integer"):
        V1.position_ids(torch.tensor([0.5]))
    with pytest.raises(Exception):
        V1.max_distance = 3  # frozen


# --------------------------------------------------------------------------- global tokens
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # emitted by importing fairseq
def test_global_token_types_and_ids():
    from fairseq.data import Dictionary

    names = [m.name for m in GlobalTokenType]
    for required in ("CLS", "QUESTION", "SENTENCE", "PARAGRAPH", "TITLE", "CANDIDATE",
                     "CPC_MASK", "FIXED_BLOCK", "VDOM_NODE"):
        assert required in names
    assert GlobalTokenType.FIXED_BLOCK == 0
    assert sorted(int(m) for m in GlobalTokenType) == list(range(NUM_GLOBAL_TOKEN_TYPES))
    d = Dictionary()
    d.add_symbol("hello")
    assert special_global_token_id(d) == d.bos() == d.index("<s>")
    assert global_token_id(d, GlobalTokenType.SENTENCE) == d.bos()
    assert global_token_id(d, GlobalTokenType.QUESTION, d.index("hello")) == d.index("hello")
    with pytest.raises(ValueError, match="piece_id"):
        global_token_id(d, GlobalTokenType.QUESTION)


# --------------------------------------------------------------------------- l2l
def test_flat_sequence_l2l():
    s = build(5, 0)
    assert_equal(s.l2l_mask, t([[[F, T, T], [T, T, T], [T, T, T], [T, T, T], [T, T, F]]]))
    assert_equal(s.l2l_rel, t([[[0, 0, 1], [2, 0, 1], [2, 0, 1], [2, 0, 1], [2, 0, 0]]]))
    assert s.l2g_mask.shape == (1, 5, 0) and s.g2g_mask.shape == (1, 0, 0)
    assert s.g2l_rel.shape == (1, 0, 5)


def test_l2l_radius_beyond_clip():
    # r=2, k=1: slots are offsets -2,-1,0,+1,+2 -> ids 2,2,0,1,1
    s = build(3, 0, local_radius=2)
    assert_equal(s.l2l_mask, t([[[F, F, T, T, T], [F, T, T, T, F], [T, T, T, F, F]]]))
    assert_equal(s.l2l_rel, t([[[0, 0, 0, 1, 1], [0, 2, 0, 1, 0], [2, 2, 0, 0, 0]]]))


# --------------------------------------------------------------------------- segments
SEG3 = t([[0, 0, 1, 1, 2]])  # 5 long tokens in 3 sentences, 3 global sentence tokens


def test_sentences_soft():
    s = build(5, 3, long_segment=SEG3)
    l2g = t([[[BEL, NOT, NOT], [BEL, NOT, NOT], [NOT, BEL, NOT], [NOT, BEL, NOT], [NOT, NOT, BEL]]])
    assert_equal(s.l2g_mask, torch.ones(1, 5, 3, dtype=torch.bool))
    assert_equal(s.l2g_rel, l2g)
    assert_equal(s.g2l_mask, torch.ones(1, 3, 5, dtype=torch.bool))
    assert_equal(s.g2l_rel, t([[[BEL, BEL, NOT, NOT, NOT],
                                [NOT, NOT, BEL, BEL, NOT],
                                [NOT, NOT, NOT, NOT, BEL]]]))
    assert_equal(s.g2g_mask, torch.ones(1, 3, 3, dtype=torch.bool))
    assert_equal(s.g2g_rel, t([[[0, 1, 1], [2, 0, 1], [2, 2, 0]]]))
    # segments do not cut l2l
    assert bool(s.l2l_mask[0, 1:4].all())


def test_sentences_hard_g2l_and_hard_l2g():
    s = build(5, 3, long_segment=SEG3, hard_g2l=True)
    assert_equal(s.g2l_mask, t([[[T, T, F, F, F], [F, F, T, T, F], [F, F, F, F, T]]]))
    assert_equal(s.g2l_rel, t([[[BEL, BEL, 0, 0, 0], [0, 0, BEL, BEL, 0], [0, 0, 0, 0, BEL]]]))
    assert_equal(s.l2g_mask, torch.ones(1, 5, 3, dtype=torch.bool))  # l2g stays soft

    s = build(5, 3, long_segment=SEG3, hard_l2g=True)
    assert_equal(s.l2g_mask, t([[[T, F, F], [T, F, F], [F, T, F], [F, T, F], [F, F, T]]]))
    assert_equal(s.l2g_rel, t([[[BEL, 0, 0], [BEL, 0, 0], [0, BEL, 0], [0, BEL, 0], [0, 0, BEL]]]))
    assert_equal(s.g2l_mask, torch.ones(1, 3, 5, dtype=torch.bool))  # g2l stays soft


# --------------------------------------------------------------------------- hierarchy
# globals: 0 C1, 1 S1, 2 S2 (context 0) | 3 C2, 4 S3, 5 S4 (context 1)
# long:    S1 = 0,1   S2 = 2,3  (context 0) | S3 = 4,5   S4 = 6,7  (context 1)
HIER = dict(
    long_segment=t([[1, 1, 2, 2, 4, 4, 5, 5]]),
    global_parent=t([[-1, 0, 0, -1, 3, 3]]),
    long_context=t([[0, 0, 0, 0, 1, 1, 1, 1]]),
    global_context=t([[0, 0, 0, 1, 1, 1]]),
)


def test_hierarchical_contexts_sentences_tokens():
    s = build(8, 6, **HIER)
    assert_equal(s.g2g_mask, torch.ones(1, 6, 6, dtype=torch.bool))
    assert_equal(s.g2g_rel, t([[
        [0, CHI, CHI, OTH, OTH, OTH],
        [PAR, 0, 1, OTH, OTH, OTH],
        [PAR, 2, 0, OTH, OTH, OTH],
        [OTH, OTH, OTH, 0, CHI, CHI],
        [OTH, OTH, OTH, PAR, 0, 1],
        [OTH, OTH, OTH, PAR, 2, 0],
    ]]))
    # l2l is cut between long tokens 3 and 4 (context boundary)
    assert_equal(s.l2l_mask, t([[[F, T, T], [T, T, T], [T, T, T], [T, T, F],
                                 [F, T, T], [T, T, T], [T, T, T], [T, T, F]]]))
    assert_equal(s.l2l_rel, t([[[0, 0, 1], [2, 0, 1], [2, 0, 1], [2, 0, 0],
                                [0, 0, 1], [2, 0, 1], [2, 0, 1], [2, 0, 0]]]))
    # tokens belong to their sentence and to their context; contexts do not cut l2g/g2l
    l2g = t([[
        [BEL, BEL, NOT, NOT, NOT, NOT],
        [BEL, BEL, NOT, NOT, NOT, NOT],
        [BEL, NOT, BEL, NOT, NOT, NOT],
        [BEL, NOT, BEL, NOT, NOT, NOT],
        [NOT, NOT, NOT, BEL, BEL, NOT],
        [NOT, NOT, NOT, BEL, BEL, NOT],
        [NOT, NOT, NOT, BEL, NOT, BEL],
        [NOT, NOT, NOT, BEL, NOT, BEL],
    ]])
    assert_equal(s.l2g_mask, torch.ones(1, 8, 6, dtype=torch.bool))
    assert_equal(s.l2g_rel, l2g)
    assert_equal(s.g2l_rel, l2g.transpose(1, 2))

    h = build(8, 6, hard_g2l=True, **HIER)
    assert_equal(h.g2l_mask, t([[
        [T, T, T, T, F, F, F, F],
        [T, T, F, F, F, F, F, F],
        [F, F, T, T, F, F, F, F],
        [F, F, F, F, T, T, T, T],
        [F, F, F, F, T, T, F, F],
        [F, F, F, F, F, F, T, T],
    ]]))


def test_g2g_ids_are_the_labels_global_keys_get():
    """``RelativeLabelVocab.g2g_ids`` (what ``etc-lift --g2g-bias`` shifts): every position label and the three
    g2g structure labels, none of the long <-> global ones; a built structure's g2g labels all lie among them and
    its g2l labels none."""
    assert V1.g2g_ids() == [0, 1, 2, OTH, PAR, CHI]
    assert RelativeLabelVocab(2, ("belongs", "not_belongs", "parent")).g2g_ids() == [0, 1, 2, 3, 4, 7]
    s = build(8, 6, **HIER)
    ids = set(V1.g2g_ids())
    assert set(s.g2g_rel[s.g2g_mask].tolist()) == ids  # HIER uses every one of them
    assert not set(s.g2l_rel[s.g2l_mask].tolist()) & ids


def test_three_levels_grandparent():
    # 0 document <- 1 paragraph <- 2 sentence ; 3 another root ; one long token in sentence 2
    s = build(1, 4, long_segment=t([[2]]), global_parent=t([[-1, 0, 1, -1]]))
    assert_equal(s.g2g_rel, t([[
        [0, CHI, CHI, 1],
        [PAR, 0, CHI, 1],
        [PAR, PAR, 0, 1],
        [2, 2, 2, 0],
    ]]))
    assert_equal(s.l2g_rel, t([[[BEL, BEL, BEL, NOT]]]))


# --------------------------------------------------------------------------- packing
def test_packed_examples_never_attend_across():
    s = build(
        6, 2,
        long_segment=t([[0, 0, 0, 1, 1, 1]]),
        long_example=t([[0, 0, 0, 1, 1, 1]]),
        global_example=t([[0, 1]]),
    )
    assert_equal(s.l2l_mask, t([[[F, T, T], [T, T, T], [T, T, F],
                                 [F, T, T], [T, T, T], [T, T, F]]]))
    assert_equal(s.l2l_rel, t([[[0, 0, 1], [2, 0, 1], [2, 0, 0],
                                [0, 0, 1], [2, 0, 1], [2, 0, 0]]]))
    assert_equal(s.l2g_mask, t([[[T, F], [T, F], [T, F], [F, T], [F, T], [F, T]]]))
    assert_equal(s.l2g_rel, t([[[BEL, 0], [BEL, 0], [BEL, 0], [0, BEL], [0, BEL], [0, BEL]]]))
    assert_equal(s.g2l_mask, t([[[T, T, T, F, F, F], [F, F, F, T, T, T]]]))
    assert_equal(s.g2l_rel, t([[[BEL, BEL, BEL, 0, 0, 0], [0, 0, 0, BEL, BEL, BEL]]]))
    assert_equal(s.g2g_mask, t([[[T, F], [F, T]]]))
    assert_equal(s.g2g_rel, t([[[0, 0], [0, 0]]]))


# --------------------------------------------------------------------------- padding
def test_right_and_left_padding():
    # row 0: right padding (long 3 real + 1 pad, global S + pad); row 1: left padding
    s = build(
        4, 2, batch=2,
        long_padding_mask=t([[F, F, F, T], [T, F, F, F]]),
        global_padding_mask=t([[F, T], [T, F]]),
        # values at padding positions (7, 9, 5) are ignored
        long_segment=t([[0, 0, 0, 7], [9, 1, 1, 1]]),
        global_parent=t([[-1, 5], [5, -1]]),
    )
    assert_equal(s.l2l_mask, t([
        [[F, T, T], [T, T, T], [T, T, F], [F, F, F]],
        [[F, F, F], [F, T, T], [T, T, T], [T, T, F]],
    ]))
    assert_equal(s.l2l_rel, t([
        [[0, 0, 1], [2, 0, 1], [2, 0, 0], [0, 0, 0]],
        [[0, 0, 0], [0, 0, 1], [2, 0, 1], [2, 0, 0]],
    ]))
    assert_equal(s.l2g_mask, t([
        [[T, F], [T, F], [T, F], [F, F]],
        [[F, F], [F, T], [F, T], [F, T]],
    ]))
    assert_equal(s.l2g_rel, t([
        [[BEL, 0], [BEL, 0], [BEL, 0], [0, 0]],
        [[0, 0], [0, BEL], [0, BEL], [0, BEL]],
    ]))
    assert_equal(s.g2l_mask, t([
        [[T, T, T, F], [F, F, F, F]],
        [[F, F, F, F], [F, T, T, T]],
    ]))
    assert_equal(s.g2l_rel, t([
        [[BEL, BEL, BEL, 0], [0, 0, 0, 0]],
        [[0, 0, 0, 0], [0, BEL, BEL, BEL]],
    ]))
    assert_equal(s.g2g_mask, t([[[T, F], [F, F]], [[F, F], [F, T]]]))
    assert_equal(s.g2g_rel, torch.zeros(2, 2, 2, dtype=torch.long))


# --------------------------------------------------------------------------- links
def test_links_candidate_mentions():
    # globals: 0 CAND0, 1 CAND1, 2 sentence; long tokens 1-2 mention CAND0, token 1 also CAND1;
    # token 3 is linked to its own sentence (belongs either way). A link is membership: "belongs".
    kw = dict(
        long_segment=t([[2, 2, 2, 2]]),
        long_links=t([[[-1, -1], [0, 1], [0, -1], [2, -1]]]),
    )
    s = build(4, 3, **kw)
    l2g = t([[[NOT, NOT, BEL], [BEL, BEL, BEL], [BEL, NOT, BEL], [NOT, NOT, BEL]]])
    assert_equal(s.l2g_rel, l2g)
    assert_equal(s.g2l_rel, l2g.transpose(1, 2))
    assert_equal(s.g2l_mask, torch.ones(1, 3, 4, dtype=torch.bool))

    h = build(4, 3, hard_g2l=True, hard_l2g=True, **kw)
    assert_equal(h.g2l_mask, t([[[F, T, T, F], [F, T, F, F], [T, T, T, T]]]))
    assert_equal(h.g2l_rel, t([[[0, BEL, BEL, 0], [0, BEL, 0, 0], [BEL, BEL, BEL, BEL]]]))
    assert_equal(h.l2g_mask, t([[[F, F, T], [T, T, T], [T, F, T], [F, F, T]]]))
    assert_equal(h.l2g_rel, t([[[0, 0, BEL], [BEL, BEL, BEL], [BEL, 0, BEL], [0, 0, BEL]]]))


def test_global_hard_g2l_rows():
    # the same input; only global 0 (CAND0) is hard: it reads its mentions (tokens 1-2) and nothing else,
    # global 1 and the sentence keep soft g2l; l2g is untouched
    kw = dict(
        long_segment=t([[2, 2, 2, 2]]),
        long_links=t([[[-1, -1], [0, 1], [0, -1], [2, -1]]]),
    )
    soft = build(4, 3, **kw)
    h = build(4, 3, global_hard_g2l=t([[1, 0, 0]]), **kw)
    assert_equal(h.g2l_mask, t([[[F, T, T, F], [T, T, T, T], [T, T, T, T]]]))
    assert_equal(h.g2l_rel, t([[[0, BEL, BEL, 0], [NOT, BEL, NOT, NOT], [BEL, BEL, BEL, BEL]]]))
    assert_equal(h.l2g_mask, soft.l2g_mask)
    assert_equal(h.l2g_rel, soft.l2g_rel)
    # a hard row with no belonging token attends to no long token at all
    e = build(4, 3, global_hard_g2l=t([[0, 0, 0]]), long_segment=t([[2, 2, 2, 2]]))
    assert_equal(e.g2l_mask, t([[[T] * 4, [T] * 4, [T] * 4]]))
    e = build(4, 3, global_hard_g2l=t([[1, 0, 0]]), long_segment=t([[2, 2, 2, 2]]))
    assert_equal(e.g2l_mask, t([[[F] * 4, [T] * 4, [T] * 4]]))
    # model-wide hard_g2l wins over a 0 row
    assert_equal(build(4, 3, global_hard_g2l=t([[1, 0, 0]]), hard_g2l=True, **kw).g2l_mask,
                 build(4, 3, hard_g2l=True, **kw).g2l_mask)


# --------------------------------------------------------------------------- fixed blocks
def test_fixed_block_ids_right_padding():
    seg, glen, gpad = fixed_block_ids(
        t([[F, F, F, F, F, T, T], [F, F, T, T, T, T, T]]), block_len=2
    )
    assert_equal(seg, t([[0, 0, 1, 1, 2, -1, -1], [0, 0, -1, -1, -1, -1, -1]]))
    assert glen == 3
    assert_equal(gpad, t([[F, F, F], [F, T, T]]))


def test_fixed_block_ids_left_padding():
    seg, glen, gpad = fixed_block_ids(
        t([[T, T, F, F, F, F, F], [T, T, T, T, T, F, F]]), block_len=2
    )
    assert_equal(seg, t([[-1, -1, 0, 0, 1, 1, 2], [-1, -1, -1, -1, -1, 0, 0]]))
    assert glen == 3
    assert_equal(gpad, t([[F, F, F], [F, T, T]]))


def test_fixed_block_ids_edges_and_builder():
    seg, glen, gpad = fixed_block_ids(t([[T, T, T]]), block_len=4)
    assert_equal(seg, t([[-1, -1, -1]]))
    assert glen == 1 and gpad.tolist() == [[T]]
    seg, glen, gpad = fixed_block_ids(torch.zeros(2, 0, dtype=torch.bool), block_len=4)
    assert seg.shape == (2, 0) and glen == 0 and gpad.shape == (2, 0)
    with pytest.raises(ValueError, match="block_len"):
        fixed_block_ids(t([[F]]), block_len=0)
    # feeds build_structure directly
    pad = t([[T, F, F, F]])
    seg, glen, gpad = fixed_block_ids(pad, block_len=2)
    s = build(4, glen, long_padding_mask=pad, global_padding_mask=gpad, long_segment=seg,
              hard_g2l=True)
    assert_equal(s.g2l_mask, t([[[F, T, T, F], [F, F, F, T]]]))


def test_segment_ids_from_lengths():
    assert_equal(segment_ids_from_lengths([2, 0, 3]), t([0, 0, 2, 2, 2]))
    assert_equal(segment_ids_from_lengths([1, 2], start=1), t([1, 2, 2]))


# --------------------------------------------------------------------------- validation
def test_input_validation_errors():
    with pytest.raises(ValueError, match=r"long_segment.*global_len=2.*got 5 at index \(0, 1\)"):
        build(3, 2, long_segment=t([[0, 5, 1]]))
    with pytest.raises(ValueError, match=r"long_segment.*got -2"):
        build(3, 2, long_segment=t([[0, -2, 1]]))
    with pytest.raises(ValueError, match=r"global_parent must have shape \(1, 2\), got \(1, 3\)"):
        build(3, 2, global_parent=t([[-1, -1, -1]]))
    with pytest.raises(ValueError, match=r"long_context must have dtype torch.int64"):
        build(3, 2, long_context=torch.zeros(1, 3, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"long_links.*global_len=2.*got 2"):
        build(3, 2, long_links=t([[[-1], [2], [-1]]]))
    with pytest.raises(ValueError, match=r"long_links must have shape \(1, 3, 'max_links'\)"):
        build(3, 2, long_links=t([[-1, 0, -1]]))
    with pytest.raises(ValueError, match="global_padding_mask must have batch size 1"):
        build(3, 2, global_padding_mask=no_pad(2, 2))
    with pytest.raises(ValueError, match="long_padding_mask must have dtype torch.bool"):
        build(3, 2, long_padding_mask=torch.zeros(1, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="local_radius"):
        build(3, 2, local_radius=-1)
    with pytest.raises(ValueError, match=r"cycle through global index"):
        build(3, 3, global_parent=t([[1, 2, 0]]))
    with pytest.raises(ValueError, match=r"cycle"):
        build(3, 2, global_parent=t([[0, -1]]))  # own parent
    chain = torch.arange(-1, MAX_HIERARCHY_DEPTH + 1).unsqueeze(0)  # depth 9 chain
    with pytest.raises(ValueError, match=r"at most 8 ancestors"):
        build(1, MAX_HIERARCHY_DEPTH + 2, global_parent=chain)
    build(1, MAX_HIERARCHY_DEPTH + 1, global_parent=chain[:, :-1])  # depth 8 is fine
    with pytest.raises(ValueError, match=r"long_segment must point at non-padding"):
        build(2, 2, long_segment=t([[0, 1]]), global_padding_mask=t([[F, T]]))
    with pytest.raises(KeyError, match="other_context"):
        build(2, 1, vocab=RelativeLabelVocab(1, ("belongs", "not_belongs")))


def test_structure_container():
    s = build(8, 6, **HIER)
    kw = s.as_kernel_kwargs()
    assert set(kw) == {f"{p}_{k}" for p in PIECES for k in ("mask", "rel")}
    assert (s.batch_size, s.long_len, s.global_len, s.local_radius) == (1, 8, 6, 1)
    m = s.to("cpu")
    for name, value in kw.items():
        assert torch.equal(getattr(m, name), value)
    s.validate()
    s.validate(1, 8, 6)
    bad = dict(kw, l2g_rel=kw["l2g_rel"][:, :, :5])
    with pytest.raises(ValueError, match=r"l2g_rel: expected shape \[1, 8, 6\], got \[1, 8, 5\]"):
        GlobalLocalStructure(local_radius=1, **bad).validate()
    with pytest.raises(ValueError, match=r"l2l_mask: expected shape \[\*, \*, 5\], got \[1, 8, 3\]"):
        GlobalLocalStructure(local_radius=2, **kw).validate()
    with pytest.raises(ValueError, match="g2g_mask: expected dtype torch.bool"):
        GlobalLocalStructure(local_radius=1, **dict(kw, g2g_mask=kw["g2g_rel"])).validate()
    with pytest.raises(ValueError, match=r"l2l_mask: expected shape \[2, \*, 3\]"):
        s.validate(batch=2)


# --------------------------------------------------------------------------- batching / reference
def _random_structure(gen, batch, L, G, K):
    """Random valid inputs: padding, forests (parent index < own index), contexts, examples, links."""

    def ri(lo, hi, *shape):
        return torch.randint(lo, hi, shape, generator=gen)

    long_pad = ri(0, 4, batch, L) == 0
    global_pad = ri(0, 4, batch, G) == 0
    global_pad[:, 0] = False
    valid_g = ~global_pad
    parent = torch.full((batch, G), -1, dtype=torch.long)
    for b in range(batch):
        for g in range(1, G):
            cands = [h for h in range(g) if valid_g[b, h]]
            if cands and ri(0, 3).item() > 0:
                parent[b, g] = cands[ri(0, len(cands)).item()]

    def pick(shape):  # random valid global index or -1
        out = ri(-1, G, *shape)
        b_idx = torch.arange(batch).view(-1, *([1] * (len(shape) - 1)))
        return torch.where(out >= 0, torch.where(global_pad[b_idx.expand(shape), out.clamp(min=0)],
                                                 torch.full_like(out, -1), out), out)
    return dict(
        long_padding_mask=long_pad,
        global_padding_mask=global_pad,
        long_segment=pick((batch, L)),
        global_parent=parent,
        long_context=ri(0, 2, batch, L),
        global_context=ri(0, 2, batch, G),
        long_example=ri(0, 2, batch, L),
        global_example=ri(0, 2, batch, G),
        long_links=pick((batch, L, K)),
        global_hard_g2l=ri(0, 2, batch, G),
    )


def _reference(inp, vocab, r, hard_g2l, hard_l2g):
    """Naive per-pair loops, independent of the vectorised code."""
    lp, gp = inp["long_padding_mask"], inp["global_padding_mask"]
    B, L = lp.shape
    G = gp.shape[1]
    k = vocab.max_distance

    def pos(o):
        o = max(-k, min(k, o))
        return o if o >= 0 else k - o

    lab = {n: vocab.label(n) for n in DEFAULT_STRUCTURE_LABELS}
    out = {f"{p}_{s}": [] for p in PIECES for s in ("mask", "rel")}
    for b in range(B):
        par = [int(x) if not gp[b, g] else -1 for g, x in enumerate(inp["global_parent"][b])]

        def ancestors(g):
            res, cur = set(), par[g]
            while cur >= 0:
                res.add(cur)
                cur = par[cur]
            return res

        anc = [ancestors(g) for g in range(G)]
        seg = inp["long_segment"][b].tolist()
        lex, gex = inp["long_example"][b].tolist(), inp["global_example"][b].tolist()
        lcx, gcx = inp["long_context"][b].tolist(), inp["global_context"][b].tolist()
        links = inp["long_links"][b].tolist()
        hard_row = inp["global_hard_g2l"][b].tolist()
        m = torch.zeros(L, 2 * r + 1, dtype=torch.bool)
        rel = torch.zeros(L, 2 * r + 1, dtype=torch.long)
        for i in range(L):
            for w in range(2 * r + 1):
                j = i + w - r
                if 0 <= j < L and not lp[b, i] and not lp[b, j] and lex[i] == lex[j] and lcx[i] == lcx[j]:
                    m[i, w], rel[i, w] = True, pos(j - i)
        out["l2l_mask"].append(m)
        out["l2l_rel"].append(rel)
        lg_m, lg_r = torch.zeros(L, G, dtype=torch.bool), torch.zeros(L, G, dtype=torch.long)
        gl_m, gl_r = torch.zeros(G, L, dtype=torch.bool), torch.zeros(G, L, dtype=torch.long)
        for i in range(L):
            for g in range(G):
                if lp[b, i] or gp[b, g] or lex[i] != gex[g]:
                    continue
                s_ = seg[i]
                if s_ >= 0 and (g == s_ or g in anc[s_]):
                    label, strong = lab["belongs"], True
                elif g in links[i]:
                    label, strong = lab["belongs"], True
                else:
                    label, strong = lab["not_belongs"], False
                if strong or not hard_l2g:
                    lg_m[i, g], lg_r[i, g] = True, label
                if strong or not (hard_g2l or hard_row[g]):
                    gl_m[g, i], gl_r[g, i] = True, label
        out["l2g_mask"].append(lg_m)
        out["l2g_rel"].append(lg_r)
        out["g2l_mask"].append(gl_m)
        out["g2l_rel"].append(gl_r)
        gg_m, gg_r = torch.zeros(G, G, dtype=torch.bool), torch.zeros(G, G, dtype=torch.long)
        for g in range(G):
            for h in range(G):
                if gp[b, g] or gp[b, h] or gex[g] != gex[h]:
                    continue
                gg_m[g, h] = True
                if h in anc[g]:
                    gg_r[g, h] = lab["parent"]
                elif g in anc[h]:
                    gg_r[g, h] = lab["child"]
                elif gcx[g] == gcx[h]:
                    gg_r[g, h] = pos(h - g)
                else:
                    gg_r[g, h] = lab["other_context"]
        out["g2g_mask"].append(gg_m)
        out["g2g_rel"].append(gg_r)
    return {name: torch.stack(v) for name, v in out.items()}


@pytest.mark.parametrize("hard", [(False, False), (True, False), (False, True)])
def test_batch_rows_independent_and_match_reference(hard):
    hard_g2l, hard_l2g = hard
    gen = torch.Generator().manual_seed(1234 + hard_g2l + 2 * hard_l2g)
    vocab = RelativeLabelVocab(2)
    B, L, G, K, r = 3, 9, 6, 2, 2
    inp = _random_structure(gen, B, L, G, K)
    s = build_structure(vocab=vocab, local_radius=r, hard_g2l=hard_g2l, hard_l2g=hard_l2g, **inp)
    ref = _reference(inp, vocab, r, hard_g2l, hard_l2g)
    for name, value in s.as_kernel_kwargs().items():
        assert_equal(value, ref[name])
    for b in range(B):
        row = build_structure(
            vocab=vocab, local_radius=r, hard_g2l=hard_g2l, hard_l2g=hard_l2g,
            **{n: v[b: b + 1] for n, v in inp.items()},
        )
        for name, value in row.as_kernel_kwargs().items():
            assert_equal(value, getattr(s, name)[b: b + 1])
