"""The error gym-check raises when a Gym revision cannot be set up or probed (exit 2)."""

from __future__ import annotations

from typing import Literal

from compactsim.harness.core.errors import CompactsimError

SetupStep = Literal["spec", "download", "interpreter", "venv", "install", "import", "checker"]


class GymSetupError(CompactsimError):
    """A revision could not be fetched, installed, imported or probed; `.step` says where."""

    def __init__(self, step: SetupStep, detail: str) -> None:
        self.step: SetupStep = step
        self.detail = detail
        super().__init__(f"gym setup failed at {step}: {detail}")

    def __reduce__(self):
        return (GymSetupError, (self.step, self.detail))


__all__ = ["GymSetupError", "SetupStep"]
