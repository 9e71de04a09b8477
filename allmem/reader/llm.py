"""``LLMGenerator``: the answer role behind the LLM interface, whatever the backend.

With ``llm=openai`` (or ``replay``) it renders the answer prompt for the question's protocol variant
(LoCoMo categories 1-4, LoCoMo category 5 as a two-option question, LongMemEval with the question date as the
current time) and reads ``{"answer": ...}``. With ``llm=offline`` the same request goes through the same wrapper
(ledger, phase ``generate``, token counts of the rendered prompt) and the request's payload
(``OfflineAnswerPayload``) delegates to the extractive reader (``allmem.reader.extractive``), so offline
numbers and LLM numbers come out of one code path.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from allmem.llm.base import ChatRequest
from allmem.llm.prompts import build_request
from allmem.reader import framing
from allmem.types import Answer, AnswerRequest

NO_CONTEXT = "(no memories retrieved)"


@dataclass(frozen=True)
class OfflineAnswerPayload:
    """What the offline answer role needs and the prompt cannot carry: the live request and the generator.

    Its ``offline_reply`` is the offline answer: the extractive generator's answer, as the JSON the prompt asks
    for, so offline numbers and LLM numbers come out of one code path.
    """

    generator: Any
    request: AnswerRequest

    def offline_reply(self, req: ChatRequest) -> str:
        ans = self.generator.answer(self.request)
        return json.dumps({"answer": ans.text, "_offline": dict(ans.extra)}, ensure_ascii=False, default=str)


def answer_prompt(req: AnswerRequest) -> tuple[str, dict[str, Any]]:
    """The template name (the protocol's choice, ``req.template``) and its variables for ``req``."""
    template = req.template or framing.answer_template(req)
    context = req.context_text.strip() or NO_CONTEXT
    if template == "answer_locomo_options":
        if len(req.options) != 2:
            raise ValueError(
                f"AnswerRequest {req.question_id}: options must hold exactly 2 items, got {req.options}"
            )
        return template, {
            "context": context,
            "question": req.question,
            "option_a": req.options[0],
            "option_b": req.options[1],
        }
    if template == "answer_longmemeval":
        current = f"{req.date:%Y/%m/%d (%a) %H:%M}" if req.date is not None else "unknown"
        return template, {"context": context, "question": req.question, "current_date": current}
    return template, {"context": context, "question": req.question}


def match_option(text: str, options: tuple[str, ...]) -> str:
    """Map a reply to one of the two options ("(a)", "b", the option text in any case); else the reply itself."""
    clean = text.strip().strip(".").strip()
    low = clean.lower()
    for opt in options:
        if low == opt.lower():
            return opt
    m = re.fullmatch(r"\(?([ab])\)?(?:[.:)]\s*.*)?", low)
    if m:
        return options[0 if m.group(1) == "a" else 1]
    hits = [opt for opt in options if opt.lower() in low]
    if len(hits) == 1:
        return hits[0]
    marks = set(re.findall(r"\(([ab])\)", low))
    if len(marks) == 1:
        return options[0 if marks.pop() == "a" else 1]
    return clean


class LLMGenerator:
    """Answers an ``AnswerRequest`` through ``llm.chat`` (phase ``generate``).

    ``extractive``: the ``ExtractiveGenerator`` settings (``configs/generator/extractive.yaml``; offline backend only).
    ``max_tokens``: reply cap sent to the model (part of the cache key).
    """

    name = "llm"

    def __init__(
        self,
        llm: Any,
        embedder: Any,
        extractive: dict[str, Any],
        max_tokens: int | None,
    ) -> None:
        if llm is None:
            raise ValueError("LLMGenerator needs llm= (build it with allmem.llm.build_llm(cfg.llm))")
        self.llm = llm
        self.embedder = embedder
        # generator.extractive: configs/generator/extractive.yaml (its _target_ is the class built below)
        self.extractive_kwargs = {k: v for k, v in extractive.items() if k != "_target_"}
        self.max_tokens = max_tokens
        self._extractive: Any = None

    @property
    def concurrent(self) -> bool:
        """Whether ``answer`` may run in several threads at once (``allmem.run.questions``): online it only calls
        the thread-safe LLM client; offline the extractive reader embeds, which is one model at a time."""
        return not self.llm.offline

    def _offline_generator(self) -> Any:
        if self._extractive is None:
            if self.embedder is None:
                raise ValueError(
                    "LLMGenerator with the offline backend needs embedder= (the extractive generator)"
                )
            from allmem.reader.extractive import ExtractiveGenerator

            self._extractive = ExtractiveGenerator(self.embedder, **self.extractive_kwargs)
        return self._extractive

    def answer(self, req: AnswerRequest) -> Answer:
        template, variables = answer_prompt(req)
        offline = self.llm.offline  # the offline backend or a dry run: the extractive reader answers
        payload = OfflineAnswerPayload(self._offline_generator(), req) if offline else None
        res = self.llm.chat(build_request(template, variables, max_tokens=self.max_tokens, payload=payload))
        usage = {
            "tokens_in": res.tokens_in,
            "tokens_out": res.tokens_out,
            "cached": res.cached,
            "prompt_hash": res.prompt_hash,
            "template": template,
            "backend": res.backend,
        }
        extra: dict[str, Any] = {}
        if res.error is not None:
            extra["error"] = res.error
            text = ""
        elif res.parse_error is not None:
            # A prose reply is still an answer: keep it (stripped), and say it was not valid JSON.
            extra["parse_error"] = res.parse_error.kind
            text = res.text.strip()
        else:
            text = str(res.data.get("answer", "")).strip()
            extra.update(res.data.get("_offline") or {})
        if req.options and text:
            text = match_option(text, req.options)
        return Answer(text=text, usage=usage, extra=extra)
