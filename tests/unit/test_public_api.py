"""Each package's public names are declared once, sorted, and resolve."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

def _isort_key(name: str) -> tuple[int, str]:
    """isort-style order (ruff RUF022): CONSTANTS, then Classes, then functions, each alphabetical."""
    kind = 0 if name.isupper() else 1 if name[:1].isupper() else 2
    return kind, name


PACKAGES = ["compactsim", "compactsim.harness", "compactsim.agents", "compactsim.scenarios", "compactsim.harness.audit",
            "compactsim.harness.golden", "compactsim.harness.oracle", "compactsim.harness.pipeline"]


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_sorted_unique_and_every_name_resolves(name):
    module = importlib.import_module(name)
    exported = list(module.__all__)
    assert len(exported) == len(set(exported)), f"{name}.__all__ has duplicates"
    assert exported == sorted(exported, key=_isort_key), f"{name}.__all__ is not sorted (constants, classes, functions)"
    for public in exported:
        assert getattr(module, public) is not None, f"{name}.{public}"


def test_importing_harness_does_not_load_torch():
    code = "import sys, compactsim.harness; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_unknown_harness_attribute_is_an_attribute_error():
    from compactsim import harness

    with pytest.raises(AttributeError, match="module 'compactsim.harness' has no attribute 'nope'"):
        harness.nope  # noqa: B018
