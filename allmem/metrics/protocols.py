"""Evaluation protocols: which items count, which per-item metrics, and how items are grouped.

A protocol is the one switch between the All-Mem paper's scoring (``allmem``, the default) and the scoring of
the baselines' own papers (``mem0``, ``locomo``, ``longmemeval``), so that numbers are only ever compared
under the same definitions. ``configs/protocol/<name>.yaml`` selects one.

Records are the lines of ``predictions.jsonl``; ``validate_record`` turns one into the normalised dict every
protocol reads, with an error naming the place and the field when it is malformed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from allmem.metrics import qa, retrieval

DEFAULT_KS: tuple[int, ...] = (1, 3, 5, 10)
DEFAULT_TABLE_K = 5
VERDICTS = ("yes", "no", "invalid")


class RecordError(ValueError):
    """A prediction record that cannot be scored; the message names where it is and the field."""


# ---------------------------------------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------------------------------------


def _text(raw: Mapping[str, Any], key: str, where: str) -> str:
    """A text field; numbers are cast (six LoCoMo golds are integers), anything else is an error."""
    if key not in raw:
        raise RecordError(f"{where}: missing field {key!r}")
    val = raw[key]
    if isinstance(val, bool) or not isinstance(val, str | int | float):
        raise RecordError(f"{where}: field {key!r} must be a string, got {type(val).__name__}")
    return str(val)


def _ids(raw: Mapping[str, Any], key: str, where: str) -> list[str]:
    if key not in raw:
        raise RecordError(f"{where}: missing field {key!r}")
    val = raw[key]
    if not isinstance(val, list | tuple) or not all(isinstance(i, str) for i in val):
        raise RecordError(f"{where}: field {key!r} must be a list of strings, got {val!r:.80}")
    return list(val)


def validate_record(raw: Any, where: str) -> dict[str, Any]:
    """Check one record and return its normalised form (idempotent, so re-validating is harmless).

    Normalised keys: ``question_id``, ``dialogue_id`` ("" if absent), ``category`` (int 1..5 or None), ``question_type`` (str or None),
    ``prediction``, ``gold``, ``evidence``, ``ranked_source_ids``, ``verdict`` (yes|no|invalid or None).
    """
    if not isinstance(raw, Mapping):
        raise RecordError(f"{where}: expected a JSON object, got {type(raw).__name__}")
    qid = raw.get("question_id")
    if not isinstance(qid, str) or not qid:
        raise RecordError(f"{where}: field 'question_id' must be a non-empty string, got {qid!r}")
    category = raw.get("category")
    if category is not None:
        if isinstance(category, str) and category.isdigit():
            category = int(category)
        if isinstance(category, bool) or not isinstance(category, int) or not 1 <= category <= 5:
            raise RecordError(f"{where}: field 'category' must be a LoCoMo category 1..5, got {category!r}")
    qtype = raw.get("question_type")
    if qtype is not None and not isinstance(qtype, str):
        raise RecordError(f"{where}: field 'question_type' must be a string, got {qtype!r}")
    if category is None and not qtype:
        raise RecordError(f"{where}: needs field 'category' (LoCoMo) or 'question_type' (LongMemEval)")
    verdict = raw.get("verdict")  # already-normalised records
    judge = raw.get("judge")
    if judge is not None:
        if not isinstance(judge, Mapping) or judge.get("verdict") not in VERDICTS:
            raise RecordError(f"{where}: field 'judge' must be {{'verdict': 'yes'|'no'|'invalid', ...}}")
        verdict = judge["verdict"]
    if verdict is not None and verdict not in VERDICTS:
        raise RecordError(f"{where}: field 'verdict' must be one of {VERDICTS}, got {verdict!r}")
    dialogue_id = raw.get("dialogue_id")
    if dialogue_id is not None and not isinstance(dialogue_id, str):
        raise RecordError(f"{where}: field 'dialogue_id' must be a string, got {dialogue_id!r}")
    return {
        "question_id": qid,
        "dialogue_id": dialogue_id or "",
        "category": category,
        "question_type": qtype,
        "prediction": _text(raw, "prediction", where),
        "gold": _text(raw, "gold", where),
        "evidence": _ids(raw, "evidence", where),
        "ranked_source_ids": _ids(raw, "ranked_source_ids", where),
        "verdict": verdict,
    }


# ---------------------------------------------------------------------------------------------------------
# Protocols
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Protocol:
    """The ``allmem`` protocol; the others override the parts they change.

    ``score_item`` returns one value in [0, 1] per metric name, or None where a metric does not apply to the
    item (it is then left out of that metric's mean and its count).
    """

    name: str = "allmem"
    ks: tuple[int, ...] = DEFAULT_KS
    table_k: int = DEFAULT_TABLE_K

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
        return [name for k in self.ks for name in (f"R@{k}", f"N@{k}")]

    def metric_names(self) -> list[str]:
        """Per-item metric names, in display order."""
        return self.qa_names() + self.retrieval_names()

    def table_metrics(self) -> list[str]:
        """Columns of the paper's Table 1 for this protocol (``judge`` is the 4o-J column)."""
        return ["judge", "f1", "bleu1", "rougeL", f"R@{self.table_k}", f"N@{self.table_k}"]

    def score_qa(self, record: Mapping[str, Any]) -> dict[str, float | None]:
        pred, gold = record["prediction"], record["gold"]
        return {"f1": qa.set_f1(pred, gold), "bleu1": qa.bleu1(pred, gold), "rougeL": qa.rouge_l(pred, gold)}

    def score_retrieval(self, record: Mapping[str, Any]) -> dict[str, float | None]:
        return dict(retrieval.allmem_retrieval(record["ranked_source_ids"], record["evidence"], self.ks))

    def score_item(self, record: Mapping[str, Any]) -> dict[str, float | None]:
        return {**self.score_qa(record), **self.score_retrieval(record)}


@dataclass(frozen=True)
class Mem0Protocol(Protocol):
    """Mem0's LoCoMo evaluation: categories 1–4 only; BLEU-1 over NLTK word tokens; no ROUGE-L.

    Retrieval is not part of Mem0's protocol; R@k/N@k are reported with the allmem definition so retrieval
    numbers stay comparable across protocols. Items without a category (LongMemEval) are kept.
    """

    name: str = "mem0"

    def includes(self, record: Mapping[str, Any]) -> bool:
        return record["category"] != 5

    def qa_names(self) -> list[str]:
        return ["f1", "bleu1"]

    def table_metrics(self) -> list[str]:
        return ["judge", "f1", "bleu1", f"R@{self.table_k}", f"N@{self.table_k}"]

    def score_qa(self, record: Mapping[str, Any]) -> dict[str, float | None]:
        pred, gold = record["prediction"], record["gold"]
        return {"f1": qa.set_f1(pred, gold), "bleu1": qa.mem0_bleu1(pred, gold)}


@dataclass(frozen=True)
class LocomoProtocol(Protocol):
    """The official LoCoMo scorer (one answer score, ``f1``, with per-category rules); LoCoMo items only.

    Retrieval, which the official scorer measures only as context recall, uses the allmem R@k/N@k.
    """

    name: str = "locomo"

    def qa_names(self) -> list[str]:
        return ["f1"]

    def table_metrics(self) -> list[str]:
        return ["f1", f"R@{self.table_k}", f"N@{self.table_k}"]

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

    name: str = "longmemeval"

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
        return dict(retrieval.longmemeval_retrieval(record["ranked_source_ids"], record["evidence"], self.ks))


PROTOCOLS: dict[str, type[Protocol]] = {
    "allmem": Protocol,
    "mem0": Mem0Protocol,
    "locomo": LocomoProtocol,
    "longmemeval": LongMemEvalProtocol,
}


def get_protocol(name: str, ks: Sequence[int] = DEFAULT_KS, table_k: int = DEFAULT_TABLE_K) -> Protocol:
    """Build a protocol by name (also the ``_target_`` of ``configs/protocol/*.yaml``)."""
    if name not in PROTOCOLS:
        raise ValueError(f"unknown protocol {name!r}; choose one of {sorted(PROTOCOLS)}")
    ks_t = tuple(int(k) for k in ks)
    if not ks_t or any(k < 1 for k in ks_t):
        raise ValueError(f"protocol ks must be positive integers, got {list(ks)!r}")
    if int(table_k) not in ks_t:
        raise ValueError(f"protocol table_k={table_k} must be one of ks={list(ks_t)}")
    return PROTOCOLS[name](name=name, ks=ks_t, table_k=int(table_k))
