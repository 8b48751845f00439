"""Collect examples/lifted_minilm/run.sh's logs into one JSON, one PNG and the README's Markdown table.

Reuses examples/ablations/collect.py for every log it reads (one definition of a fine-tuning arm's seeds,
mean, sample standard deviation and learning curve; of a held-out MLM/CPC validation), under RUN_DIR:

  mlm/<model>-<seed>.log          fairseq-validate --task etc_pretraining (seeds: the masking)
  nextsent/ft/<arm>-<seed>.log    fairseq-train --task etc_nextsent (nextsent/data-structure-<LONG>/valid.meta.json:
                                  the word-overlap and random baselines of the same held-out records)
  wikihop/ft/<arm>-<seed>.log     fairseq-train --task etc_wikihop (wikihop/data-<LONG>/valid.meta.json: the
                                  word-overlap and random baselines of the same held-out records)
  hotpotqa/ft/<arm>-<seed>.log    fairseq-train --task etc_hotpotqa (hotpotqa/overlap.json: the word-overlap
                                  baseline under the official metrics; hotpotqa/raw/dev.json: random)
  classify/ft/<arm>-<seed>.log    fairseq-train --task etc_structured (classify/floor-*.json: the floors)
  news/ft/<arm>-<seed>.log        fairseq-train --task etc_structured on the BBC News articles (news/floor-*.json)

A section whose logs are all missing is left out (a partial run collects what it has); a fine-tuning arm
counts the seeds whose run finished (its ``seeds``), a run still going or stopped is listed under
``unfinished``; a finished log without a validation line, or a missing held-out MLM log, is one error line
naming the file.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

HERE = Path(__file__).resolve().parent


def _ablations_collect():
    spec = importlib.util.spec_from_file_location("ablations_collect", HERE.parent / "ablations" / "collect.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


abl = _ablations_collect()
CollectError = abl.CollectError

MLM_MODELS = {
    "continued": "lifted MiniLM, pretraining continued ({objective})",
    "lifted": "lifted MiniLM, not continued",
    "etc_tiny": "etc_tiny from scratch, same data and updates",
}
ARMS = {
    "etc": "ETC (lifted + continued), sentence global tokens, long {long}",
    "etc512": "the same, first 512 long tokens",
    "local": "the same, local attention only (one CLS global token), long {long}",
    "bert512": "the source model as released (full attention, absolute positions), first 512 tokens",
    "continued": "ETC (lifted + continued), CLS global token",
    "lifted": "ETC (lifted, not continued), CLS global token",
    "continued_mean": "ETC (lifted + continued), mean of the long tokens",
    "lifted_mean": "ETC (lifted, not continued), mean of the long tokens",
    "keeppos": "ETC lifted keeping the source's absolute positions, not continued, CLS global token",
    "keeppos_mean": "ETC lifted keeping the source's absolute positions, not continued, mean of the long tokens",
}
#: the WikiHop arms' own descriptions (its layout and its crop differ from nextsent's)
WIKIHOP_ARMS = {
    "etc": "ETC (lifted + continued), candidate / question / context / sentence global tokens, long {long}",
    "etc512": "the same, cropped to 512 long tokens by the paper's rule (the longest supports lose their last "
              "sentences first)",
    "local": "the same model, local attention only (one CLS global token), the candidates written into the long "
             "input after the query, long {long}",
    "bert512": "the source model as released (full attention, absolute positions), the first 512 tokens of the "
               "same long input (query, candidates, supports)",
    "etc_strings": "ETC as etc, with each candidate's string also in the long input, read by its CANDIDATE token "
                   "(etc-prepare wikihop --candidate-strings), long {long}",
}
#: the BBC News arms (run.sh's news stage: real labels, record level)
NEWS_ARMS = {
    "etc": "ETC (lifted + continued), CLS global token + one SENTENCE global token per sentence, long {long}",
    "etc512": "the same, first 512 long tokens",
    "local": "the same model, local attention only (the CLS global token alone), long {long}",
    "bert512": "the source model as released (full attention, absolute positions), first 512 tokens, head on "
               "the mean of its outputs",
}
#: the HotpotQA-format arms (etc-prepare hotpotqa's layout; its crop keeps paragraphs in order while they fit)
HOTPOTQA_ARMS = {
    "etc": "ETC (lifted + continued), question / paragraph / title / sentence global tokens, long {long}",
    "etc512": "the same, the paragraphs that fit into 512 long tokens",
    "flat": "the same as etc, prepared with --flat-structure (no paragraph tokens or hierarchy, no context cut)",
}
#: the validation keys of etc_hotpotqa's criterion kept per seed (percent); the first is the headline
HOTPOTQA_KEYS = ("ans_em", "sp_f1", "joint_f1")


def wikihop_meta(task_dir: Path, long_len: int) -> dict:
    """The held-out split's floors and counts that ``etc-prepare wikihop`` wrote for long length ``long_len``
    (``valid.meta.json``: random and word-overlap accuracy over the full records, in percent)."""
    path = task_dir / f"data-{long_len}" / "valid.meta.json"
    if not path.is_file():
        raise CollectError(f"{path}: missing (etc-prepare wikihop has not run for long length {long_len})")
    c = json.loads(path.read_text(encoding="utf-8"))["counts"]
    if "overlap_accuracy" not in c:
        raise CollectError(f"{path}: no 'overlap_accuracy' (prepared before etc-prepare wikihop wrote its "
                           f"baselines: prepare it again)")
    return {k: c[k] for k in ("records", "candidates", "answers_unmentioned", "truncated_examples",
                              "overlap_accuracy", "random_accuracy")}


def hotpotqa_meta(task_dir: Path) -> dict:
    """The held-out floors: random (one of each record's paragraph titles, mean over records) and word overlap
    (``overlap.json``: ``etc-evaluate hotpotqa`` on ``examples/hotpotqa/overlap.py``'s predictions), in percent,
    under the keys the other sections use (``*_accuracy`` = answer EM)."""
    path = task_dir / "overlap.json"
    if not path.is_file():
        raise CollectError(f"{path}: missing (run.sh's hotpotqa stage writes it before fine-tuning)")
    o = json.loads(path.read_text(encoding="utf-8"))
    records = json.loads((task_dir / "raw" / "dev.json").read_text(encoding="utf-8"))
    return {"records": len(records), "overlap_accuracy": 100 * o["em"], "overlap_sp_f1": 100 * o["sp_f1"],
            "overlap_joint_f1": 100 * o["joint_f1"],
            "random_accuracy": 100 * sum(1 / len(r["context"]) for r in records) / len(records)}


def hotpotqa_arm(task_dir: Path, arm: str, seeds: Sequence[str]) -> dict:
    """One HotpotQA-format arm: the last validation of each seed's run (:data:`HOTPOTQA_KEYS`, at the
    criterion's threshold 0.5; ``accuracy`` is the answer EM, as the plots and tables read it), their summaries
    and the answer-EM curve; and, where every seed has ``pred/<arm>-<seed>.json`` (``etc-predict hotpotqa
    --tune-sp-threshold --report``), ``tuned``: the same keys at the threshold chosen on those records."""
    per_seed, curves = {}, {}
    for s in seeds:
        path = task_dir / "ft" / f"{arm}-{s}.log"
        lines = [x for x in abl.read_valid(path) if "num_updates" in x]
        if not lines or any(k not in x for x in lines for k in HOTPOTQA_KEYS):
            raise CollectError(f"{path}: no validation line with num_updates and {', '.join(HOTPOTQA_KEYS)} "
                               "(not an etc_hotpotqa fine-tuning log?)")
        last = lines[-1]
        per_seed[s] = {"accuracy": last["ans_em"], **{k: last[k] for k in HOTPOTQA_KEYS[1:]}, "lost": 0.0,
                       "loss": last["loss"], "updates": int(last["num_updates"])}
        curves[s] = {int(x["num_updates"]): x["ans_em"] for x in lines}
    curve = [{"updates": u, "accuracy": abl.summary([c[u] for c in curves.values()])}
             for u in sorted(set.intersection(*(set(c) for c in curves.values())))]
    out = {"seeds": per_seed, "curve": curve, "updates": sorted({x["updates"] for x in per_seed.values()}),
           "lost": abl.summary([0.0]), "accuracy": abl.summary([x["accuracy"] for x in per_seed.values()])}
    out.update({k: abl.summary([x[k] for x in per_seed.values()]) for k in HOTPOTQA_KEYS[1:]})
    reports = [task_dir / "pred" / f"{arm}-{s}.json" for s in seeds]
    if all(p.is_file() for p in reports):
        tuned = {}
        for s, p in zip(seeds, reports):
            r = json.loads(p.read_text(encoding="utf-8"))
            if "metrics" not in r:
                raise CollectError(f"{p}: no 'metrics' (etc-predict ran on a split without answers?)")
            m = r["metrics"]
            tuned[s] = {"ans_em": 100 * m["em"], "sp_f1": 100 * m["sp_f1"], "joint_f1": 100 * m["joint_f1"],
                        "sp_threshold": r["sp_threshold"]}
        out["tuned"] = {"seeds": tuned, **{k: abl.summary([x[k] for x in tuned.values()]) for k in HOTPOTQA_KEYS}}
    return out


def _finished(log: Path) -> bool:
    """A fine-tuning log whose run ended (run.sh's test for a complete step: fairseq-train's last line)."""
    return log.is_file() and "done training" in log.read_text(encoding="utf-8", errors="replace")


def _finetune(run_dir: Path, task: str, arms: Sequence[str], seeds: Sequence[str], long_len: int,
              unfinished: List[str], labels: Optional[Dict[str, str]] = None) -> Dict[str, dict]:
    """The arms of one task over the seeds whose run finished (an arm may have fewer seeds than asked: its
    ``seeds`` say which); a log of a run still going or stopped is left out and its path added to
    ``unfinished``."""
    out = {}
    for a in arms:
        logs = {s: run_dir / task / "ft" / f"{a}-{s}.log" for s in seeds}
        done = [s for s, log in logs.items() if _finished(log)]
        unfinished.extend(str(log) for s, log in logs.items() if log.is_file() and s not in done)
        if done:
            arm = hotpotqa_arm(run_dir / task, a, done) if task == "hotpotqa" else abl.finetune_arm(run_dir / task, a, done)
            out[a] = dict(arm, label=(labels or ARMS)[a].format(long=long_len))
    return out


def _floors(task_dir: Path) -> Dict[str, dict]:
    """{model name: classify.py baseline JSON} of the ``floor-<model>.json`` files in ``task_dir``."""
    return {p.stem[len("floor-"):]: json.loads(p.read_text()) for p in sorted(task_dir.glob("floor-*.json"))}


def continued_objective(run_dir: Path) -> str:
    """What the continued pretraining of ``run_dir`` trained: "MLM only" where its log's criterion config has
    ``cpc_weight`` 0 (run.sh's ``PRE_CPC_WEIGHT=0``), else "MLM + CPC" (also when the log is absent)."""
    log = run_dir / "pre" / "continued.log"
    found = re.search(r"'cpc_weight': ([0-9.eE+-]+)", log.read_text(encoding="utf-8")) if log.is_file() else None
    return "MLM only" if found and float(found.group(1)) == 0.0 else "MLM + CPC"


def collect(run_dir: Path, seeds: Sequence[str], long_len: int) -> dict:
    res: dict = {"run_dir": str(run_dir), "seeds": list(seeds), "long": long_len, "sections": {}, "unfinished": []}
    labels = dict(MLM_MODELS, continued=MLM_MODELS["continued"].format(objective=continued_objective(run_dir)))
    mlm = {m: abl.mlm_arm({s: run_dir / "mlm" / f"{m}-{s}.log" for s in seeds}, label)
           for m, label in labels.items() if any((run_dir / "mlm" / f"{m}-{s}.log").is_file() for s in seeds)}
    if mlm:
        res["sections"]["mlm"] = {"metric": "held-out MLM loss (bits) / accuracy (%), CPC accuracy (%); "
                                            "seeds: the masking", "arms": mlm}
    arms = _finetune(run_dir, "nextsent", ["etc", "etc512", "local", "bert512"], seeds, long_len, res["unfinished"])
    if arms:
        res["sections"]["nextsent"] = {
            "metric": "held-out nextsent accuracy / MRR (%)", "arms": arms,
            "baseline": abl.nextsent_meta(run_dir / "nextsent", long_len),
            "similarity": {p.stem[len("similarity-"):]: json.loads(p.read_text())
                           for p in sorted((run_dir / "nextsent").glob("similarity-*.json"))}}
    arms = _finetune(run_dir, "wikihop", list(WIKIHOP_ARMS), seeds, long_len, res["unfinished"], WIKIHOP_ARMS)
    if arms:
        res["sections"]["wikihop"] = {"metric": "dev accuracy (%)", "arms": arms,
                                      "baseline": wikihop_meta(run_dir / "wikihop", long_len)}
    arms = _finetune(run_dir, "hotpotqa", list(HOTPOTQA_ARMS), seeds, long_len, res["unfinished"], HOTPOTQA_ARMS)
    if arms:
        res["sections"]["hotpotqa"] = {"metric": "dev answer EM / supporting-fact F1 / joint F1 (%)", "arms": arms,
                                       "baseline": hotpotqa_meta(run_dir / "hotpotqa")}
    arms = _finetune(run_dir, "classify", ["continued", "lifted", "continued_mean", "lifted_mean", "keeppos",
                                           "keeppos_mean"], seeds, long_len,
                     res["unfinished"])
    if arms:
        res["sections"]["classify"] = {"metric": "held-out polarity accuracy (%), REAL labels", "arms": arms,
                                       "floors": _floors(run_dir / "classify")}
    arms = _finetune(run_dir, "news", list(NEWS_ARMS), seeds, long_len, res["unfinished"], NEWS_ARMS)
    if arms:
        res["sections"]["news"] = {"metric": "held-out BBC News topical-area accuracy (%), REAL labels", "arms": arms,
                                   "floors": _floors(run_dir / "news")}
        if (run_dir / "news" / "lexical.json").is_file():
            res["sections"]["news"]["lexical"] = json.loads((run_dir / "news" / "lexical.json").read_text())
    return res


def markdown(res: dict) -> str:
    rows = ["| task | arm | metric | mean +- std | per seed | updates |", "|---|---|---|---|---|---|"]
    for name, sec in res["sections"].items():
        for arm_name, arm in sec["arms"].items():
            seeds = arm["seeds"].values()
            if name == "mlm":
                cell = (f"{arm['mlm_loss']['mean']:.2f} +- {arm['mlm_loss']['std']:.2f} bits / "
                        f"{arm['mlm_accuracy']['mean']:.1f} +- {arm['mlm_accuracy']['std']:.1f} %")
                per = " ".join(f"{x['mlm_accuracy']:.1f}" for x in seeds)
                if "cpc_accuracy" in arm:
                    cell += f"; CPC {arm['cpc_accuracy']['mean']:.1f} +- {arm['cpc_accuracy']['std']:.1f} %"
                    per += " / CPC " + " ".join(f"{x['cpc_accuracy']:.1f}" for x in seeds)
                rows.append(f"| {name} | {arm_name}: {arm['label']} | held-out MLM loss / acc.; CPC acc. | {cell} | {per} | |")
                continue
            one = len(arm["seeds"]) == 1  # no spread to show: the value, and "(1 seed)"
            cell = f"{arm['accuracy']['mean']:.2f}" + ("" if one else f" +- {arm['accuracy']['std']:.2f}")
            per = f"seeds {' '.join(arm['seeds'])}: " + " ".join(f"{x['accuracy']:.2f}" for x in seeds)
            for extra in ("mrr", *HOTPOTQA_KEYS[1:]):
                if extra in arm:
                    cell += f" / {arm[extra]['mean']:.1f}" + ("" if one else f" +- {arm[extra]['std']:.1f}")
                    per += " / " + " ".join(f"{x[extra]:.1f}" for x in seeds)
            if one:
                cell += " (1 seed)"
            if arm["lost"]["mean"] > 0:
                cell += f" (lost {arm['lost']['mean']:.1f} %)"
            rows.append(f"| {name} | {arm_name}: {arm['label']} | {sec['metric']} | {cell} | {per} | "
                        f"{', '.join(map(str, arm['updates']))} |")
            if "tuned" in arm:
                t = arm["tuned"]
                cell = " / ".join(f"{t[k]['mean']:.1f}" + ("" if one else f" +- {t[k]['std']:.1f}") for k in HOTPOTQA_KEYS)
                per = " / ".join(" ".join(f"{x[k]:.1f}" for x in t["seeds"].values()) for k in HOTPOTQA_KEYS)
                thresholds = " ".join(str(x["sp_threshold"]) for x in t["seeds"].values())
                rows.append(f"| {name} | {arm_name}, the sp threshold chosen on the held-out records ({thresholds}) | "
                            f"{sec['metric']} | {cell} | {per} | {', '.join(map(str, arm['updates']))} |")
        b = sec.get("baseline")
        if b and name == "nextsent":
            rows.append(f"| {name} | baselines: word overlap / random | accuracy % / MRR % | {b['overlap_accuracy']:.1f} / "
                        f"{b['overlap_mrr']:.1f} ; {b['random_accuracy']:.1f} / {b['random_mrr']:.1f} | | |")
        elif b and name == "hotpotqa":
            rows.append(f"| {name} | baselines: word overlap / random | {sec['metric']} | {b['overlap_accuracy']:.1f} / "
                        f"{b['overlap_sp_f1']:.1f} / {b['overlap_joint_f1']:.1f} ; {b['random_accuracy']:.1f} (answer) | | |")
        elif b:
            rows.append(f"| {name} | baselines: word overlap / random | accuracy % | {b['overlap_accuracy']:.1f} ; "
                        f"{b['random_accuracy']:.1f} | | |")
        for model, sim in sec.get("similarity", {}).items():
            what = "SENTENCE-token outputs" if sim.get("pool") == "sentence" else "mean-pooled embeddings"
            rows.append(f"| {name} | zero-shot: the sentence most similar to the question ({model}'s frozen "
                        f"{what}) | accuracy % | {sim['answer_accuracy']:.1f} | | |")
        if "lexical" in sec:
            f = sec["lexical"]
            rows.append(f"| {name} | lexical floor: logistic regression on the tf-idf of every word | accuracy % | "
                        f"{f['accuracy']:.2f} (majority class {f['majority_class']:.1f}) | | |")
        for floor_name, f in sec.get("floors", {}).items():
            rows.append(f"| {name} | floor: logistic regression on {floor_name}'s frozen mean-pooled features "
                        f"(first {f['max_pieces']} pieces) | "
                        f"accuracy % | {f['accuracy']:.2f} (majority class {f['majority_class']:.1f}) | | |")
    return "\n".join(rows) + "\n"


def plot(res: dict, png: Path, title: str = "lifted all-MiniLM-L6-v2 in ETC") -> None:
    """One panel per section: bars (mean, error bar min..max over seeds, dots = seeds) with the baselines;
    the fine-tuning sections also get their held-out learning curves."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = []
    for name, sec in res["sections"].items():
        panels.append((name, "bars"))
        if name != "mlm":
            panels.append((name, "curves"))
    cols = min(max(len(panels), 1), 4)
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.9 * rows), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    for ax, (name, kind) in zip(axes.flat, panels):
        sec = res["sections"][name]
        arms = sec["arms"]
        key = "mlm_accuracy" if name == "mlm" else "accuracy"
        if kind == "curves":
            for arm_name, arm in arms.items():
                u = [p["updates"] for p in arm["curve"]]
                line, = ax.plot(u, [p["accuracy"]["mean"] for p in arm["curve"]], marker=".", label=arm_name)
                ax.fill_between(u, [p["accuracy"]["min"] for p in arm["curve"]], [p["accuracy"]["max"] for p in arm["curve"]],
                                color=line.get_color(), alpha=0.15)
            ax.set_xlabel("fine-tuning updates")
        else:
            labels = list(arms)
            means = [arms[k][key]["mean"] for k in labels]
            lo = [arms[k][key]["mean"] - arms[k][key]["min"] for k in labels]
            hi = [arms[k][key]["max"] - arms[k][key]["mean"] for k in labels]
            ax.bar(range(len(labels)), means, yerr=[lo, hi], capsize=3, color="C0", alpha=0.7)
            for i, k in enumerate(labels):
                vals = [s[key] for s in arms[k]["seeds"].values()]
                ax.plot([i] * len(vals), vals, "k.", ms=4)
            if name == "mlm" and all("cpc_accuracy" in arms[k] for k in labels):
                ax.bar([i + 0.3 for i in range(len(labels))], [arms[k]["cpc_accuracy"]["mean"] for k in labels],
                       width=0.3, color="C1", alpha=0.7, label="CPC accuracy %")
                cand = [arms[k]["cpc_candidates"]["mean"] for k in labels if "cpc_candidates" in arms[k]]
                if cand:
                    ax.axhline(100 / (sum(cand) / len(cand)), color="C1", ls=":", lw=1, label="CPC chance")
            ax.set_xticks(range(len(labels)))
            ax.set_xticklabels(labels, fontsize=7, rotation=20)
        b = sec.get("baseline")
        if b:
            ax.axhline(b["overlap_accuracy"], color="k", ls="--", lw=1, label="word overlap")
            ax.axhline(b["random_accuracy"], color="k", ls=":", lw=1, label="random")
        for i, (model, sim) in enumerate(sec.get("similarity", {}).items()):
            ax.axhline(sim["answer_accuracy"], color=f"C{i + 4}", ls="-.", lw=1, label=f"zero-shot similarity: {model}")
        if "lexical" in sec:
            ax.axhline(sec["lexical"]["accuracy"], color="k", ls="--", lw=1, label="lexical floor (tf-idf LR)")
        for i, (floor_name, f) in enumerate(sec.get("floors", {}).items()):
            ax.axhline(f["accuracy"], color=f"C{i + 2}", ls="--", lw=1, label=f"floor: LR on {floor_name}")
        ax.set_ylabel({"mlm": "held-out MLM accuracy %", "hotpotqa": "held-out answer EM %"}.get(name, "held-out accuracy %"))
        ax.set_title(f"{name} ({kind})", fontsize=9)
        ax.legend(fontsize=6)
    fig.suptitle(f"{title}, seeds {' '.join(res['seeds'])}", fontsize=10)
    fig.tight_layout()
    fig.savefig(png, dpi=90)
    plt.close(fig)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--run-dir", type=Path, required=True)
    p.add_argument("--seeds", nargs="+", default=["1", "2", "3"])
    p.add_argument("--long", type=int, default=2048, help="the long length of the etc and local arms")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--png", type=Path, default=None)
    p.add_argument("--markdown", type=Path, default=None)
    p.add_argument("--title", default="lifted all-MiniLM-L6-v2 in ETC",
                   help="the PNG's title (which lift the run directory holds), also stored in the JSON")
    a = p.parse_args(argv)
    try:
        res = dict(collect(a.run_dir, a.seeds, a.long), title=a.title)
    except CollectError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if not res["sections"]:
        print(f"error: {a.run_dir}: no logs of any section yet", file=sys.stderr)
        return 1
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")
    if a.png is not None:
        plot(res, a.png, a.title)
    for log in res["unfinished"]:
        print(f"note: {log}: the run has not finished (still going, or stopped): left out", file=sys.stderr)
    text = markdown(res)
    if a.markdown is not None:
        a.markdown.write_text(text, encoding="utf-8")
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
