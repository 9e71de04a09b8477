"""Refit the extractive reader's constants on LoCoMo's fit conversations, and print them to paste.

Fits ``SENTENCE_WEIGHTS`` and ``SPAN_WEIGHTS`` (``allmem/reader/spans.py``) and ``multi_spans``, ``when_bonus`` and
``yes_no_answer`` (``configs/generator/extractive.yaml``, the defaults of ``ExtractiveGenerator``) on BM25 contexts
packed at the budget. Only the conversations of ``fit_dialogues`` in ``configs/dataset/locomo.yaml``
(``benchmarks.fit_split``) are used; the printed figures are fit-split figures, and the held-out conversations
are never read into any choice.

    .venv/bin/python scripts/fit_extractive.py [--data PATH] [--budget 2048]
"""

from __future__ import annotations

import argparse
import os

import numpy as np

YES_NO_CHOICES = ("Yes", "No", "Likely yes", "Likely no")


def contexts(data: str | None, budget: int, only: tuple[str, ...]) -> list[tuple[str, object, object]]:
    """(dialogue id, Question, AnswerRequest) for the questions of dialogues ``only``, with BM25 contexts."""
    from allmem.budget import pack
    from allmem.paths import resolve_data_path
    from allmem.types import AnswerRequest
    from baselines.bm25_okapi import BM25Okapi as BM25  # the contexts the constants were fitted with
    from benchmarks.locomo import load_locomo

    system = BM25(k=50)
    out = []
    for dialogue in load_locomo(resolve_data_path("locomo", data)):
        if dialogue.id not in only:
            continue
        system.reset(dialogue.id)
        for turn in dialogue.turns():
            system.ingest(turn)
        for q in dialogue.questions:
            packed = pack(system.retrieve(q.text, q.date).units, budget)
            req = AnswerRequest(
                q.id, q.text, q.category, date=q.date, context=packed.units, context_text=packed.text
            )
            out.append((dialogue.id, q, req))
    return out


def coordinate_search(
    objective, w: np.ndarray, fixed: int, grid: tuple[float, ...], rounds: int = 3
) -> np.ndarray:
    """Greedy coordinate ascent of ``objective(w)`` over a grid; weight ``fixed`` stays 1 (it sets the scale)."""
    best = objective(w)
    for _ in range(rounds):
        improved = False
        for i in range(len(w)):
            if i == fixed:
                continue
            for value in grid:
                trial = w.copy()
                trial[i] = value
                score = objective(trial)
                if score > best + 1e-9:
                    best, w, improved = score, trial, True
        if not improved:
            break
    return w


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    torch.set_num_threads(1)
    from allmem.defaults import group_node
    from allmem.embed import Embedder
    from allmem.metrics.qa import set_f1
    from allmem.reader import spans
    from allmem.reader.extractive import ExtractiveGenerator
    from benchmarks import fit_split

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=None, help="LoCoMo file (default: the usual data locations)")
    ap.add_argument("--budget", type=int, default=2048)
    args = ap.parse_args()

    emb = Embedder()
    gen = ExtractiveGenerator(
        embedder=emb, **group_node("generator", "extractive")
    )  # the fitted values being re-fitted
    items, yes_no, when = [], [], []
    fit_ids = fit_split("locomo")
    for did, q, req in contexts(args.data, args.budget, fit_ids):
        if did not in fit_ids or q.category == 5:  # fit split only; two-option questions never reach spans
            continue
        mode = gen.mode(req)
        if mode == "yes_no":
            yes_no.append(q.gold)
        if mode == "when" and req.context:
            when.append((q, gen.candidates(req)))
        if mode != "span" or not req.context:
            continue
        units, sents, _ = gen.candidates(req)
        unit_cos = emb.encode([u.text for u in units]) @ emb.encode_one(q.text)
        feats = spans.sentence_features(q.text, sents, units, unit_cos)
        gold_terms = spans.content_terms(q.gold)
        if not gold_terms:
            continue
        oracle = np.array([len(gold_terms & spans.content_terms(s.text)) / len(gold_terms) for s in sents])
        items.append((q, sents, feats, oracle))

    # 1. sentence weights: maximise the share of the gold's content words found in the top-scored sentence
    def sentence_objective(w: np.ndarray) -> float:
        return float(np.mean([oracle[int(np.argmax(feats @ w))] for _q, _s, feats, oracle in items]))

    grid = (-1.0, -0.5, -0.3, -0.2, -0.1, -0.05, 0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0)
    start = np.zeros(len(spans.SENTENCE_FEATURES))
    start[0] = 1.0
    sent_w = coordinate_search(sentence_objective, start, 0, grid)

    # 2. span weights: least squares on the F1 of every window of the top sentences
    tables = []
    for q, sents, feats, _oracle in items:
        texts, _owners, x = spans.span_table(q.text, sents, feats @ sent_w)
        tables.append((q, sents, feats @ sent_w, x, np.array([set_f1(t, q.gold) for t in texts])))
    x_all = np.vstack([t[3] for t in tables])
    y_all = np.concatenate([t[4] for t in tables])
    pooled, *_ = np.linalg.lstsq(x_all, y_all, rcond=None)
    # within-question fit: centre features and targets per question, so only the ranking inside a question counts
    xc = np.vstack([t[3] - t[3].mean(axis=0) for t in tables if len(t[4])])
    yc = np.concatenate([t[4] - t[4].mean() for t in tables if len(t[4])])
    within, *_ = np.linalg.lstsq(xc, yc, rcond=None)

    def span_f1(w: np.ndarray) -> float:
        return float(np.mean([t[4][int(np.argmax(t[3] @ w))] if len(t[4]) else 0.0 for t in tables]))

    span_w = max((pooled, within), key=span_f1)
    print(f"span fit F1: pooled {100 * span_f1(pooled):.1f}, within-question {100 * span_f1(within):.1f}")

    # 3. how many spans to join for multi-hop questions; the yes/no reply
    def category_f1(category: int, n_spans: int) -> float:
        sel = [t for t in tables if t[0].category == category]
        return float(np.mean([set_f1(spans.best_spans(q.text, s, sc, n_spans, weights=span_w), q.gold)
                              for q, s, sc, _x, _y in sel]))  # fmt: skip

    multi = max((1, 2, 3), key=lambda n: category_f1(1, n))

    def when_f1(bonus: float) -> float:
        gen.when_bonus = bonus
        return float(
            np.mean([set_f1(gen._when(units, sents, scores), q.gold) for q, (units, sents, scores) in when])
        )

    bonus = max((0.0, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5), key=when_f1)
    choice = max(YES_NO_CHOICES, key=lambda a: float(np.mean([set_f1(a, g) for g in yes_no])))

    print("SENTENCE_WEIGHTS = np.array([" + ", ".join(f"{v:g}" for v in sent_w) + "])")
    print("SPAN_WEIGHTS = np.array([" + ", ".join(f"{v:.4f}" for v in span_w) + "])")
    print(
        f"multi_spans: {multi}   yes_no_answer: {choice!r} (from {len(yes_no)} questions)   when_bonus: {bonus}"
    )
    print(f"fit: when-questions F1 {100 * when_f1(bonus):.1f} ({len(when)} questions)")
    print(f"fit: gold content-word recall of the top sentence {100 * sentence_objective(sent_w):.1f}")
    for cat in (1, 3, 4):
        print(f"fit: category {cat} span F1 {100 * category_f1(cat, multi if cat == 1 else 1):.1f}")


if __name__ == "__main__":
    main()
