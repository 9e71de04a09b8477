"""The five baselines against a real OpenAI-compatible endpoint (the local stub), then replayed from the cache.

With ``llm=openai`` each system must send its own prompts (its templates appear in ``calls.jsonl``, with the
phase the template declares) and apply the replies with the same code as offline; the same command with
``llm=replay`` must make zero requests and reproduce every prediction.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from allmem import files
from allmem.llm.prompts import load_template
from tests.llm_stub import StubLLM
from tests.runkit import compose_and_run

REPO = Path(__file__).resolve().parents[1]
KEY = "sk-baselines-stub-0000"

TEMPLATES = {
    "mem0": {"mem0_extract", "mem0_update"},
    "amem": {"amem_analyze", "amem_evolve", "amem_query"},
    "lightmem": {"lightmem_extract", "lightmem_update"},
    "hipporag": {"hipporag_ner", "hipporag_triples", "hipporag_filter"},
    "memgpt": {"memgpt_pressure", "memgpt_summarize", "memgpt_search"},
}
EXTRA = {  # small windows and thresholds so every prompt of the tiny dialogues is exercised
    "memgpt": ["method.context_window=2250", "method.system_tokens=2000"],
    "lightmem": ["method.short_term_tokens=40", "method.update_threshold=0.5"],
}


class BaselineStub(StubLLM):
    """Plausible replies in each baseline's JSON shape, read off the prompt; other prompts as the stub does."""

    def reply(self, prompt: str) -> str:  # noqa: C901 - one branch per template
        if '{"facts": [' in prompt:
            users = re.findall(r"^user: [^:]+: (.*)$", prompt, re.M)
            return json.dumps({"facts": users[:1]})
        if '{"memory": [{"id": "0"' in prompt:
            facts = json.loads(prompt.split("New facts:\n", 1)[1].split("\n\n", 1)[0])
            return json.dumps({"memory": [{"id": "n", "text": f, "event": "ADD"} for f in facts]})
        if '"keywords": ["..."], "context"' in prompt:
            words = re.findall(r"[A-Za-z]{5,}", prompt.split("Analyse this note:", 1)[1])[:3]
            return json.dumps({"keywords": words, "context": "stub context", "tags": ["a", "b", "c"]})
        if '"should_evolve": true' in prompt:
            return json.dumps({"should_evolve": True, "actions": ["strengthen"], "suggested_connections": [0],
                               "tags_to_update": ["linked"], "new_context_neighborhood": [],
                               "new_tags_neighborhood": []})  # fmt: skip
        if '{"keywords": "keyword1' in prompt:
            return json.dumps({"keywords": prompt.split("Question: ", 1)[1].split("\n", 1)[0]})
        if '{"data": [{"source_id"' in prompt:
            lines = re.findall(r"\] (\d+)\.([^:]+): (.*)$", prompt, re.M)
            return json.dumps({"data": [{"source_id": int(k), "fact": f"{s}: {t}"} for k, s, t in lines]})
        if '{"action": "update"' in prompt:
            return json.dumps({"action": "ignore"})
        if '{"triples"' in prompt:
            ents = json.loads(prompt.split("Named entities: ", 1)[1].split("\n", 1)[0])["named_entities"]
            return json.dumps(
                {"triples": [[a, "appears with", b] for a, b in zip(ents, ents[1:], strict=False)]}
            )
        if '{"named_entities": ["..."' in prompt:
            passage = prompt.split("Passage:\n", 1)[1].split("\n", 1)[0]
            return json.dumps({"named_entities": sorted(set(re.findall(r"\b[A-Z][a-z]+\b", passage)))})
        if '{"fact": [["subject"' in prompt:
            return json.dumps(
                {"fact": json.loads(prompt.split("Candidate facts: ", 1)[1].split("\n", 1)[0])["fact"]}
            )
        if "System alert: the conversation history is close" in prompt:
            ids = re.findall(r"^\(([^)]+)\)", prompt, re.M)
            calls = [
                {"name": "archival_memory_insert", "arguments": {"content": "stub fact", "sources": ids[:1]}}
            ]
            return json.dumps({"calls": calls})
        if "Output only the\nsummary" in prompt or "Output only the summary" in prompt:
            return "The stub summary of earlier messages."
        if "Plan the memory searches" in prompt:
            q = prompt.split("Question: ", 1)[1].split("\n", 1)[0]
            return json.dumps({"calls": [{"name": "archival_memory_search", "arguments": {"query": q, "page": 0}},
                                         {"name": "conversation_search", "arguments": {"query": "the", "page": 0}}]})  # fmt: skip
        return super().reply(prompt)


@pytest.mark.slow
@pytest.mark.parametrize("method", sorted(TEMPLATES))
def test_online_prompts_then_replay_makes_no_request(
    method: str, tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ALLMEM_STUB_KEY", KEY)
    stub = BaselineStub().start()
    try:
        common = [
            f"method={method}", f"dataset.path={REPO / 'tests' / 'fixtures' / 'locomo_tiny.json'}",
            f"embedder.cache_dir={cache_dir / 'embeddings'}",
            "run.progress=false", "run.judge=false", *EXTRA.get(method, []),
        ]  # fmt: skip
        online = compose_and_run(tmp_path / "online", *common, "llm=openai", f"llm.base_url={stub.base_url}",
                                 "llm.api_key_env=ALLMEM_STUB_KEY", "llm.rpm=null", "llm.tpm=null", debug=False,
                                 cache=tmp_path / "cache")  # fmt: skip
        calls = [json.loads(x) for x in (online / files.CALLS).read_text().splitlines()]
        used = {c["template"] for c in calls}
        assert TEMPLATES[method] <= used, f"{method} never sent {TEMPLATES[method] - used}"
        for c in calls:
            if c["template"] in TEMPLATES[method]:
                assert c["phase"] == load_template(c["template"]).phase and c["ok"], c
        stats = files.read_jsonl(online / files.SYSTEM_STATS)
        assert not any(k.startswith("failed_") for s in stats for k in s), stats  # every reply was applied
        n_requests = stub.count
        assert n_requests == len(calls)

        replay = compose_and_run(
            tmp_path / "replay", *common, "llm=replay", debug=False, cache=tmp_path / "cache"
        )
        assert stub.count == n_requests  # nothing was sent

        def strip(rs: list[dict]) -> list[dict]:
            """Predictions without what a replay changes by design: latencies and the answer's cached flag."""
            out = [{k: v for k, v in r.items() if k != "latency_ms"} for r in rs]
            for r in out:
                r["answer"] = {k: v for k, v in (r.get("answer") or {}).items() if k != "cached"}
            return out

        assert strip(files.read_jsonl(replay / files.PREDICTIONS)) == strip(
            files.read_jsonl(online / files.PREDICTIONS)
        )
        replayed = [json.loads(x) for x in (replay / files.CALLS).read_text().splitlines()]
        assert len(replayed) == len(calls) and all(c["cached"] for c in replayed)
    finally:
        stub.stop()
