"""The `Backend` seam: the reference backend implements it, `load_backend` finds others or says why not."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest

import compactsim.harness.pipeline as pipeline
from compactsim.harness.core.errors import ConfigError
from compactsim.harness.pipeline.backend import Backend, ReferenceBackend, load_backend
from compactsim.harness.pipeline.train_config import TrainerConfig

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


class _NotABackend:
    def plan(self, result):  # no materialize, no train_step
        return None


def test_reference_backend_implements_the_protocol_and_is_exported_by_the_package():
    assert isinstance(ReferenceBackend(), Backend)
    assert pipeline.Backend is Backend
    assert pipeline.ReferenceBackend is ReferenceBackend


def test_reference_backend_plans_and_materializes_the_reference_payload():
    backend = ReferenceBackend()
    payload = json.loads((EXAMPLES / "gym-0.7.0-transport-compacted-3call.json").read_text())
    plan = backend.plan({"response": payload, "reward": 1.0})
    assert [t.turn_ids for t in plan.traces] == [(1, 2), (3,)]
    cfg = TrainerConfig.model_validate({"grpo": {"num_prompts_per_step": 1, "num_generations_per_prompt": 1},
                                        "policy": {"train_global_batch_size": 1}})
    batch = backend.materialize([plan], cfg)
    assert batch.parent_indices.tolist() == [0, 0]


def test_load_backend_instantiates_a_class_named_module_colon_attr():
    backend = load_backend("compactsim.harness.pipeline:ReferenceBackend")
    assert repr(backend) == "ReferenceBackend()"


def test_load_backend_rejects_a_spec_without_a_colon():
    with pytest.raises(ConfigError) as err:
        load_backend("compactsim.harness.pipeline.ReferenceBackend")
    assert err.value.code == "invalid_argument"
    assert "expected 'module:attr'" in err.value.detail


def test_load_backend_rejects_a_spec_that_does_not_import():
    with pytest.raises(ConfigError) as err:
        load_backend("compactsim.harness.pipeline:NoSuchBackend")
    assert "backend='compactsim.harness.pipeline:NoSuchBackend' does not load: AttributeError" in err.value.detail


def test_load_backend_rejects_an_object_without_the_backend_methods():
    with pytest.raises(ConfigError) as err:
        load_backend(f"{__name__}:_NotABackend")
    assert "lacks the Backend method(s) ['materialize', 'train_step']" in err.value.detail


class _InitRaises:
    def __init__(self) -> None:
        raise ValueError("init boom")


@pytest.mark.parametrize(("source", "attr", "says"), [
    ("raise RuntimeError('boom at import')\n", "X", "RuntimeError: boom at import (brokenmod_{}.py:1)"),
    ("import sys\nsys.exit(7)\n", "X", "SystemExit: 7 (brokenmod_{}.py:2)"),
    ("def f(:\n", "X", "SyntaxError: invalid syntax (brokenmod_{}.py:1)"),
    ("class B:\n    def __init__(self, x):\n        pass\n", "B", "TypeError: "),
    ("class B:\n    @property\n    def plan(self):\n        raise KeyError('p')\n    materialize = train_step = print\n",
     "B", "KeyError: 'p' (brokenmod_{}.py:4)"),
])
def test_a_backend_module_that_raises_while_loading_is_a_typed_error_naming_where(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, attr: str, says: str):
    """The user's module may raise anything, SystemExit included: exit 2 with the place, never a traceback."""
    name = f"brokenmod_{abs(hash(source)) % 10**8}"
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError) as err:
        load_backend(f"{name}:{attr}")
    assert err.value.code == "invalid_argument"
    assert f"backend='{name}:{attr}' does not load: " + says.format(name.split("_")[1]) in err.value.detail


def test_a_backend_class_whose_constructor_raises_names_its_own_line():
    with pytest.raises(ConfigError) as err:
        load_backend(f"{__name__}:_InitRaises")
    line = inspect.getsourcelines(_InitRaises.__init__)[1] + 1
    assert err.value.detail.endswith(f"does not load: ValueError: init boom (test_trainer_backend.py:{line})")


def test_load_backend_refuses_a_spec_that_is_not_a_string():
    with pytest.raises(ConfigError, match="backend=123: expected a 'module:attr' string"):
        load_backend(123)  # type: ignore[arg-type]
