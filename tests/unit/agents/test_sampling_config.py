"""Sampling parameters a script sends are refused where they are written when the model server would refuse them."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from compactsim.agents.rollout.script import SamplingConfig


@pytest.mark.parametrize(("field", "value"), [
    ("temperature", math.nan), ("temperature", math.inf), ("temperature", -0.5), ("temperature", 2.5),
    ("top_p", math.nan), ("top_p", 0.0), ("top_p", 1.5), ("top_p", -math.inf),
])
def test_out_of_range_or_non_finite_sampling_values_are_refused_naming_the_field(field: str, value: float) -> None:
    with pytest.raises(ValidationError) as info:
        SamplingConfig(**{field: value})
    assert [e["loc"] for e in info.value.errors()] == [(field,)]


def test_the_edges_the_server_accepts_are_accepted_and_sent() -> None:
    body = SamplingConfig(temperature=0.0, top_p=1.0).body()
    assert (body["temperature"], body["top_p"]) == (0.0, 1.0)
    assert SamplingConfig(temperature=2.0).body()["temperature"] == 2.0
    assert "top_p" not in SamplingConfig().body()
