"""Validate a NeMo-Gym revision before a pin bump: isolated venv, real-model checks, drift, live runs."""

from compactsim.harness.gym_check.errors import GymSetupError
from compactsim.harness.gym_check.live import LiveCall, LiveScript, compare_payloads, scenarios
from compactsim.harness.gym_check.report import GymCheckReport, format_report
from compactsim.harness.gym_check.run import (
    EXIT_DRIFT,
    EXIT_OK,
    EXIT_SETUP,
    GymCheckOptions,
    load_payloads,
    run_gym_check,
    write_report,
)
from compactsim.harness.gym_check.summary import gym_summary_record

__all__ = [
    "EXIT_DRIFT",
    "EXIT_OK",
    "EXIT_SETUP",
    "GymCheckOptions",
    "GymCheckReport",
    "GymSetupError",
    "LiveCall",
    "LiveScript",
    "compare_payloads",
    "format_report",
    "gym_summary_record",
    "load_payloads",
    "run_gym_check",
    "scenarios",
    "write_report",
]
