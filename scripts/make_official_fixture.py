#!/usr/bin/env python3
"""Generate the official-ETC fixtures in tests/fixtures/official/ by running Google's TensorFlow ETC itself.

Not needed at test time: the tests read the committed outputs. To regenerate, in a separate virtualenv::

    python3 -m venv /tmp/venv-tf
    /tmp/venv-tf/bin/pip install 'tensorflow-cpu==2.15.1' absl-py attrs six 'numpy<2'
    /tmp/venv-tf/bin/python scripts/make_official_fixture.py \\
        --etcmodel-src PATH/TO/DIR/CONTAINING/etcmodel --out tests/fixtures/official

``--etcmodel-src`` is a directory holding the official ``etcmodel`` package (google-research/google-research,
folder ``etcmodel/``; add empty ``etcmodel/__init__.py`` and ``etcmodel/models/__init__.py`` if the copy lacks
them). The official code is imported from there at run time and is not part of this project.

For each configuration in CONFIGS this writes ``OUT/<name>/``, laid out like a released ETC checkpoint
directory:

- ``etc_config.json``: the official ``EtcConfig.to_json_string()``.
- ``model.ckpt.index``, ``model.ckpt.data-00000-of-00001``: the weights, saved name-based with
  ``tf.compat.v1.train.Saver`` under the model's own variable names (as the released checkpoints are).
  Every variable gets its own random values first (a fixed numpy seed per configuration): the official
  initializers would give same-shaped weights identical values, and the relative bias tables start at zero,
  so a comparison on initial weights could not tell swapped or missing parameters apart.
- ``vocab_bert_uncased_english.txt``: a BERT-layout vocabulary of ``vocab_size`` entries
  ([PAD], [unused0..98], [UNK], [CLS], [SEP], [MASK], then word pieces), the file name the released
  ``etc_base`` directories use.
- ``official_io.npz``: every ``EtcModel.call`` input under its official keyword name, the side-input
  sources (``long_breakpoints``, ``global_breakpoints``, ``sentence_ids``), the official outputs
  ``long_output`` ``[batch, long_len, hidden]`` and ``global_output`` ``[batch, global_len, hidden]``,
  and, to test the checkpoint reader against, the values of a few variables under ``var/<variable name>``
  (every variable with fewer than 1,024 values, plus layer 0's query-projection and first feed-forward
  kernels; the rest is covered by the per-tensor CRC in the index, and keeps the fixtures small).

The batch (2 rows, long length 48, global length 8) is built with the official
``input_utils.make_global_local_transformer_side_inputs``: one global token per sentence (token id 1,
and one CPC-style id 2), row 0 packs two documents (3 + 2 sentences) separated by breakpoints with
padding after them, row 1 holds one document of 4 sentences and more padding.
"""

import argparse
import json
import os
import re
import sys

import numpy as np

# name -> EtcConfig keyword arguments (vocab/hidden tiny; radius small so a 48-token input spans several
# blocks of r + 1 tokens; relative vocab a little above the official minimum 2D + 1 + 3).
CONFIGS = {
    # The official defaults: one Q/K/V per layer for all four pieces, shared FFN, soft masks.
    "shared": dict(
        vocab_size=128,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        local_radius=4,
        relative_pos_max_distance=2,
        relative_vocab_size=10,
    ),
    # Every projection separate (4 Q/K/V sets), separate long/global FFNs and output projections,
    # hard g2l masking, and an ALBERT-style embedding smaller than hidden (with its projection).
    "separate": dict(
        vocab_size=128,
        embedding_size=16,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        local_radius=3,
        relative_pos_max_distance=3,
        relative_vocab_size=12,
        share_qkv_projections=False,
        share_kv_projections=False,
        share_feed_forward_params=False,
        share_att_output_projection=False,
        use_hard_g2l_mask=True,
    ),
    # The remaining options: K/V shared between l2l/l2g and g2g/g2l, one output projection, pre-activation
    # residual order, hard l2g and g2l masks, absolute position embeddings.
    "kv_shared_preln": dict(
        vocab_size=128,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        local_radius=5,
        relative_pos_max_distance=2,
        relative_vocab_size=8,
        max_absolute_position_embeddings=64,
        share_qkv_projections=False,
        share_kv_projections=True,
        share_att_output_projection=True,
        use_pre_activation_order=True,
        use_hard_g2l_mask=True,
        use_hard_l2g_mask=True,
    ),
}

LONG_LEN = 48
GLOBAL_LEN = 8
SEED = 20200417
# Kernels whose values go into the npz besides the small variables (non-square ones catch a transposed read).
_DUMPED_KERNELS = re.compile(r"layer_0/.*(query_projection/linear|dense_layers/layer_0)/kernel$")


def bert_style_vocab(size):
    """A BERT-uncased-layout vocabulary of exactly ``size`` entries."""
    words = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    pieces = ["the", "a", "of", "and", "to", "in", "is", "was", "it", "for", "on", "as", "with", "by", "he",
              "she", "at", "from", "his", "her", "an", "were", "are", "which", "this", "that", "be", "or"]
    pieces += [f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz"] + list("abcdefghijklmnopqrstuvwxyz")
    words += pieces
    if len(words) < size:
        raise ValueError(f"vocab_size {size} is larger than the {len(words)} made-up entries")
    return words[:size]


def make_batch(rng, vocab_size):
    """Token ids, segment ids and the side-input sources of the 2-row structured batch (numpy int32)."""
    # Row 0: document A (sentences of 6, 9, 7 tokens), document B (12, 10), then 4 padding tokens.
    # Row 1: one document (8, 5, 11, 6), then 18 padding tokens.
    rows = [[[6, 9, 7], [12, 10]], [[8, 5, 11, 6]]]
    first_word = 104  # after [PAD], [unused*], [UNK], [CLS], [SEP], [MASK]
    token_ids = np.zeros([2, LONG_LEN], np.int32)
    segment_ids = np.zeros([2, LONG_LEN], np.int32)
    sentence_ids = np.zeros([2, LONG_LEN], np.int32)
    long_breakpoints = np.zeros([2, LONG_LEN], np.int32)
    global_token_ids = np.zeros([2, GLOBAL_LEN], np.int32)
    global_segment_ids = np.zeros([2, GLOBAL_LEN], np.int32)
    global_breakpoints = np.zeros([2, GLOBAL_LEN], np.int32)
    for b, docs in enumerate(rows):
        pos, sent = 0, 0
        for doc in docs:
            for s, length in enumerate(doc):
                token_ids[b, pos : pos + length] = rng.integers(first_word, vocab_size, length)
                # first sentence of each document in segment 2 (a title-like type), the rest in 1
                segment_ids[b, pos : pos + length] = 2 if s == 0 else 1
                sentence_ids[b, pos : pos + length] = sent
                global_token_ids[b, sent] = 1  # the sentence global token id of the released checkpoints
                global_segment_ids[b, sent] = 3 if s == 0 else 0
                pos += length
                sent += 1
            long_breakpoints[b, pos - 1] = 1
            global_breakpoints[b, sent - 1] = 1
    global_token_ids[0, 1] = 2  # one CPC-masked sentence token (id 2), as in pre-training
    return dict(
        token_ids=token_ids,
        segment_ids=segment_ids,
        global_token_ids=global_token_ids,
        global_segment_ids=global_segment_ids,
        long_breakpoints=long_breakpoints,
        global_breakpoints=global_breakpoints,
        sentence_ids=sentence_ids,
    )


def random_value(rng, name, shape):
    """Distinct random values for one variable, scaled so every parameter visibly moves the outputs."""
    if name.endswith("/gamma"):
        return 1.0 + rng.normal(0.0, 0.2, shape)
    if name.endswith("/beta") or name.endswith("/bias"):
        return rng.normal(0.0, 0.1, shape)
    if "relative_emb_table" in name or "relative_bias_table" in name:
        return rng.normal(0.0, 0.5, shape)
    if "embedding_table" in name:
        return rng.normal(0.0, 0.5, shape)
    return rng.normal(0.0, 0.2, shape)  # projection and feed-forward kernels


def build_fixture(name, kwargs, out_dir, tf, modeling, input_utils):
    rng = np.random.default_rng([SEED, sorted(CONFIGS).index(name)])
    config = modeling.EtcConfig(**kwargs)
    batch = make_batch(rng, config.vocab_size)
    os.makedirs(out_dir, exist_ok=True)

    graph = tf.Graph()
    with graph.as_default():
        side = input_utils.make_global_local_transformer_side_inputs(
            long_breakpoints=tf.constant(batch["long_breakpoints"]),
            global_breakpoints=tf.constant(batch["global_breakpoints"]),
            sentence_ids=tf.constant(batch["sentence_ids"]),
            local_radius=config.local_radius,
            relative_pos_max_distance=config.relative_pos_max_distance,
            use_hard_g2l_mask=config.use_hard_g2l_mask,
            use_hard_l2g_mask=config.use_hard_l2g_mask,
        ).to_dict()
        model = modeling.EtcModel(config, is_training=False)
        model_inputs = {k: tf.constant(batch[k]) for k in ("token_ids", "global_token_ids", "segment_ids", "global_segment_ids")}
        long_output, global_output = model(**model_inputs, **side)
        variables = tf.compat.v1.global_variables()
        saver = tf.compat.v1.train.Saver(var_list=variables)
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            values = {}
            for var in variables:
                var_name = var.op.name
                value = random_value(rng, var_name, var.shape.as_list()).astype(var.dtype.base_dtype.as_numpy_dtype)
                var.load(value, sess)
                values[var_name] = value
            side_np, long_np, global_np = sess.run([side, long_output, global_output])
            saver.save(sess, os.path.join(out_dir, "model.ckpt"), write_meta_graph=False, write_state=False)

    with open(os.path.join(out_dir, "etc_config.json"), "w", encoding="utf-8") as f:
        f.write(config.to_json_string())
    with open(os.path.join(out_dir, "vocab_bert_uncased_english.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(bert_style_vocab(config.vocab_size)) + "\n")
    arrays = dict(batch)
    arrays.update({k: v.astype(np.int32) for k, v in side_np.items()})
    arrays["long_output"] = long_np
    arrays["global_output"] = global_np
    arrays.update({f"var/{k}": v for k, v in values.items() if v.size < 1024 or _DUMPED_KERNELS.search(k)})
    np.savez_compressed(os.path.join(out_dir, "official_io.npz"), **arrays)
    print(f"{out_dir}: {len(values)} variables, long_output {long_np.shape}, global_output {global_np.shape}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--etcmodel-src", required=True, help="directory containing the official etcmodel package")
    parser.add_argument("--out", required=True, help="output directory (one subdirectory per configuration)")
    parser.add_argument("--config", action="append", choices=sorted(CONFIGS), help="only these configurations (default: all)")
    args = parser.parse_args(argv)
    if not os.path.isdir(os.path.join(args.etcmodel_src, "etcmodel")):
        parser.error(f"--etcmodel-src {args.etcmodel_src}: no etcmodel/ package directory there")
    sys.path.insert(0, os.path.abspath(args.etcmodel_src))
    import tensorflow as tf  # noqa: E402  (only when generating)
    from etcmodel.models import input_utils, modeling  # noqa: E402

    for name in args.config or sorted(CONFIGS):
        build_fixture(name, CONFIGS[name], os.path.join(args.out, name), tf, modeling, input_utils)


if __name__ == "__main__":
    main()
