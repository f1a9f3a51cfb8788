"""Script text that cannot travel is refused where it is written, naming the field (found by fuzzing scenario files).

A lone surrogate (``"\\ud800"`` in YAML or JSON) used to pass the scenario's validation, then
crash the agent's request encoding (`UnicodeEncodeError`) or the server's tokenizer (a 500).
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from compactsim.agents.rollout.script import TurnScript
from compactsim.harness.core.errors import ConfigError
from compactsim.mock_servers.model_server import ServerSettings
from compactsim.scenarios.catalogue import parse_scenarios

CASES = [
    ({"reasoning": "a\ud800"}, "reasoning: holds a lone surrogate U+D800 at index 1"),
    ({"text": "\udfff"}, "text: holds a lone surrogate U+DFFF at index 0"),
    ({"tool_calls": [{"name": "f\ud800"}]}, "tool_calls.0.name\n  Input should be a valid string"),  # pydantic's own check (a constrained str)
    ({"tool_calls": [{"name": "f", "arguments": {"x": "\udc80"}}]}, "tool_calls[0].arguments: holds a lone surrogate U+DC80 at index 6"),
    ({"tool_calls": [{"name": "f"}], "tool_results": [{"output": "ok\udc80"}]}, "tool_results[0].output: holds a lone surrogate U+DC80 at index 2"),
    ({"tool_calls": [{"name": "f"}], "tool_results": [{"caption": "\ud83d"}]}, "tool_results[0].caption: holds a lone surrogate U+D83D at index 0"),
]


@pytest.mark.parametrize(("turn", "message"), CASES, ids=[m.split(":")[0] for _, m in CASES])
def test_a_turn_with_a_lone_surrogate_is_refused_naming_the_field(turn, message):
    with pytest.raises(ValidationError) as info:
        TurnScript.model_validate(turn)
    assert message in str(info.value)


def test_text_with_every_unicode_plane_is_accepted():
    turn = TurnScript.model_validate({"text": "é 中 😀 \u0000", "tool_calls": [{"name": "f", "arguments": {"k": "😀"}}]})
    assert turn.server_step()["text"] == "é 中 😀 \u0000"


def test_a_scenario_file_with_such_text_is_a_config_error_naming_the_turn():
    data = {"scenarios": [{"name": "x", "purpose": "p", "script": {"turns": [{"text": "ok"}, {"text": "a\ud800"}]}}]}
    with pytest.raises(ConfigError) as info:
        parse_scenarios(data, source="f.yaml")
    assert str(info.value).startswith("invalid_config: f.yaml: field $.scenarios[0].script.turns[1]: Value error, "
                                      "text: holds a lone surrogate U+D800 at index 1")


def test_the_model_servers_script_refuses_text_its_tokenizer_cannot_encode():
    """The server's own settings (`serve --settings FILE`): refused at start, not a 500 on the call that needs the step."""
    with pytest.raises(ValidationError) as info:
        ServerSettings.model_validate({"script": {"r1": [{"text": "ok"}, {"tool_calls": [{"name": "f", "arguments": "\ud800"}]}]}})
    (error,) = info.value.errors()
    assert error["loc"] == ("script", "r1", 1)
    assert error["msg"].startswith("Value error, tool_calls[0].arguments: text contains lone surrogate U+D800 at index 0")
    # escaped raw bytes (U+DC80..U+DCFF) are the tokenizer's own: the server's answer carries them
    assert ServerSettings.model_validate({"script": {"r1": [{"text": "\udcff"}]}}).script["r1"][0].text == "\udcff"
