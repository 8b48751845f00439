"""etc-show: label grids of an exact small example, the PNG it draws (size, cell colours = legend colours,
white = masked), and the three data kinds it reads (etc_pretraining bin/, a structured fine-tuning
directory, fairseq masked_lm data), all on real Wikipedia text."""
from __future__ import annotations

import json
import re
from itertools import islice
from pathlib import Path

import numpy as np
import pytest

from etc_fairseq.structure.labels import RelativeLabelVocab
from etc_fairseq.visualize import (
    MASKED,
    crop_grids,
    global_token_texts,
    gpt2_token_texts,
    grid_rgb,
    label_grids,
    label_palette,
    render_structure,
)

M = MASKED

# ---------------------------------------------------------------------------------------------------------
# an exact small example (hand-computed grids)
#
# global: 0 = context A, 1 = sentence A0 (parent 0), 2 = context B, 3 = sentence B0, 4 = sentence B1
#         (parents 2); global contexts [0, 0, 1, 1, 1]
# long:   tokens 0-2 in sentence 1 (context 0), tokens 3-5 in sentence 3, token 6 in sentence 4 (context 1);
#         token 5 also linked to global 1 (a link is membership: "belongs").
# vocab k=1: pos+0=0, pos+1=1, pos-1=2, belongs=3, not_belongs=4, other_context=5, parent=6, child=7
# radius 2: l2l slots are offsets -2..2
# ---------------------------------------------------------------------------------------------------------
SMALL = dict(
    long_segment=[1, 1, 1, 3, 3, 3, 4],
    global_parent=[-1, 0, -1, 2, 2],
    long_context=[0, 0, 0, 1, 1, 1, 1],
    global_context=[0, 0, 1, 1, 1],
    long_links=[[-1], [-1], [-1], [-1], [-1], [1], [-1]],
)
EXPECTED_L2L = [
    [M, M, 0, 1, 1],
    [M, 2, 0, 1, M],
    [2, 2, 0, M, M],
    [M, M, 0, 1, 1],
    [M, 2, 0, 1, 1],
    [2, 2, 0, 1, M],
    [2, 2, 0, M, M],
]
EXPECTED_L2G = [
    [3, 3, 4, 4, 4],
    [3, 3, 4, 4, 4],
    [3, 3, 4, 4, 4],
    [4, 4, 3, 3, 4],
    [4, 4, 3, 3, 4],
    [4, 3, 3, 3, 4],
    [4, 4, 3, 4, 3],
]
EXPECTED_G2G = [
    [0, 7, 5, 5, 5],
    [6, 0, 5, 5, 5],
    [5, 5, 0, 7, 7],
    [5, 5, 6, 0, 1],
    [5, 5, 6, 2, 0],
]


def small_grids(hard_g2l=False):
    return label_grids(7, 5, SMALL, RelativeLabelVocab(1), radius=2, hard_g2l=hard_g2l)


def test_small_example_grids_are_exact():
    g = small_grids()
    vocab = g.vocab
    assert [vocab.label(n) for n in ("belongs", "not_belongs", "other_context", "parent", "child")] == [3, 4, 5, 6, 7]
    assert g.l2l.dtype == np.int64 and g.l2l.shape == (7, 5)
    np.testing.assert_array_equal(g.l2l, EXPECTED_L2L)
    np.testing.assert_array_equal(g.l2g, EXPECTED_L2G)
    np.testing.assert_array_equal(g.g2l, np.asarray(EXPECTED_L2G).T)  # soft g2l: every pair, same labels
    np.testing.assert_array_equal(g.g2g, EXPECTED_G2G)
    assert (g.long_len, g.global_len, g.long_shown, g.global_shown, g.cropped) == (7, 5, 7, 5, False)


def test_hard_g2l_masks_not_belongs_only():
    g = small_grids(hard_g2l=True)
    exp = np.asarray(EXPECTED_L2G).T.copy()
    exp[exp == 4] = M  # not_belongs pairs are masked; belongs (3, links included) stay
    np.testing.assert_array_equal(g.g2l, exp)
    np.testing.assert_array_equal(g.l2g, EXPECTED_L2G)  # l2g unchanged


def test_crop_keeps_labels_of_the_full_example():
    g = crop_grids(small_grids(), max_long=4, max_global=3)
    assert (g.long_shown, g.global_shown, g.cropped) == (4, 3, True)
    np.testing.assert_array_equal(g.l2l, np.asarray(EXPECTED_L2L)[:4])
    np.testing.assert_array_equal(g.l2g, np.asarray(EXPECTED_L2G)[:4, :3])
    np.testing.assert_array_equal(g.g2l, np.asarray(EXPECTED_L2G).T[:3, :4])
    np.testing.assert_array_equal(g.g2g, np.asarray(EXPECTED_G2G)[:3, :3])
    with pytest.raises(ValueError, match="max_long must be >= 1"):
        crop_grids(small_grids(), max_long=0)


def test_palette_and_grid_colours():
    vocab = RelativeLabelVocab(12)
    pal = label_palette(vocab)
    assert pal.shape == (vocab.size, 3)
    rgb8 = {tuple(np.round(c * 255).astype(int)) for c in pal}
    assert len(rgb8) == vocab.size  # every label its own colour
    assert (255, 255, 255) not in rgb8  # white is reserved for masked cells
    img = grid_rgb(np.array([[M, 0], [vocab.label("parent"), 2]]), pal)
    assert img.dtype == np.uint8 and img.shape == (2, 2, 3)
    assert tuple(img[0, 0]) == (255, 255, 255)
    np.testing.assert_array_equal(img[1, 0], np.round(pal[vocab.label("parent")] * 255))
    with pytest.raises(ValueError, match="label ids"):
        grid_rgb(np.array([[vocab.size]]), pal)


def _read_png(path):
    from PIL import Image

    return np.asarray(Image.open(path).convert("RGB"))  # uint8 [H, W, 3]


def test_render_png_cells_match_legend(tmp_path):
    g = small_grids(hard_g2l=True)
    out = tmp_path / "small.png"
    layout = render_structure(g, out, [f"w{i}" for i in range(7)], ["ctx", "sent", "ctx", "sent", "sent"],
                              title="CONSTRUCTED small example", cell=16)
    img = _read_png(out)
    assert img.shape[:2] == (layout.height, layout.width)
    assert 300 <= layout.width <= 2000 and 300 <= layout.height <= 2000
    assert layout.show_text
    pal = label_palette(g.vocab)
    names = g.vocab.names()
    # every legend entry is drawn in its colour
    for name, (x, y) in layout.legend_swatches.items():
        want = (255, 255, 255) if name.startswith("masked") else tuple(np.round(pal[names.index(name)] * 255))
        np.testing.assert_allclose(img[y, x], want, atol=1, err_msg=name)
    assert set(layout.legend_swatches) == set(names) | {"masked (no attention)"}
    checked = 0
    for piece in ("g2g", "g2l", "l2g", "l2l"):
        grid = g.piece(piece)
        box = layout.panels[piece]
        assert (box.rows, box.cols) == grid.shape
        for r in range(grid.shape[0]):
            for c in range(grid.shape[1]):
                x, y = box.cell_center(r, c)
                label = int(grid[r, c])
                legend_name = "masked (no attention)" if label == M else names[label]
                sx, sy = layout.legend_swatches[legend_name]
                np.testing.assert_allclose(img[y, x], img[sy, sx], atol=1, err_msg=f"{piece}[{r},{c}]")
                checked += 1
    assert checked == 25 + 35 + 35 + 35
    # spot checks by name: the linked cell (long 5 -> global 1) has the "belongs" colour, a cross-context
    # l2l cell is white
    x, y = layout.panels["l2g"].cell_center(5, 1)
    np.testing.assert_allclose(img[y, x], np.round(pal[g.vocab.label("belongs")] * 255), atol=1)
    x, y = layout.panels["l2l"].cell_center(2, 3)
    assert tuple(img[y, x]) == (255, 255, 255)


def test_global_token_texts_and_gpt2_decoding(gpt2_files):
    from etc_fairseq.prepare.gpt2 import load_gpt2_bpe, load_gpt2_decoder

    assert global_token_texts([1, 2, 3, 5, 6, 7, 8, 99], ["<s>", "▁who", "<s>", "<s>", "<s>", "<s>", "<s>", "x"]) == [
        "CLS", "q:▁who", "sent", "ctx", "title", "cand", "sent(cpc)", "type99"]
    encoder_json, vocab_bpe = gpt2_files
    ids = load_gpt2_bpe(encoder_json, vocab_bpe).encode("Anarchism is a political philosophy")
    texts = gpt2_token_texts([str(i) for i in ids] + ["<s>"], load_gpt2_decoder(encoder_json))
    assert "".join(texts).replace("▁", " ") == "Anarchism is a political philosophy<s>"
    assert "▁is" in texts and "▁political" in texts  # " is" -> "▁is"


def test_gpt2_encoder_json_is_found_next_to_the_data(gpt2_files, tmp_path):
    import json
    import shutil

    from fairseq.data import Dictionary

    from etc_fairseq.cli.show import token_texts
    from etc_fairseq.data.pretraining_corpus import FORMAT
    from etc_fairseq.data.tokenizer_files import find_gpt2_encoder_json
    from etc_fairseq.prepare.gpt2 import load_gpt2_bpe, load_gpt2_decoder

    encoder_json, vocab_bpe = gpt2_files
    ids = load_gpt2_bpe(encoder_json, vocab_bpe).encode("Autism is a neurodevelopmental disorder")
    bin_dir = tmp_path / "pretrain" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "dict.txt").write_text("".join(f"{i} 1\n" for i in dict.fromkeys(ids)), encoding="utf-8")
    shutil.copyfile(encoder_json, tmp_path / "pretrain" / "encoder.json")
    (bin_dir / "pretrain.json").write_text(json.dumps(
        {"format": FORMAT, "tokenizer": "gpt2", "tokenizer_files": {"gpt2_encoder_json": "../encoder.json"}}),
        encoding="utf-8")
    found = find_gpt2_encoder_json(bin_dir)
    assert found is not None and found.resolve() == (tmp_path / "pretrain" / "encoder.json").resolve()
    d = Dictionary.load(str(bin_dir / "dict.txt"))
    texts = token_texts([d.index(str(i)) for i in ids], d, load_gpt2_decoder(found))
    assert "".join(texts).replace("▁", " ") == "Autism is a neurodevelopmental disorder"
    # a fine-tuning directory: gpt2/encoder.json in its parent; none found -> None (symbols shown as they are)
    (tmp_path / "ft" / "gpt2").mkdir(parents=True)
    (tmp_path / "ft" / "data").mkdir()
    assert find_gpt2_encoder_json(tmp_path / "ft" / "data") is None
    shutil.copyfile(encoder_json, tmp_path / "ft" / "gpt2" / "encoder.json")
    shutil.copyfile(vocab_bpe, tmp_path / "ft" / "gpt2" / "vocab.bpe")
    assert find_gpt2_encoder_json(tmp_path / "ft" / "data") == tmp_path / "ft" / "gpt2" / "encoder.json"


# ---------------------------------------------------------------------------------------------------------
# the three data kinds through the CLI
# ---------------------------------------------------------------------------------------------------------
def _png_size(path):
    from PIL import Image

    with Image.open(path) as im:
        return im.size


def test_pretrain_example_is_the_tasks_example_unmasked(pretrain_data, tmp_path):
    from etc_fairseq.cli.show import load_pretrain_example, main
    from etc_fairseq.pretraining.task import EtcPretrainingConfig, EtcPretrainingTask

    task = EtcPretrainingTask.setup_task(EtcPretrainingConfig(data=str(pretrain_data), max_long_len=256, max_global_len=32, seed=1))
    task.load_dataset("train")
    ds = task.datasets["train"]
    # an example with a CPC-masked sentence, so undoing the masks is really exercised
    index = next(i for i in range(len(ds)) if len(ds[i]["cpc_global_index"]) > 0)
    ex = load_pretrain_example(pretrain_data, "train", index, 256, 32)
    original = np.concatenate([
        ds.corpus.sentence(ds.corpus.doc_range(p.doc)[0] + j)[:256]
        for p in ds.examples[index] for j in range(p.first, p.end)
    ])
    np.testing.assert_array_equal(ex.long_tokens, original)
    assert not np.array_equal(ex.long_tokens, ds[index]["source"].numpy())  # the model input is masked
    np.testing.assert_array_equal(ex.structure["long_segment"], ds[index]["long_segment"].numpy())
    np.testing.assert_array_equal(ex.global_types, ds[index]["global_types"].numpy())

    out = tmp_path / "pretrain.png"
    assert main([str(pretrain_data), "--split", "train", "--index", str(index), "--max-long-len", "256",
                 "--max-global-len", "32", "--arch", "etc_tiny", "--max-tokens", "40", "--out", str(out), "-q"]) == 0
    w, h = _png_size(out)
    assert 600 <= w <= 4000 and 600 <= h <= 4000
    assert main([str(pretrain_data), "--split", "train", "--index", str(10**6), "--out", str(out), "-q"]) == 1


def test_masked_lm_block_and_fixed_blocks(mlm_data, tmp_path):
    from fairseq.data import Dictionary, data_utils

    from etc_fairseq.cli.show import load_masked_lm_example, main

    ex = load_masked_lm_example(mlm_data, "valid", 2, tokens_per_sample=64, sample_break_mode="none", fixed_block_len=16)
    d = Dictionary.load(str(mlm_data / "dict.txt"))
    raw = data_utils.load_indexed_dataset(str(mlm_data / "valid"), d)
    flat = np.concatenate([raw[i].numpy() for i in range(len(raw))])
    assert ex.long_tokens[0] == d.bos()  # masked_lm prepends <s> to each block of 63 tokens
    np.testing.assert_array_equal(ex.long_tokens[1:], flat[2 * 63 : 3 * 63])
    assert len(ex.global_tokens) == 4 and set(ex.global_types.tolist()) == {0}  # FIXED_BLOCK
    np.testing.assert_array_equal(ex.structure["long_segment"], np.arange(64) // 16)

    out = tmp_path / "mlm.png"
    assert main([str(mlm_data), "--index", "2", "--tokens-per-sample", "64", "--arch", "etc_tiny",
                 "--radius", "4", "--out", str(out), "-q"]) == 0
    assert out.is_file() and _png_size(out)[0] > 600


def build_constructed_structured(wiki_dump, pretrain_data, out_dir: Path, max_words: int = 8):
    """A CONSTRUCTED WikiHop-like fine-tuning directory (structured format) from real Wikipedia text:
    two articles' first two sentences (cut at ``max_words`` words), a written question, and two candidate
    global tokens (the articles' first title words) linked to their mentions. Returns the arrays written."""
    import shutil

    from etc_fairseq.data.structured import CORE_FIELDS, StructuredWriter
    from etc_fairseq.prepare.sentences import split_sentences
    from etc_fairseq.prepare.tokenizer import WordPieceTokenizer
    from etc_fairseq.prepare.wikipedia import iter_wikipedia_documents
    from etc_fairseq.structure.global_tokens import GlobalTokenType as T, global_token_id

    tok = WordPieceTokenizer.from_pretrain_dir(pretrain_data)
    d = tok.dictionary
    docs = list(islice(iter_wikipedia_documents(wiki_dump), 2))
    cands = [doc.title.split()[0] for doc in docs]
    question = f"which article mentions {cands[0]} ?"  # CONSTRUCTED
    long_t, seg, lctx, links = [], [], [], []
    g_tok, g_typ, g_par, g_ctx = [], [], [], []

    def add_global(ty, ctx, parent=-1, piece=None):
        g_tok.append(global_token_id(d, ty, piece))
        g_typ.append(int(ty))
        g_par.append(parent)
        g_ctx.append(ctx)
        return len(g_tok) - 1

    cand_idx = [add_global(T.CANDIDATE, 0) for _ in cands]

    def add_words(words, segment, ctx):
        ids, wop = tok.encode_words(words)
        for i, w in zip(ids, wop):
            long_t.append(i)
            seg.append(segment)
            lctx.append(ctx)
            word = re.sub(r"\W", "", words[w]).lower()
            links.append([cand_idx[cands.index(c)] for c in cands if c.lower() == word][:1] or [-1])

    qids, _ = tok.encode_words(question.split())
    for i in qids:
        g = add_global(T.QUESTION, 0, piece=i)
        long_t.append(i), seg.append(g), lctx.append(0), links.append([-1])
    for c, doc in enumerate(docs, start=1):
        ctx_g = add_global(T.CONTEXT, c)
        add_words(doc.title.split(), add_global(T.TITLE, c, ctx_g), c)
        for sent in split_sentences(doc.paragraphs[0])[:2]:
            add_words(sent.split()[:max_words], add_global(T.SENTENCE, c, ctx_g), c)
    arrays = dict(
        long_tokens=np.array(long_t), global_tokens=np.array(g_tok), global_types=np.array(g_typ),
        long_segment=np.array(seg), global_parent=np.array(g_par), long_context=np.array(lctx),
        global_context=np.array(g_ctx), long_links=np.array(links),
    )
    out_dir.mkdir(parents=True)
    shutil.copyfile(pretrain_data / "dict.txt", out_dir / "dict.txt")
    w = StructuredWriter(out_dir, "valid", [CORE_FIELDS[n] for n in arrays])
    w.add(arrays, side={"id": "CONSTRUCTED-0"})
    w.finalize(dataset="CONSTRUCTED wikihop-like")
    return arrays


def test_structured_directory(wiki_dump, pretrain_data, tmp_path):
    from etc_fairseq.cli.show import load_structured_example, main
    from etc_fairseq.structure.global_tokens import GlobalTokenType as T

    data = tmp_path / "constructed"
    arrays = build_constructed_structured(wiki_dump, pretrain_data, data)
    ex = load_structured_example(data, "valid", 0)
    assert ex.description.endswith("example 0 of 1 (CONSTRUCTED wikihop-like, record CONSTRUCTED-0)")
    for k in ("long_tokens", "global_tokens", "global_types"):
        np.testing.assert_array_equal(getattr(ex, k), arrays[k])
    for k in ("long_segment", "global_parent", "long_context", "global_context", "long_links"):
        np.testing.assert_array_equal(ex.structure[k], arrays[k])

    vocab = RelativeLabelVocab(4)
    g = label_grids(len(ex.long_tokens), len(ex.global_tokens), ex.structure, vocab, radius=8, hard_g2l=True)
    types = ex.global_types
    ctx = np.flatnonzero(types == T.CONTEXT)
    title = np.flatnonzero(types == T.TITLE)
    assert len(ctx) == 2
    # a title token's row in l2g: "belongs" to its title and to its context token (ancestor)
    i = int(np.flatnonzero(ex.structure["long_segment"] == title[0])[0])
    assert g.l2g[i, title[0]] == vocab.label("belongs") and g.l2g[i, ctx[0]] == vocab.label("belongs")
    assert g.l2g[i, ctx[1]] == vocab.label("not_belongs") and g.g2l[ctx[1], i] == M  # hard g2l
    assert g.g2g[title[0], ctx[0]] == vocab.label("parent") and g.g2g[ctx[0], title[0]] == vocab.label("child")
    assert g.g2g[ctx[0], ctx[1]] == vocab.label("other_context")
    # the first context's tokens never see the second's in l2l (context cut)
    first_b = int(np.flatnonzero(ex.structure["long_context"] == 2)[0])
    assert g.l2l[first_b - 1, 8 + 1] == M and g.l2l[first_b - 1, 8 - 1] != M
    # candidate 0 is linked to its mentions (its own title word, at least)
    mention = np.flatnonzero(ex.structure["long_links"][:, 0] == 0)
    assert len(mention) >= 1 and all(g.l2g[m, 0] == vocab.label("belongs") for m in mention)

    out = tmp_path / "structured.png"
    assert main([str(data), "--arch", "etc_tiny", "--radius", "8", "--max-distance", "4", "--hard-g2l",
                 "--out", str(out), "-q"]) == 0
    assert out.is_file() and _png_size(out)[0] > 600
    # errors are one line, exit status 1
    assert main([str(data), "--split", "test", "--out", str(tmp_path / "x.png"), "-q"]) == 1
    assert main([str(tmp_path), "--out", str(tmp_path / "x.png"), "-q"]) == 1
    assert not (tmp_path / "x.png").exists()


def _show_args(*argv):
    from etc_fairseq.cli.show import build_parser

    return build_parser().parse_args([*map(str, argv), "--out", "x.png"])


def test_radius_comes_from_the_architecture_etc_prepare_recorded(tmp_path):
    # etc-prepare --arch etc_tiny records the arch's settings in DIR/prepare.json; etc-show draws with them
    # (etc_tiny's r = 16, not etc_base's 84) unless told otherwise
    import argparse

    from etc_fairseq.cli.prepare import _with_arch_option
    from etc_fairseq.cli.show import _structure_settings
    from etc_fairseq.commands import Subcommand

    def fake_run(args):  # a converter: writes its own prepare.json last
        args.out.mkdir()
        (args.out / "bin").mkdir()
        (args.out / "prepare.json").write_text(json.dumps({"dataset": "fake", "examples": 3}))
        return 0

    sc = _with_arch_option(Subcommand("fake", "h", "d", lambda p: p.add_argument("--out", type=Path), fake_run))
    parser = argparse.ArgumentParser()
    sc.add_arguments(parser)
    out = tmp_path / "data"
    assert sc.run(parser.parse_args(["--out", str(out), "--arch", "etc_tiny"])) == 0
    info = json.loads((out / "prepare.json").read_text())
    assert info == {"dataset": "fake", "examples": 3, "arch": "etc_tiny", "local_radius": 16,
                    "relative_pos_max_distance": 4, "fixed_block_len": 16}
    with pytest.raises(ValueError, match="--arch 'etc_huge': not an ETC architecture"):
        sc.run(parser.parse_args(["--out", str(tmp_path / "never"), "--arch", "etc_huge"]))
    assert not (tmp_path / "never").exists()  # refused before converting anything

    r, k, b, source = _structure_settings(_show_args(out))
    assert (r, k, b) == (16, 4, 16) and source.startswith("etc_tiny (recorded in")
    assert _structure_settings(_show_args(out / "bin"))[:3] == (16, 4, 16)  # pretrain / mlm data: DIR/bin
    assert _structure_settings(_show_args(out, "--arch", "etc_base"))[:3] == (84, 12, 16)
    assert _structure_settings(_show_args(out, "--radius", "5"))[:3] == (5, 4, 16)
    r, _, _, source = _structure_settings(_show_args(tmp_path))  # nothing recorded: etc_base, said so
    assert r == 84 and "default" in source and "pass --arch" in source


def test_title_record_id_is_read_through_the_side_reader(tmp_path):
    from etc_fairseq.cli.show import _side_record_id

    (tmp_path / "valid.side.jsonl").write_text('{"_id": "h1"}\n{"example_id": 42}\n{"words": []}\nnot json\n')
    assert [_side_record_id(tmp_path, "valid", i) for i in range(3)] == ["h1", "42", None]
    assert _side_record_id(tmp_path, "valid", 3) is None  # a bad line: no id in the title, no failure
    assert _side_record_id(tmp_path, "valid", 9) is None and _side_record_id(tmp_path, "test", 0) is None
