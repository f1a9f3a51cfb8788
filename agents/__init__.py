"""Scripted agents: Gym-faithful compaction, evidence emitters, ground-truth logs and rollout collection.

Sub-packages, lowest first (no package imports one above it): `media` (synthetic pictures, media
arena), `compaction` (config, presets, history, policies, lineage, views, schedules), `rollout` (the
script, the compaction session, the agent loop over HTTP, records, ground-truth logs), `evidence`
(Gym evidence emitters, one module per flavour) and `collect` (many rollouts on threads, processes or Ray).
"""

if __name__ != "compactsim.agents":  # one module object per file: never a second, top-level copy
    raise ImportError("import compactsim.agents, not agents: compactsim installs one top-level package, `compactsim`")

from compactsim.agents.collect import (
    EXECUTOR_KINDS,
    CollectedRollout,
    HttpServers,
    InProcessServers,
    LocalExecutor,
    ProcessExecutor,
    RayExecutor,
    collect,
    make_executor,
    run_rollout,
    server_script,
)
from compactsim.agents.compaction.config import (
    CompactionScheduleConfig,
    ContextHistoryConfig,
    HistoryPolicyConfig,
    ImageRecencyConfig,
    ReasoningRecencyConfig,
    RecencyHistoryPolicyConfig,
    SummaryPolicyConfig,
    ThinkStripConfig,
    ToolOutputTruncationConfig,
)
from compactsim.agents.evidence import emit_response, emit_result
from compactsim.agents.rollout.ground_truth import ground_truth_log
from compactsim.agents.rollout.loop import RetryPolicy, ScriptedAgent
from compactsim.agents.compaction.presets import PRESETS, policy_preset
from compactsim.agents.rollout.record import RolloutFailure, RolloutRecord
from compactsim.agents.rollout.script import (
    ImageSpec,
    RolloutScript,
    RolloutSpec,
    SamplingConfig,
    ToolCallSpec,
    ToolResult,
    TurnScript,
    scripted_turns,
)
from compactsim.agents.rollout.session import CompactionSession, build_generation_contract

__all__ = [
    "EXECUTOR_KINDS",
    "PRESETS",
    "CollectedRollout",
    "CompactionScheduleConfig",
    "CompactionSession",
    "ContextHistoryConfig",
    "HistoryPolicyConfig",
    "HttpServers",
    "ImageRecencyConfig",
    "ImageSpec",
    "InProcessServers",
    "LocalExecutor",
    "ProcessExecutor",
    "RayExecutor",
    "ReasoningRecencyConfig",
    "RecencyHistoryPolicyConfig",
    "RetryPolicy",
    "RolloutFailure",
    "RolloutRecord",
    "RolloutScript",
    "RolloutSpec",
    "SamplingConfig",
    "ScriptedAgent",
    "SummaryPolicyConfig",
    "ThinkStripConfig",
    "ToolCallSpec",
    "ToolOutputTruncationConfig",
    "ToolResult",
    "TurnScript",
    "build_generation_contract",
    "collect",
    "emit_response",
    "emit_result",
    "ground_truth_log",
    "make_executor",
    "policy_preset",
    "run_rollout",
    "scripted_turns",
    "server_script",
]
