"""SYNTHETIC hop tasks: can ETC find a sentence, step to the next one, and do both in a row?

A diagnostic for issue 21 next to the real-text ablations (README.md, "Find, then step"): the copy probe
(find the question's sentence) is learnt on real text, "next-of-copy" (find it, then answer the sentence
after it) is not. These tasks separate the two hops on random token ids (SYNTHETIC: no text, no labels
from data; fresh examples every update, so nothing can be memorised) with the plain-PyTorch ETC encoder
(``etc_fairseq.encoder``, etc_tiny's widths, hard g2l as every ETC arm of the ablations):

- input: ``S`` sentences of ``P`` random pieces each in the long input; global input ``[Q, s_1 .. s_S]``:
  one QUESTION token ``Q`` and one SENTENCE token per sentence (``s_i`` reads only its own pieces: hard
  g2l). Each sentence is its own long context, so l2l never crosses sentences: the only way from one
  sentence to the next is g2g, whose relative label between ``s_i`` and ``s_j`` is the offset ``j - i``;
- ``mark``:      one sentence holds the piece MARK; the answer is that sentence (one hop: g2l);
- ``step``:      the answer is the sentence *after* the one holding MARK (g2l, then g2g offset -1);
- ``match``:     ``Q``'s token id is a random piece ``q`` that occurs in exactly one sentence; the answer is
  that sentence (the copy probe's hop: a long piece reads ``Q`` over l2g and matches its own id);
- ``matchstep``: the sentence after the one holding ``q`` (next-of-copy's two hops).

``--no-g2g-positions`` gives every SENTENCE token its own global context (g2g label "other_context" for
every pair, no offsets): the control that ``step`` cannot be solved without the offsets.

A sentence token's features after layer ``k`` can depend on the match of its own pieces only from layer 2
on (layer 1: pieces read ``Q``; layer 2: the sentence token reads its pieces), so ``matchstep`` needs 3
layers (layer 3: ``s_{i+1}`` reads ``s_i`` over g2g); ``step`` needs 2.

Prints one row per (task, layers, g2g positions, seed) with the held-out accuracy at each evaluation (512
fresh examples, the same for every run of a seed) and writes every curve as JSON::

    python examples/ablations/hops.py --tasks step matchstep --layers 2 3 --steps 1000 --seeds 1 2 3 \\
        --out examples/ablations/results/hops/results.json
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Dict, List, Tuple

import torch
import torch.nn as nn

from etc_fairseq.encoder.config import EtcEncoderConfig
from etc_fairseq.encoder.model import EtcEncoder
from etc_fairseq.structure.global_tokens import GlobalTokenType

TASKS = ("mark", "step", "match", "matchstep")
PAD, MARK, FILLER = 1, 3, 4  # FILLER: the token id of the SENTENCE tokens (and of Q where Q mirrors nothing)
FIRST_PIECE = 10             # random pieces are drawn from FIRST_PIECE .. vocab - 1


@dataclass(frozen=True)
class Shape:
    sentences: int = 16
    pieces: int = 8
    vocab: int = 200


def make_batch(task: str, n: int, shape: Shape, generator: torch.Generator, g2g_positions: bool = True
               ) -> Tuple[Dict[str, torch.Tensor], torch.Tensor]:
    """``n`` fresh examples of ``task``.

    Returns (inputs, target):
        inputs["long_tokens"] int64 [n, S*P]; inputs["global_tokens"], inputs["global_types"] int64
        [n, 1+S] (index 0 is Q, index i the SENTENCE token of sentence i-1); inputs["structure"]: the
        compact ids of ``EtcEncoder.forward`` (``long_segment`` [n, S*P], ``long_context`` [n, S*P],
        ``global_context`` [n, 1+S], int64);
        target int64 [n]: the answer sentence, 0 .. S-1.
    """
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; expected one of {', '.join(TASKS)}")
    S, P, V = shape.sentences, shape.pieces, shape.vocab
    pieces = torch.randint(FIRST_PIECE, V, (n, S, P), generator=generator)       # [n, S, P]
    found = torch.randint(0, S - 1, (n,), generator=generator)                   # never the last sentence
    at = torch.randint(0, P, (n,), generator=generator)
    matching = task in ("match", "matchstep")
    q = torch.randint(FIRST_PIECE, V, (n,), generator=generator)
    if matching:
        # q occurs only where it is put: every other occurrence becomes the next piece id (cyclically)
        elsewhere = pieces.eq(q[:, None, None])
        bumped = FIRST_PIECE + (q - FIRST_PIECE + 1) % (V - FIRST_PIECE)
        pieces = torch.where(elsewhere, bumped[:, None, None].expand_as(pieces), pieces)
    rows = torch.arange(n)
    pieces[rows, found, at] = q if matching else torch.full_like(q, MARK)
    sentence_of_piece = torch.arange(S).repeat_interleave(P).expand(n, -1)       # [n, S*P]
    q_token = q if matching else torch.full_like(q, FILLER)
    global_tokens = torch.cat([q_token[:, None], torch.full((n, S), FILLER)], dim=1)  # [n, 1+S]
    global_types = torch.cat([torch.full((n, 1), int(GlobalTokenType.QUESTION)),
                              torch.full((n, S), int(GlobalTokenType.SENTENCE))], dim=1)
    # sentence tokens share global context 1 (offsets between them), Q has context 0; without positions
    # each sentence token has a context of its own
    sentence_context = torch.arange(1, S + 1) if not g2g_positions else torch.ones(S, dtype=torch.long)
    global_context = torch.cat([torch.zeros(1, dtype=torch.long), sentence_context]).expand(n, -1)
    inputs = {
        "long_tokens": pieces.reshape(n, S * P),
        "global_tokens": global_tokens,
        "global_types": global_types,
        "structure": {
            "long_segment": (sentence_of_piece + 1).contiguous(),   # the global index of its SENTENCE token
            "long_context": sentence_of_piece.contiguous(),          # l2l stays inside a sentence
            "global_context": global_context.contiguous(),
        },
    }
    target = found + (1 if task in ("step", "matchstep") else 0)
    return inputs, target


class SentenceScorer(nn.Module):
    """ETC encoder + one linear score per SENTENCE token."""

    def __init__(self, layers: int, shape: Shape):
        super().__init__()
        cfg = EtcEncoderConfig.preset("etc_tiny", encoder_layers=layers, local_radius=4, dropout=0.0,
                                      attention_dropout=0.0, hard_g2l=True)
        self.encoder = EtcEncoder(cfg, shape.vocab, PAD, FILLER)
        self.score = nn.Linear(cfg.encoder_embed_dim, 1)
        self.find_score = nn.Linear(cfg.encoder_embed_dim, 1)   # used only with the auxiliary find loss

    def forward(self, inputs: Dict[str, torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor]:
        """-> (answer logits, find logits), float [n, S] each: one logit per sentence from each head."""
        out = self.encoder(inputs["long_tokens"], inputs["global_tokens"], inputs["global_types"], inputs["structure"])
        sentences = out.global_features[:, 1:]                       # [n, S, dim]
        return self.score(sentences).squeeze(-1), self.find_score(sentences).squeeze(-1)


def train(task: str, layers: int, steps: int, seed: int, shape: Shape = Shape(), batch: int = 32, lr: float = 1e-3,
          eval_every: int = 100, eval_examples: int = 512, g2g_positions: bool = True, aux_find: float = 0.0
          ) -> List[Tuple[int, float]]:
    """Train a fresh model on fresh batches; -> [(update, held-out accuracy %)] every ``eval_every`` updates.

    ``aux_find`` > 0 adds that weight times a second head's cross-entropy on the *found* sentence (the one
    holding MARK / q; for ``step`` and ``matchstep`` the sentence before the answer): partial credit for the
    first hop, as HotpotQA's supporting-fact loss gives. Accuracy is always the answer head's."""
    torch.manual_seed(seed)
    model = SentenceScorer(layers, shape)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    data = torch.Generator().manual_seed(1000 + seed)
    held_out = make_batch(task, eval_examples, shape, torch.Generator().manual_seed(seed), g2g_positions)
    curve = []
    for update in range(1, steps + 1):
        model.train()
        inputs, target = make_batch(task, batch, shape, data, g2g_positions)
        answer_logits, find_logits = model(inputs)
        loss = nn.functional.cross_entropy(answer_logits, target)
        if aux_find:
            found = target - (1 if task in ("step", "matchstep") else 0)
            loss = loss + aux_find * nn.functional.cross_entropy(find_logits, found)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if update % eval_every == 0 or update == steps:
            model.eval()
            with torch.no_grad():
                correct = model(held_out[0])[0].argmax(-1).eq(held_out[1]).float().mean().item()
            curve.append((update, round(100 * correct, 2)))
    return curve


def summarize(runs: List[dict]) -> List[dict]:
    """Per (task, layers): the final held-out accuracy of every seed, its mean and sample standard deviation."""
    groups: Dict[Tuple[str, int], List[dict]] = {}
    for r in runs:
        groups.setdefault((r["task"], r["layers"]), []).append(r)
    rows = []
    for (task, layers), group in groups.items():
        finals = [r["curve"][-1][1] for r in group]
        rows.append({"task": task, "layers": layers, "updates": group[0]["curve"][-1][0], "per_seed": finals,
                     "mean": statistics.mean(finals), "std": statistics.stdev(finals) if len(finals) > 1 else 0.0})
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    p.add_argument("--layers", nargs="+", type=int, default=[2, 3])
    p.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    p.add_argument("--steps", type=int, default=1000, help="updates per run (batch --batch, fresh examples)")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--no-g2g-positions", action="store_true",
                   help="every SENTENCE token in its own global context: no g2g offsets (the control)")
    p.add_argument("--aux-find", type=float, default=0.0,
                   help="weight of an auxiliary loss on the found sentence (partial credit for the first hop)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, help="JSON file for every curve")
    args = p.parse_args(argv)
    for n in args.layers:
        if n < 1:
            p.error(f"--layers: expected layer counts >= 1, got {n}")
    torch.set_num_threads(args.threads)
    shape = Shape()
    chance = 100.0 / shape.sentences
    runs = []
    print(f"SYNTHETIC hop tasks: {shape.sentences} sentences x {shape.pieces} pieces, chance {chance:.2f} %, "
          f"g2g positions {'off' if args.no_g2g_positions else 'on'}, auxiliary find loss {args.aux_find}")
    print("task       layers seed  held-out accuracy % at update ...                 wall s")
    for task in args.tasks:
        for layers in args.layers:
            for seed in args.seeds:
                t0 = time.time()
                curve = train(task, layers, args.steps, seed, shape, args.batch, args.lr, args.eval_every,
                              g2g_positions=not args.no_g2g_positions, aux_find=args.aux_find)
                wall = time.time() - t0
                cells = " ".join(f"{u}:{a:.1f}" for u, a in curve)
                print(f"{task:10s} {layers:6d} {seed:4d}  {cells}  {wall:.0f}", flush=True)
                runs.append({"task": task, "layers": layers, "seed": seed, "curve": curve, "wall_s": round(wall, 1)})
    summary = summarize(runs)
    print("\n| task | layers | g2g positions | auxiliary find loss | updates | held-out accuracy %, mean +- std | per seed |")
    print("|---|---|---|---|---|---|---|")
    for row in summary:
        print(f"| {row['task']} | {row['layers']} | {'off' if args.no_g2g_positions else 'on'} | {args.aux_find} | "
              f"{row['updates']} | {row['mean']:.1f} +- {row['std']:.1f} | {' '.join(f'{a:.1f}' for a in row['per_seed'])} |")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        result = {"what": "SYNTHETIC hop tasks (random token ids), examples/ablations/hops.py",
                  "command": "python examples/ablations/hops.py " + " ".join(sys.argv[1:] if argv is None else argv),
                  "shape": asdict(shape), "chance_percent": chance,
                  "batch": args.batch, "lr": args.lr, "g2g_positions": not args.no_g2g_positions,
                  "aux_find": args.aux_find,
                  "torch": torch.__version__, "python": platform.python_version(), "summary": summary, "runs": runs}
        tmp = args.out.with_suffix(args.out.suffix + ".tmp")
        tmp.write_text(json.dumps(result, indent=1) + "\n")
        tmp.replace(args.out)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
