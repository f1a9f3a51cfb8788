"""Where gym-check keeps the revision venvs: the env override, the user's cache, a checkout fallback."""

from __future__ import annotations

from pathlib import Path

import pytest

from compactsim.harness.gym_check.venv import CACHE_ENV, default_cache_dir, repo_root


def test_the_env_override_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "mine"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == (tmp_path / "mine").resolve()


def test_the_users_cache_is_shared_by_every_checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == (tmp_path / "xdg" / "compactsim" / "gym").resolve()
    assert (tmp_path / "xdg" / "compactsim" / "gym").is_dir()


def test_an_unusable_user_cache_falls_back_to_the_checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CACHE_ENV, raising=False)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    assert default_cache_dir() == repo_root() / ".gym-cache"
