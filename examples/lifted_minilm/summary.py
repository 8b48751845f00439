"""The recipe's findings in one table, read from the committed results (``results/**``, written by
``collect.py`` and ``paired.py``): each row one question of issue 38, its figures (mean +- std over the seeds,
or a paired difference with its 95 % interval over records) and a verdict computed from them by one stated
rule, never typed by hand. The README's summary is this script's output, checked by tests/test_lifted_minilm.py.

    python examples/lifted_minilm/summary.py            # the markdown table
    python examples/lifted_minilm/summary.py --json     # the same rows as JSON

Rules: ``every seed above`` a scalar baseline: the lowest seed is above it; A against B by seeds:
``separated`` when every seed of A is above every seed of B (``reversed`` when below), else ``overlap``;
a paired difference: ``clear of zero`` when its interval over records excludes zero.
"""
from __future__ import annotations

import argparse
import functools
import json
import statistics
from pathlib import Path
from typing import Callable, Dict, List, Sequence

RESULTS = Path(__file__).resolve().parent / "results"


@functools.lru_cache(maxsize=None)
def load(name: str) -> dict:
    """One committed result, read once however many sections use it (no caller changes it)."""
    return json.loads((RESULTS / name).read_text(encoding="utf-8"))


def seeds(result: dict, section: str, arm: str, metric: str = "accuracy") -> List[float]:
    """The per-seed values of ``metric`` of one arm, in seed order."""
    per_seed = result["sections"][section]["arms"][arm]["seeds"]
    return [per_seed[s][metric] for s in sorted(per_seed, key=int)]


def spread(values: Sequence[float]) -> str:
    """``mean +- std`` over the seeds, one decimal; ``(n seeds)`` added unless there are 3."""
    if len(values) == 1:
        return f"{values[0]:.1f} (1 seed)"
    note = "" if len(values) == 3 else f" ({len(values)} seeds)"
    return f"{statistics.mean(values):.1f} +- {statistics.stdev(values):.1f}{note}"


def above_all(values: Sequence[float], baseline: float) -> str:
    return "every seed above" if min(values) > baseline else "not every seed above"


def by_seeds(a: Sequence[float], b: Sequence[float]) -> str:
    if min(a) > max(b):
        return "separated"
    if max(a) < min(b):
        return "reversed"
    return "overlap"


def paired(result: dict, a: str, b: str, metric: str) -> Dict[str, float]:
    for p in result["pairs"]:
        if (p["a"], p["b"]) == (a, b):
            m = p[metric]
            return {"difference": m["difference"], "low": m["records_interval"][0], "high": m["records_interval"][1]}
    raise KeyError(f"{a}:{b} not in the paired result")


def signed(x: float) -> str:
    """One decimal with its sign; a value that rounds to zero prints +0.0, never -0.0."""
    return f"{round(x, 1) + 0.0:+.1f}"


def interval(d: Dict[str, float]) -> str:
    return f"{signed(d['difference'])} [{signed(d['low'])}, {signed(d['high'])}]"


def clear(d: Dict[str, float]) -> str:
    return "clear of zero" if d["low"] > 0 else "reversed" if d["high"] < 0 else "across zero"


def pretraining() -> List[dict]:
    r = load("fix/results.json")
    out = []
    for metric, name in (("mlm_accuracy", "MLM accuracy"), ("cpc_accuracy", "CPC accuracy")):
        cont, lifted, tiny = (seeds(r, "mlm", a, metric) for a in ("continued", "lifted", "etc_tiny"))
        out.append({
            "item": "1: continued pretraining", "task": f"held-out Wikipedia, {name} (3 masking seeds)",
            "figures": f"continued {spread(cont)}; lifted, not continued {spread(lifted)}; etc_tiny {spread(tiny)}",
            "verdict": f"continued against both: {by_seeds(cont, lifted)}, {by_seeds(cont, tiny)}",
        })
    return out


def floor_classify() -> List[dict]:
    r = load("recipe/clfix.json")
    floor = r["sections"]["classify"]["floors"]["all-MiniLM-L6-v2-3L"]["accuracy"]
    return [{
        "item": "3: keeps what it knows", "task": f"polarity (real labels), run.sh's defaults, {head}",
        "figures": f"{spread(v)} against the frozen-feature floor {floor:.1f}",
        "verdict": above_all(v, floor),
    } for head, v in (("CLS head", seeds(r, "classify", "keeppos")), ("mean head", seeds(r, "classify", "keeppos_mean")))]


def nextsent() -> List[dict]:
    r, p = load("qcos/results.json"), load("qcos/paired-v1000.json")
    base = r["sections"]["nextsent"]["baseline"]
    etc, etc_mrr = seeds(r, "nextsent", "etc"), seeds(r, "nextsent", "etc", "mrr")
    rows = [{
        "item": "2: off chance", "task": "nextsent, 150 records, accuracy / MRR",
        "figures": (f"`etc` {spread(etc)} / {spread(etc_mrr)}; random {base['random_accuracy']:.1f} / "
                    f"{base['random_mrr']:.1f}, word overlap {base['overlap_accuracy']:.1f} / {base['overlap_mrr']:.1f}"),
        "verdict": (f"{above_all(etc, base['random_accuracy'])} random; MRR {above_all(etc_mrr, base['overlap_mrr'])} "
                    f"word overlap; accuracy {above_all(etc, base['overlap_accuracy'])} it"),
    }]
    zero_shot = r["sections"]["nextsent"]["similarity"]["all-MiniLM-L6-v2-3L"]["answer_accuracy"]
    rows.append({
        "item": "2: beyond the source model", "task": "nextsent, 150 records, accuracy",
        "figures": f"`etc` {spread(etc)}; the source model zero-shot (3 layers, frozen, cosine) {zero_shot:.1f}",
        "verdict": above_all(etc, zero_shot),
    })
    for other, direction in (("etc512", "longer beats 512"), ("local", "global beats local")):
        acc, mrr = paired(p, "etc", other, "accuracy"), paired(p, "etc", other, "mrr")
        rows.append({
            "item": f"2: {direction}", "task": "nextsent, 1,000 records, `etc` minus `" + other + "` (paired)",
            "figures": f"accuracy {interval(acc)}, MRR {interval(mrr)}",
            "verdict": f"accuracy {clear(acc)}, MRR {clear(mrr)}",
        })
    return rows


def longer_pretraining(updates: int, before: int) -> List[dict]:
    """The continued pretraining carried on from ``before`` to ``updates`` updates (``results/pre{updates}``; 300 is
    ``results/fix``): held-out MLM / CPC against ``before``, and nextsent fine-tuned from it (the seeds run; the
    paired result on the 1,000 records pools them, and pairs ``etc`` with the source model's zero-shot cosines
    where it has them)."""
    short = load(("fix" if before == 300 else f"pre{before}") + "/results.json")
    long_, p = load(f"pre{updates}/results.json"), load(f"pre{updates}/paired-v1000.json")
    rows = []
    for metric, name in (("mlm_accuracy", "MLM"), ("cpc_accuracy", "CPC")):
        a, b = seeds(long_, "mlm", "continued", metric), seeds(short, "mlm", "continued", metric)
        rows.append({
            "item": "1: longer continued pretraining", "task": f"held-out Wikipedia, {name} accuracy (3 masking seeds)",
            "figures": f"{updates} updates {spread(a)}; {before} updates {spread(b)}", "verdict": by_seeds(a, b),
        })
    zero_shot = {"150": long_["sections"]["nextsent"]["similarity"]["all-MiniLM-L6-v2-3L"]["answer_accuracy"],
                 "1,000": load("qcos/similarity-v1000.json")["answer_accuracy"]}
    etc = {"150": seeds(long_, "nextsent", "etc"), "1,000": [s["accuracy"] for s in p["arms"]["etc"]["per_seed"]]}
    n = len(p["arms"]["etc"]["files"])
    pooled = "1 seed" if n == 1 else f"{n} seeds pooled"
    for k in ("150", "1,000"):
        rows.append({
            "item": "2: beyond the source model",
            "task": f"nextsent, {k} records, accuracy, pretraining {updates} updates",
            "figures": f"`etc` {spread(etc[k])}; the source model zero-shot (3 layers, frozen, cosine) {zero_shot[k]:.1f}",
            "verdict": above_all(etc[k], zero_shot[k]),
        })
    pairs = [("local", "global beats local", "`local`")]
    if "source" in p["arms"]:
        pairs.insert(0, ("source", "beyond the source model", "the source model zero-shot"))
    for other, direction, name in pairs:
        acc, mrr = paired(p, "etc", other, "accuracy"), paired(p, "etc", other, "mrr")
        rows.append({
            "item": f"2: {direction}",
            "task": f"nextsent, 1,000 records, pretraining {updates} updates, `etc` minus {name} (paired, {pooled})",
            "figures": f"accuracy {interval(acc)}, MRR {interval(mrr)}",
            "verdict": f"accuracy {clear(acc)}, MRR {clear(mrr)}",
        })
    return rows


def wikihop(name: str, updates: int, local_arms: Sequence[str]) -> List[dict]:
    """``local_arms``: the ETC arms compared with ``local`` and with ``bert512`` (the source model), those the result
    has (``etc_strings`` sees the candidate strings, as both of those do)."""
    r = load(name)
    base, arms = r["sections"]["wikihop"]["baseline"], r["sections"]["wikihop"]["arms"]
    etc = seeds(r, "wikihop", "etc")
    rows = [{
        "item": "2: off chance", "task": f"WikiHop-format, 200 records, {updates} updates",
        "figures": f"`etc` {spread(etc)}; random {base['random_accuracy']:.2f}, word overlap {base['overlap_accuracy']:.1f}",
        "verdict": f"{above_all(etc, base['random_accuracy'])} random, {above_all(etc, base['overlap_accuracy'])} word overlap",
    }]
    pairs = ([("etc", "etc512", "longer beats 512")] + [(mine, "local", "global beats local") for mine in local_arms]
             + [(mine, "bert512", "beyond the source model") for mine in local_arms])
    for mine, other, direction in pairs:
        if other in arms and mine in arms:
            a, o = seeds(r, "wikihop", mine), seeds(r, "wikihop", other)
            rows.append({"item": f"2: {direction}", "task": f"WikiHop-format, {updates} updates, `{mine}` against `{other}`",
                         "figures": f"{spread(a)} against {spread(o)}", "verdict": by_seeds(a, o)})
    return rows


def wikihop_reach() -> List[dict]:
    """The 200-update arms on the records whose link path only the longer input keeps (wikihop_reach.py --arm), by
    seeds and, where reach.json has the pair (--pairs), record by record with the seeds averaged."""
    r = load("wikihop200/reach.json")
    arms = r["arms"]
    n = arms["etc"]["long_only"]["records"]
    rows = []
    for mine, other, direction in (("etc", "etc512", "longer beats 512"), ("etc", "local", "global beats local"),
                                   ("etc_strings", "local", "global beats local")):
        if mine not in arms or other not in arms:
            continue
        a, o = arms[mine]["long_only"]["per_seed"], arms[other]["long_only"]["per_seed"]
        row = {"item": f"2: {direction}",
               "task": f"WikiHop-format, 200 updates, the {n} records reachable at 2,048 only, `{mine}` against `{other}`",
               "figures": f"{spread(a)} against {spread(o)}", "verdict": by_seeds(a, o)}
        if any((q["a"], q["b"]) == (mine, other) for q in r.get("pairs", [])):  # per record, seeds averaged
            d = paired(r, mine, other, "long_only")
            row["figures"] += f"; paired over records {interval(d)}"
            row["verdict"] += f"; paired {clear(d)}"
        rows.append(row)
    return rows


def hotpotqa() -> List[dict]:
    r = load("hotpotqa/cosine.json")
    sec = r["sections"]["hotpotqa"]
    em = [v["ans_em"] for _, v in sorted(sec["arms"]["etc"]["tuned"]["seeds"].items())]
    base = sec["baseline"]
    return [{"item": "2: off chance", "task": "HotpotQA-format, 200 records, answer EM",
             "figures": f"`etc` {spread(em)}; random {base['random_accuracy']:.1f}, lexical floor {base['overlap_accuracy']:.1f}",
             "verdict": f"{above_all(em, base['random_accuracy'])} random, {above_all(em, base['overlap_accuracy'])} the floor"}]


def news() -> List[dict]:
    r = load("news300/results.json")
    sec = r["sections"]["news"]
    etc = seeds(r, "news", "etc")
    floor, lexical = sec["floors"]["all-MiniLM-L6-v2-3L"]["accuracy"], sec["lexical"]["accuracy"]
    rows = [{"item": "2: real labels, long inputs", "task": "BBC News, 500 articles, 300 updates",
             "figures": f"`etc` {spread(etc)}; frozen-feature floor {floor:.1f}, tf-idf floor {lexical:.1f}",
             "verdict": f"{above_all(etc, floor)} the frozen floor, {above_all(etc, lexical)} tf-idf"}]
    for other, direction in (("etc512", "longer beats 512"), ("local", "global beats local")):
        o = seeds(r, "news", other)
        rows.append({"item": f"2: {direction}", "task": f"BBC News, `etc` against `{other}`",
                     "figures": f"{spread(etc)} against {spread(o)}", "verdict": by_seeds(etc, o)})
    return rows


SECTIONS: Sequence[Callable[[], List[dict]]] = (
    pretraining, floor_classify, nextsent,
    *(functools.partial(longer_pretraining, updates, updates - 300) for updates in (600, 900, 1200)),
    lambda: wikihop("wikihop/cosine.json", 100, ("etc_strings",)),
    lambda: wikihop("wikihop200/cosine.json", 200, ("etc", "etc_strings")),
    wikihop_reach, hotpotqa, news)


def rows() -> List[dict]:
    return [row for section in SECTIONS for row in section()]


def markdown(table: Sequence[dict]) -> str:
    lines = ["| issue 38 | task, held-out | figures (%; mean +- std over 3 seeds unless said) | verdict |", "|---|---|---|---|"]
    lines += [f"| {r['item']} | {r['task']} | {r['figures']} | {r['verdict']} |" for r in table]
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print the rows as JSON instead of a markdown table")
    args = ap.parse_args(argv)
    print(json.dumps(rows(), indent=1) if args.json else markdown(rows()))


if __name__ == "__main__":
    main()
