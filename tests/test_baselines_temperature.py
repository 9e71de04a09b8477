"""Each method's upstream sampling temperature reaches its requests, and is part of the cache key."""

from __future__ import annotations

import dataclasses

import pytest
from omegaconf import OmegaConf

from allmem.defaults import CONFIG_DIR
from allmem.llm.prompts import build_request
from allmem.systems import Resources
from baselines.amem import AMem
from baselines.mem0 import Mem0
from tests.baselines_support import TableEmbedder, feed, scripted, sessions


@pytest.mark.parametrize(("cls", "name", "expected"), [(Mem0, "mem0", 0.1), (AMem, "amem", 0.7)])
def test_config_temperature_reaches_every_request(cls, name, expected) -> None:
    temperature = OmegaConf.load(CONFIG_DIR / "method" / f"{name}.yaml").temperature
    assert temperature == expected  # the upstream value the config states
    llm = scripted({})  # every template answered by its offline role; the backend records each request
    system = cls(temperature=temperature, resources=Resources(embedder=TableEmbedder(), llm=llm))
    feed(
        system, sessions([("D1:1", "Ana", "I adopted a dog named Biscuit."), ("D1:2", "Ben", "I love dogs.")])
    )
    system.retrieve("Who adopted a dog?")
    sent = list(llm.backend.seen)
    assert sent and {r.temperature for r in sent} == {expected}
    _, params = llm.params_for(sent[0])
    assert params["temperature"] == expected


def test_no_temperature_keeps_the_clients_and_the_cache_key() -> None:
    llm = scripted({})
    plain = build_request("amem_query", {"question": "q"})
    assert llm.params_for(plain)[1]["temperature"] == 0.0
    assert "temperature" in llm.params_for(plain)[1]  # the key's params hold it, as before this change
    hot = dataclasses.replace(build_request("amem_query", {"question": "q"}), temperature=0.7)
    assert llm.params_for(hot)[1]["temperature"] == 0.7
