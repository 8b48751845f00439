#!/usr/bin/env bash
# Official ETC -> etc-fairseq, checked against the official outputs.
#   bash examples/official_etc/run.sh [ETC_DIR]
# ETC_DIR: a downloaded official checkpoint directory (etc_config.json, model.ckpt.*, vocabulary).
# Without it, the fixture made by the official TensorFlow code (tests/fixtures/official/separate) is used.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${ETC_VENV:+$ETC_VENV/bin/}python
SRC=${1:-tests/fixtures/official/separate}
OUT=${OUT:-runs/official_etc}
rm -rf "$OUT"
echo "=== 1/3 etc-lift $SRC -> $OUT ==="
$PY -m etc_fairseq.cli.lift "$SRC" --out "$OUT/model.pt" --encoder-dir "$OUT/core"
echo "=== 2/3 EtcModel.from_pretrained($OUT) ==="
$PY - "$SRC" "$OUT" <<'PY'
import sys
from pathlib import Path

import numpy as np
import torch

from etc_fairseq.lift.huggingface import SPECIALS
from etc_fairseq.models import EtcModel
from etc_fairseq.official import OFFICIAL_INPUT_NAMES, forward_official_inputs
from etc_fairseq.tokenization import load_tokenizer

src, out = Path(sys.argv[1]), sys.argv[2]
hub = EtcModel.from_pretrained(out, checkpoint_file="model.pt").eval()
d = hub.task.source_dictionary
tok = load_tokenizer(out)
pieces = tok.tokenize_words("The sentence global token is the one ETC was pretrained with .".split())
print("pieces:", pieces.pieces[:12], "word ids:", pieces.word_ids[:12])
print("sentence global token:", tok.global_token_pieces["sentence"], "-> dictionary id", tok.global_token_id("sentence", d))
io = src / "official_io.npz"
if not io.is_file():
    sys.exit(0)
print("=== 3/3 the converted model on the official inputs ===")
z = np.load(io)
# official ids -> the fairseq dictionary the converted token rows follow (BERT's specials renamed)
vocab_file = next(src.glob("vocab*.txt"))
vocab = [t for t in vocab_file.read_text(encoding="utf-8").split("\n") if t]
to_fairseq = np.array([d.index(SPECIALS["bert"].get(t, t)) for t in vocab])
feats = {k: z[k] for k in OFFICIAL_INPUT_NAMES if k in z.files}
feats["token_ids"], feats["global_token_ids"] = to_fairseq[feats["token_ids"]], to_fairseq[feats["global_token_ids"]]
with torch.no_grad():
    long_out, global_out = forward_official_inputs(hub, feats)
print("max |ours - official|: long %.2e, global %.2e" % (
    np.abs(long_out.numpy() - z["long_output"]).max(), np.abs(global_out.numpy() - z["global_output"]).max()))
PY
