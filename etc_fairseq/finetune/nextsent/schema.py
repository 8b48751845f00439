"""The CONSTRUCTED next-sentence task on real Wikipedia text: what one record is and how records are made.

Labels are constructed automatically; the text is real (the project's Wikipedia articles). One record:

- ``question``: a sentence removed from paragraph ``P`` of article ``A``;
- ``paragraphs``: ``P`` without the question, up to ``same_article`` other paragraphs of ``A`` (hard
  negatives: same entities, same style) and the first paragraphs of ``distractors`` other articles, in a
  seeded random order; each is ``(title, [sentences])``;
- ``answer``: ``(paragraph, sentence)`` of the sentence that followed the question in ``P`` (it now sits
  where the question was).

Finding it needs the whole input: the question comes first in the long input, the answer is typically
hundreds to thousands of word pieces later, the lexical cue is weak (every sentence of ``A`` shares its
entities; :func:`word_overlap_ranking` measures how far lexical matching gets), and the sentence just
before the gap is the strongest distractor (it is coherent with the question too, but in the wrong
direction).

Questions are drawn without replacement (:func:`question_pool`): no two records of a split share a
question, hence an answer, so a model cannot score by remembering an earlier record's answer.

Splits: articles are split once, by the seed, into train and held-out articles; a held-out record uses only
held-out articles (question and distractors), so no held-out text is ever seen in training. Everything is
deterministic from the seed.
"""
from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple
from etc_fairseq.errors import ConfigError, InputFormatError
from etc_fairseq.text import content_words

__all__ = [
    "Article",
    "NextSentRecord",
    "split_articles",
    "question_pool",
    "swap_questions",
    "PROBES",
    "make_records",
    "word_overlap_ranking",
    "record_to_json",
    "record_from_json",
    "content_words",
    "corpus_statistics",
    "target_fields",
    "field_specs",
]


@dataclass(frozen=True)
class Article:
    """A real article: its title and its paragraphs, each already split into sentences."""

    title: str
    paragraphs: Tuple[Tuple[str, ...], ...]


@dataclass
class NextSentRecord:
    """One CONSTRUCTED example (see the module docstring).

    Attributes:
        id: ``CONSTRUCTED_<split>_<n>``.
        question: the removed sentence.
        paragraphs: ``[(title, [sentence, ...]), ...]`` in input order.
        answer: ``(paragraph index, sentence index)`` into ``paragraphs``.
        article: title of the article the question comes from.
    """

    id: str
    question: str
    paragraphs: List[Tuple[str, List[str]]]
    answer: Tuple[int, int]
    article: str

    @property
    def num_sentences(self) -> int:
        return sum(len(s) for _, s in self.paragraphs)

    @property
    def support(self) -> Optional[Tuple[int, int]]:
        """``(paragraph, sentence)`` of the sentence just before the answer in its paragraph, None when the
        answer opens its paragraph: in the task, the sentence the removed question followed (the gap lies
        between it and the answer); in the next-of-copy probe, the copy. What the optional support loss
        (``--support-loss-weight``) supervises, as HotpotQA's supporting facts do."""
        p, s = self.answer
        return (p, s - 1) if s > 0 else None

    def answer_rank_index(self) -> int:
        """The answer's index among all sentences in input order (what a sentence ranking scores)."""
        p, s = self.answer
        return sum(len(x) for _, x in self.paragraphs[:p]) + s


def record_to_json(rec: NextSentRecord) -> dict:
    return {
        "id": rec.id,
        "question": rec.question,
        "paragraphs": [{"title": t, "sentences": list(s)} for t, s in rec.paragraphs],
        "answer": list(rec.answer),
        "article": rec.article,
    }


def record_from_json(d, where: str = "record") -> NextSentRecord:
    """A record as :func:`record_to_json` writes it, checked (``where`` names file and record in errors:
    one line naming the field, what was expected and what was found)."""
    from etc_fairseq.finetune.common.fields import RecordFields

    r = RecordFields(where)
    r.record(d)
    r.identify("id", repr(r.get(d, "id", str, "a non-empty string", check=bool)))
    paragraphs = []
    for i, p in enumerate(r.get(d, "paragraphs", list, "a list of {title, sentences}")):
        if not isinstance(p, dict):
            raise r.fail(f"paragraphs[{i}]", "an object {title, sentences}", p)
        title = r.get(p, "title", str, "a string", name=f"paragraphs[{i}].title")
        sentences = r.get(p, "sentences", list, "a list of strings", name=f"paragraphs[{i}].sentences",
                          check=lambda xs: all(isinstance(x, str) for x in xs))
        paragraphs.append((title, list(sentences)))
    answer = r.get(d, "answer", list, "[paragraph index, sentence index] into 'paragraphs'",
                   check=lambda a: len(a) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in a)
                   and 0 <= a[0] < len(paragraphs) and 0 <= a[1] < len(paragraphs[a[0]][1]))
    return NextSentRecord(
        id=d["id"],
        question=r.get(d, "question", str, "a string"),
        paragraphs=paragraphs,
        answer=(int(answer[0]), int(answer[1])),
        article=r.get(d, "article", str, "a string"),
    )


def _eligible(article: Article) -> List[int]:
    """Paragraphs of ``article`` that can give a question: at least 3 sentences."""
    return [i for i, p in enumerate(article.paragraphs) if len(p) >= 3]


def question_pool(articles: Sequence[Article]) -> List[Tuple[int, int, int]]:
    """Every possible question of ``articles``: ``(article index, paragraph index, sentence index)`` of each
    sentence that has a next sentence in a paragraph of at least 3 sentences, in article / paragraph /
    sentence order; a sentence text that occurs more than once (the Wikipedia sample repeats a few) counts
    once, at its first occurrence."""
    seen = set()
    out = []
    for a, art in enumerate(articles):
        for p in _eligible(art):
            for q in range(len(art.paragraphs[p]) - 1):
                if art.paragraphs[p][q] not in seen:
                    seen.add(art.paragraphs[p][q])
                    out.append((a, p, q))
    return out


def split_articles(articles: Sequence[Article], heldout_fraction: float, seed: int) -> Tuple[List[Article], List[Article]]:
    """(train articles, held-out articles): a seeded shuffle of the titles, the first
    ``round(heldout_fraction * n)`` held out. Titles must be unique."""
    titles = [a.title for a in articles]
    if len(set(titles)) != len(titles):
        raise InputFormatError("article titles must be unique")
    if not 0.0 < heldout_fraction < 1.0:
        raise ConfigError(f"heldout_fraction must be in (0, 1), got {heldout_fraction}")
    order = sorted(range(len(articles)), key=lambda i: titles[i])
    random.Random(f"nextsent-split-{seed}").shuffle(order)
    n_held = max(1, round(heldout_fraction * len(articles)))
    held = set(order[:n_held])
    return [a for i, a in enumerate(articles) if i not in held], [a for i, a in enumerate(articles) if i in held]


#: the diagnostic variants of the records (``make_records(probe=...)``, ``etc-prepare nextsent --probe``)
PROBES = ("copy", "next-of-copy")


def make_records(
    articles: Sequence[Article],
    n: int,
    split: str,
    seed: int,
    same_article: int = 2,
    distractors: int = 4,
    distractor_paragraphs: int = 2,
    probe: Optional[str] = None,
) -> List[NextSentRecord]:
    """``n`` records from ``articles`` only (see the module docstring), each with its own question: the
    questions are drawn without replacement from :func:`question_pool`.

    Args:
        articles: the split's articles (at least ``distractors + 1``, one with a paragraph of >= 3 sentences).
        n: number of records, at most ``len(question_pool(articles))`` (ValueError otherwise).
        split: name used in ids and in the seed.
        seed: everything is a function of ``(seed, split)`` and the articles.
        same_article: other paragraphs of the question's article included (at most).
        distractors: other articles contributing paragraphs.
        distractor_paragraphs: paragraphs taken from each distractor article (its first ones).
        probe: ``None`` for the task, or one of :data:`PROBES` (a PROBE, not the task; the question is a copy
            of a sentence that stays in its paragraph): ``"copy"``, the answer is that sentence (word overlap
            solves it; a model that does not carry the question to the sentence tokens cannot beat chance);
            ``"next-of-copy"``, the answer is the sentence after it (word overlap points at the copy, one
            sentence off: the model must find the copy, then step to its successor in sentence order).
    Returns:
        the records, ids ``CONSTRUCTED_<split>_<i>``.
    """
    if probe is not None and probe not in PROBES:
        raise ConfigError(f"probe must be one of {', '.join(PROBES)} or None, got {probe!r}")
    if len(articles) < distractors + 1:
        raise InputFormatError(f"{split}: {len(articles)} articles, need at least {distractors + 1} (--distractors {distractors})")
    pool_q = question_pool(articles)
    if not pool_q:
        raise InputFormatError(f"{split}: no article has a paragraph of at least 3 sentences")
    if n > len(pool_q):
        raise InputFormatError(
            f"{split}: {n} records requested but its {len(articles)} articles give only {len(pool_q)} distinct "
            f"questions (a sentence followed by another in a paragraph of >= 3 sentences); each question is "
            f"used once, so ask for at most {len(pool_q)} records or give more articles")
    rng = random.Random(f"nextsent-{split}-{seed}")
    # questions drawn WITHOUT replacement: no two records share a question (hence an answer), so that
    # nothing in a split can be answered by remembering an earlier record
    picks = rng.sample(range(len(pool_q)), n)
    out: List[NextSentRecord] = []
    for i, pick in enumerate(picks):
        a_idx, p_idx, q = pool_q[pick]
        art = articles[a_idx]
        para = list(art.paragraphs[p_idx])
        # the task: the answer (the sentence that followed the removed question) moves up to index q; the
        # copy probe answers the copy itself at q, next-of-copy the sentence after the copy at q + 1
        question = para.pop(q) if probe is None else para[q]
        answer = q + 1 if probe == "next-of-copy" else q
        others = [j for j in range(len(art.paragraphs)) if j != p_idx]
        extra = rng.sample(others, min(same_article, len(others)))
        pool = [a for a in articles if a.title != art.title]
        chosen = rng.sample(pool, distractors)
        paragraphs: List[Tuple[str, List[str], bool]] = [(art.title, para, True)]
        paragraphs += [(art.title, list(art.paragraphs[j]), False) for j in extra]
        for d in chosen:
            paragraphs += [(d.title, list(p), False) for p in d.paragraphs[:distractor_paragraphs]]
        rng.shuffle(paragraphs)
        where = next(k for k, (_, _, is_q) in enumerate(paragraphs) if is_q)
        out.append(
            NextSentRecord(
                id=f"CONSTRUCTED_{split}_{i}",
                question=question,
                paragraphs=[(t, s) for t, s, _ in paragraphs],
                answer=(where, answer),
                article=art.title,
            )
        )
    return out


def swap_questions(records: Sequence[NextSentRecord]) -> List[NextSentRecord]:
    """A CONTROL: record ``i`` with the question of record ``i + 1`` (the last with the first's), context and
    answer unchanged. A model that reads the question loses what it found through it; one that scores
    sentences without reading the question (position, style, memory) scores the same as on ``records``.
    At least 2 records."""
    if len(records) < 2:
        raise InputFormatError(f"swapping questions needs at least 2 records, got {len(records)}")
    n = len(records)
    return [dataclasses.replace(r, question=records[(i + 1) % n].question) for i, r in enumerate(records)]


def word_overlap_ranking(rec: NextSentRecord) -> List[float]:
    """The lexical baseline's score of every sentence (input order): the number of content words it shares
    with the question (ties broken by input order by the metric, i.e. against the baseline's favour
    only by chance)."""
    q = content_words(rec.question)
    return [float(len(q & content_words(s))) for _, sents in rec.paragraphs for s in sents]


def corpus_statistics(records: Sequence[NextSentRecord]) -> Dict[str, float]:
    """Mean sentences and paragraphs per record (pieces are counted by ``etc-prepare``)."""
    n = max(len(records), 1)
    return {
        "records": len(records),
        "mean_sentences": sum(r.num_sentences for r in records) / n,
        "mean_paragraphs": sum(len(r.paragraphs) for r in records) / n,
    }


def target_fields():
    """The task's own fields (:class:`~etc_fairseq.data.structured.FieldSpec` list): ``answer_index`` [1]
    (the answer's index among the example's kept sentences, -1 if truncation dropped it),
    ``num_sentences`` [1], ``long_sentence`` [long_len] (each long token's sentence index, -1 for the
    CLS, question and titles: what the no-globals ablation pools) and ``support_index`` [1]
    (:attr:`NextSentRecord.support` among the kept sentences, -1 if there is none or truncation dropped it;
    not required: data prepared before it existed loads, and only the support loss needs it) and
    ``question_len`` [1] (how many of the question's pieces the long input holds, at long positions
    ``1 .. question_len``; not required either: only the question-cosine head needs it)."""
    from etc_fairseq.data.structured import FieldSpec

    return [
        FieldSpec("answer_index", dtype="int16", pad=-1, role="target", length="own", required=True),
        FieldSpec("num_sentences", dtype="int16", pad=0, role="target", length="own", required=True),
        FieldSpec("long_sentence", dtype="int16", pad=-1, role="target", length="long", required=True),
        FieldSpec("support_index", dtype="int16", pad=-1, role="target", length="own", required=False),
        FieldSpec("question_len", dtype="int16", pad=0, role="target", length="own", required=False),
    ]


def field_specs(no_globals: bool = False):
    """Every field ``etc-prepare nextsent`` writes (narrow dtypes). ``no_globals``: only a CLS global token,
    so no global structure ids."""
    import dataclasses

    from etc_fairseq.data.structured import CORE_FIELDS
    from etc_fairseq.finetune.common.layout import STRUCTURE_FIELD_NAMES

    names = ("long_tokens", "global_tokens", "global_types") + STRUCTURE_FIELD_NAMES
    if no_globals:
        names = ("long_tokens", "global_tokens", "global_types", "long_segment", "long_context")
    specs = [CORE_FIELDS[n] for n in names]
    specs = [dataclasses.replace(s, dtype="int32") if s.name in ("long_tokens", "global_tokens") else s for s in specs]
    return specs + target_fields()
