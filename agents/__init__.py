"""Scripted agents: Gym-faithful compaction, evidence emitters, ground-truth logs and rollout collection.

Sub-packages, lowest first (no package imports one above it): `media` (synthetic pictures, media
arena), `compaction` (config, presets, history, policies, lineage, views, schedules), `rollout` (the
script, the compaction session, the agent loop over HTTP, records, ground-truth logs), `evidence`
(Gym evidence emitters, one module per flavour) and `collect` (many rollouts on threads or Ray).
"""

from agents.collect import (
    CollectedRollout,
    HttpServers,
    InProcessServers,
    LocalExecutor,
    RayExecutor,
    collect,
    make_executor,
    run_rollout,
    server_script,
)
from agents.compaction.config import (
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
from agents.evidence import emit_response, emit_result
from agents.rollout.ground_truth import ground_truth_log
from agents.rollout.loop import RetryPolicy, ScriptedAgent
from agents.compaction.presets import PRESETS, policy_preset
from agents.rollout.record import RolloutFailure, RolloutRecord
from agents.rollout.script import (
    ImageSpec,
    RolloutScript,
    RolloutSpec,
    SamplingConfig,
    ToolCallSpec,
    ToolResult,
    TurnScript,
    scripted_turns,
)
from agents.rollout.session import CompactionSession, build_generation_contract

__all__ = [
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
