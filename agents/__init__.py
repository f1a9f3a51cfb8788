"""Scripted agents: Gym-faithful compaction, evidence emitters, ground-truth logs and rollout collection."""

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
from agents.compaction_config import (
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
from agents.emitters import emit_response, emit_result
from agents.ground_truth import ground_truth_log
from agents.loop import RetryPolicy, ScriptedAgent
from agents.presets import PRESETS, policy_preset
from agents.record import RolloutFailure, RolloutRecord
from agents.script import (
    ImageSpec,
    RolloutScript,
    RolloutSpec,
    SamplingConfig,
    ToolCallSpec,
    ToolResult,
    TurnScript,
    scripted_turns,
)
from agents.session import CompactionSession, build_generation_contract

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
