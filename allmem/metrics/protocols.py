"""Evaluation protocols: how questions are asked and judged, which items count, which metrics, how grouped.

A protocol is the one switch between the All-Mem paper's evaluation (``allmem``, the default) and the
evaluations of the baselines' own papers (``mem0``, ``locomo``, ``longmemeval``), so that numbers are only ever
compared under the same definitions. ``configs/protocol/<name>.yaml`` selects one and the runner builds it with
``hydra.utils.instantiate(cfg.protocol)``; the runner, the reader, the judge, ``allmem score`` and the report all
ask that one object: the question framing (``options``), the answer template (``answer_template``), the judge
(``judges``, ``judge_template``, ``parse_verdict``), the ks and the table k, and the scoring.

Records are the lines of ``predictions.jsonl`` (``allmem.types.Prediction``); ``validate_record`` turns one into
the normalised dict every protocol reads, with an error naming the place and the field when it is malformed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from allmem.metrics import qa, retrieval
from allmem.reader import framing
from allmem.types import ASK_MODES, VERDICTS, Prediction, RecordError

__all__ = [
    "PROTOCOLS", "VERDICTS", "Protocol", "RecordError", "as_protocol", "get_protocol", "validate_record",
]  # fmt: skip

# LongMemEval question types with their own judge prompt; every other type uses the default one.
_JUDGE_VARIANT = {
    "temporal-reasoning": "temporal",
    "knowledge-update": "update",
    "single-session-preference": "preference",
}


# ---------------------------------------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------------------------------------


def validate_record(raw: Any, where: str) -> dict[str, Any]:
    """Check one ``predictions.jsonl`` line (``allmem.types.Prediction.from_json``) and return what protocols
    score: ``question_id``, ``dialogue_id`` ("" if absent), ``category`` (1..5 or None), ``question_type``,
    ``question``, ``prediction``, ``gold``, ``evidence``, ``ranked_source_ids``, ``verdict`` (or None).
    Idempotent, so re-validating a normalised record is harmless."""
    return Prediction.from_json(raw, where).scoring_view()


# ---------------------------------------------------------------------------------------------------------
# Protocols
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Protocol:
    """The ``allmem`` protocol; the others override the parts they change.

    ``score_item`` returns one value in [0, 1] per metric name, or None where a metric does not apply to the
    item (it is then left out of that metric's mean and its count).
    """

    name: str
    ks: tuple[int, ...]  # the cut-offs of R@k / N@k; stated once, in configs/config.yaml (protocol.ks)
    table_k: int
    ask: str = "end"  # protocol.ask: end | after_evidence | both (allmem.run.asking)
    option_categories: ClassVar[tuple[int, ...]] = framing.OPTION_CATEGORIES

    # -- asking ------------------------------------------------------------------------------------------

    def options(self, question: Any, seed: int) -> tuple[str, ...]:
        """The two options of a question asked as a choice ("Not mentioned" and the gold, order shuffled with
        ``seed`` and the question id), else ``()``. ``question`` is an ``allmem.types.Question``."""
        if question.category not in self.option_categories:
            return ()
        return framing.two_options(question.id, question.gold, seed)

    def answer_template(self, request: Any) -> str:
        """The answer prompt for an ``AnswerRequest`` (``allmem.reader.framing.answer_template``)."""
        return framing.answer_template(request)

    # -- judging (the 4o-J column) ------------------------------------------------------------------------

    def judges(self, record: Any) -> bool:
        """Whether the judge is asked about this record (only items the protocol scores)."""
        return self.includes(_view(record))

    def judge_variant(self, record: Any) -> str:
        """default | temporal | update | preference | abstention, from the question id, type or category."""
        r = _view(record)
        if "_abs" in str(r.get("question_id", "")):
            return "abstention"
        qtype = r.get("question_type")
        if qtype is not None:
            return _JUDGE_VARIANT.get(str(qtype), "default")
        return "temporal" if r.get("category") == 2 else "default"

    def judge_template(self, record: Any) -> str:
        """LongMemEval-style yes/no prompts with type-specific clauses (PROTOCOL.md, protocol ``allmem``)."""
        return "judge_allmem_" + self.judge_variant(record)

    def parse_verdict(self, reply: Any) -> str:
        """yes | no | invalid for one judge ``ChatResult``: ``[[yes]]`` present → yes; else ``[[no]]`` → no."""
        if reply.error is not None:
            return "invalid"
        low = (reply.text or "").lower()
        if "[[yes]]" in low:
            return "yes"
        if "[[no]]" in low:
            return "no"
        return "invalid"

    # -- scoring -----------------------------------------------------------------------------------------

    def includes(self, record: Mapping[str, Any]) -> bool:
        """Whether the item is scored at all (allmem: every question, adversarial ones included)."""
        return True

    def group_key(self, record: Mapping[str, Any]) -> str:
        """LoCoMo category number as a string, else the LongMemEval question_type."""
        cat = record["category"]
        return str(cat) if cat is not None else str(record["question_type"])

    def qa_names(self) -> list[str]:
        return ["f1", "bleu1", "rougeL"]

    def retrieval_names(self) -> list[str]:
        return [name for k in self.ks for name in (retrieval.recall_key(k), retrieval.ndcg_key(k))]

    def metric_names(self) -> list[str]:
        """Per-item metric names, in display order."""
        return self.qa_names() + self.retrieval_names()

    def table_metrics(self) -> list[str]:
        """Columns of the paper's Table 1 for this protocol (``judge`` is the 4o-J column)."""
        return ["judge", "f1", "bleu1", "rougeL", *self.table_retrieval()]

    def table_retrieval(self) -> list[str]:
        """Recall and nDCG at the table's k: ``["R@5", "N@5"]``."""
        return [retrieval.recall_key(self.table_k), retrieval.ndcg_key(self.table_k)]

    def score_qa(self, record: Mapping[str, Any]) -> dict[str, float | None]:
        pred, gold = record["prediction"], record["gold"]
        return {"f1": qa.set_f1(pred, gold), "bleu1": qa.bleu1(pred, gold), "rougeL": qa.rouge_l(pred, gold)}

    def score_retrieval(self, record: Mapping[str, Any]) -> dict[str, float | None]:
        return dict(retrieval.allmem_retrieval(credited(record), record["evidence"], self.ks))

    def score_item(self, record: Mapping[str, Any]) -> dict[str, float | None]:
        return {**self.score_qa(record), **self.score_retrieval(record)}


@dataclass(frozen=True)
class Mem0Protocol(Protocol):
    """Mem0's LoCoMo evaluation: categories 1–4 only; BLEU-1 over NLTK word tokens; no ROUGE-L.

    Retrieval is not part of Mem0's protocol; R@k/N@k are reported with the allmem definition so retrieval
    numbers stay comparable across protocols. Items without a category (LongMemEval) are kept.
    """

    def includes(self, record: Mapping[str, Any]) -> bool:
        return record.get("category") != 5

    def judge_template(self, record: Any) -> str:
        return "judge_mem0"

    def parse_verdict(self, reply: Any) -> str:
        """Mem0's generous CORRECT/WRONG JSON label (a bare label outside JSON is tolerated)."""
        if reply.error is not None:
            return "invalid"
        label = str(reply.data.get("label", "")) if isinstance(reply.data, Mapping) else ""
        if not label:  # the reply format is the model's to break
            found = set(re.findall(r"\b(CORRECT|WRONG)\b", (reply.text or "").upper()))
            label = found.pop() if len(found) == 1 else ""
        return {"CORRECT": "yes", "WRONG": "no"}.get(label.strip().upper(), "invalid")

    def qa_names(self) -> list[str]:
        return ["f1", "bleu1"]

    def table_metrics(self) -> list[str]:
        return ["judge", "f1", "bleu1", *self.table_retrieval()]

    def score_qa(self, record: Mapping[str, Any]) -> dict[str, float | None]:
        pred, gold = record["prediction"], record["gold"]
        return {"f1": qa.set_f1(pred, gold), "bleu1": qa.mem0_bleu1(pred, gold)}


@dataclass(frozen=True)
class LocomoProtocol(Protocol):
    """The official LoCoMo scorer (one answer score, ``f1``, with per-category rules); LoCoMo items only.

    Retrieval, which the official scorer measures only as context recall, uses the allmem R@k/N@k.
    """

    def qa_names(self) -> list[str]:
        return ["f1"]

    def table_metrics(self) -> list[str]:
        return ["f1", *self.table_retrieval()]

    def score_qa(self, record: Mapping[str, Any]) -> dict[str, float | None]:
        if record["category"] is None:
            raise RecordError(
                f"question {record['question_id']}: protocol 'locomo' needs field 'category' (LoCoMo items only)"
            )
        return {"f1": qa.locomo_score(record["prediction"], record["gold"], record["category"])}


@dataclass(frozen=True)
class LongMemEvalProtocol(Protocol):
    """LongMemEval's official scoring: the judge for answers, recall_any/recall_all/ndcg_any for retrieval.

    Every question counts for the judge; abstention questions (``_abs``) are skipped for retrieval, as in
    the official script, so their retrieval values are None.
    """

    def judge_template(self, record: Any) -> str:
        """LongMemEval's official per-type prompts."""
        return "judge_lme_" + self.judge_variant(record)

    def parse_verdict(self, reply: Any) -> str:
        """Correct iff the reply contains "yes" (the official rule)."""
        if reply.error is not None:
            return "invalid"
        return "yes" if "yes" in (reply.text or "").lower() else "no"

    def qa_names(self) -> list[str]:
        return []

    def retrieval_names(self) -> list[str]:
        return [f"{m}@{k}" for k in self.ks for m in ("recall_any", "recall_all", "ndcg_any")]

    def table_metrics(self) -> list[str]:
        k = self.table_k
        return ["judge", f"recall_any@{k}", f"recall_all@{k}", f"ndcg_any@{k}"]

    def score_qa(self, record: Mapping[str, Any]) -> dict[str, float | None]:
        return {}

    def score_retrieval(self, record: Mapping[str, Any]) -> dict[str, float | None]:
        if retrieval.is_abstention(record["question_id"]):
            return dict.fromkeys(self.retrieval_names())
        return dict(retrieval.longmemeval_retrieval(credited(record), record["evidence"], self.ks))


def credited(record: Mapping[str, Any]) -> list[str]:
    """The ranked ids at the granularity of the record's gold ``evidence``. Ranked ids are turn ids; where the gold
    names sessions (LongMemEval's answer sessions: a record without a LoCoMo ``category`` whose every gold id is a
    session id, ``retrieval.session_of(g) == g``), each ranked turn is credited to its session
    (``retrieval.session_ranking``; a ranked session id of an older record stays). LoCoMo's and the synthetic drift
    corpus's gold names turns: their ranked ids as they are."""
    ranked, gold = record["ranked_source_ids"], record["evidence"]
    sessions = record.get("category") is None and gold and all(retrieval.session_of(g) == g for g in gold)
    return retrieval.session_ranking(ranked) if sessions else list(ranked)


def _view(record: Any) -> Mapping[str, Any]:
    """A record as a mapping: prediction dicts as they are, ``Prediction`` objects as their scoring view."""
    return record if isinstance(record, Mapping) else record.scoring_view()


PROTOCOLS: dict[str, type[Protocol]] = {
    "allmem": Protocol,
    "mem0": Mem0Protocol,
    "locomo": LocomoProtocol,
    "longmemeval": LongMemEvalProtocol,
}


def get_protocol(
    name: str, ks: Sequence[int] | None = None, table_k: int | None = None, ask: str | None = None
) -> Protocol:
    """Build a protocol by name (also the ``_target_`` of ``configs/protocol/*.yaml``). ``ks`` / ``table_k`` left
    out: the values of ``configs/config.yaml`` (``allmem.defaults.cutoffs``), the one place they are stated."""
    if name not in PROTOCOLS:
        raise ValueError(f"unknown protocol {name!r}; choose one of {sorted(PROTOCOLS)}")
    if ks is None or table_k is None:
        from allmem.defaults import cutoffs

        default_ks, default_table_k = cutoffs()
        ks = default_ks if ks is None else ks
        table_k = default_table_k if table_k is None else table_k
    ks_t = tuple(int(k) for k in ks)
    if not ks_t or any(k < 1 for k in ks_t):
        raise ValueError(f"protocol ks must be positive integers, got {list(ks)!r}")
    if int(table_k) not in ks_t:
        raise ValueError(f"protocol table_k={table_k} must be one of ks={list(ks_t)}")
    if ask is not None and ask not in ASK_MODES:
        raise ValueError(f"protocol.ask={ask!r}: choose one of {list(ASK_MODES)}")
    return PROTOCOLS[name](name=name, ks=ks_t, table_k=int(table_k), ask=ask or "end")


def table_names() -> tuple[str, str]:
    """``R@k`` and ``N@k`` at ``protocol.table_k`` of configs/config.yaml (``R@5``, ``N@5``): the names every
    report line, column and figure of the paper's tables uses (``allmem.report.compare.R_K``, ``N_K``)."""
    recall, ndcg = get_protocol("allmem").table_retrieval()
    return recall, ndcg


def as_protocol(protocol: str | Protocol | Any) -> Protocol:
    """A ``Protocol`` from itself, a name (default ks) or a ``protocol`` config node (name, ks, table_k): every
    consumer accepts all three, so an old caller passing a name still works. A node is built by its name
    (``get_protocol``), never by its ``_target_``: a node may come from a run folder on disk, which is data,
    never code (the runner alone instantiates the live config's protocol)."""
    if isinstance(protocol, Protocol):
        return protocol
    if isinstance(protocol, str):
        return get_protocol(protocol)
    if isinstance(protocol, Mapping) or hasattr(protocol, "keys"):
        node = dict(protocol)
        if "name" not in node:
            raise ValueError(f"protocol config has no name: {sorted(map(str, node))}")
        return get_protocol(str(node["name"]), node.get("ks"), node.get("table_k"), node.get("ask"))
    raise TypeError(f"not a protocol: {protocol!r}")
