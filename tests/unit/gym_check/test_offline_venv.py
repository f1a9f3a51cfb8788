"""`gym-check --offline` reuses the venv an online check built for the same revision instead of building a new one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compactsim.harness.gym_check import venv as venvs
from compactsim.harness.gym_check.revision import GymSpec, Revision

REVISION = Revision(spec=GymSpec(kind="pin", text="nemo-gym==0.7.0", name="nemo-gym", version="0.7.0"),
                    digest="sha256:" + "ab" * 32, version="0.7.0", wheel=Path("nemo_gym-0.7.0-py3-none-any.whl"),
                    source=None, requirements=("pydantic>=2", "openai==2.44.0"), requires_python=">=3.12")


def _built_online(cache: Path) -> Path:
    """What an online check leaves: the index-built venv under its key, its manifest written last."""
    interpreter, _ = venvs.choose_interpreter(deps_source="index")
    final = cache / "venvs" / venvs.venv_key(REVISION, interpreter, "index")
    (final / "bin").mkdir(parents=True)
    (final / venvs.MANIFEST).write_text(json.dumps({"bytes": 123, "deps_source": "index", "profile": "shim"}))
    return final


def test_offline_reuses_the_venv_an_online_check_built(tmp_path, monkeypatch):
    """It used to key an offline build apart ("host"-linked deps) and fail without the shim's packages installed here,
    warm cache or not."""
    final = _built_online(tmp_path)
    monkeypatch.setattr(venvs, "_run", lambda *a, **k: pytest.fail(f"built a venv: {a}"))
    built = venvs.ensure_venv(REVISION, tmp_path, offline=True)
    assert (built.path, built.deps_source, built.cold, built.bytes) == (final, "index", False, 123)

