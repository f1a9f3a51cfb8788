"""A GRPO training run end to end: mock policy server, scripted agents, one optimizer step per logical batch.

    compactsim train pr-validation-image-compaction-k2 --steps 20 --seed 0 --out runs/k2
    compactsim train pr-validation-no-compaction --steps 20 --seed 0 --out runs/flat --dtype float32
    compactsim train pr-validation-image-compaction-k2 --steps 20 --out runs/k2-async --async

Each step: the scripted agents run one logical batch of rollouts against the mock model server
in policy mode (the tiny MoE policy samples with the current weights); the backend plans,
materializes and trains (`compactsim.harness.pipeline.Backend`); the new weights go back to the server
with ``POST /weights`` (its `policy_version` becomes the trainer's). In async mode a replay
buffer of prompt groups sits in between (`compactsim.harness.pipeline.replay_buffer`): groups are generated
ahead with older weights, up to ``max_trajectory_age_steps``, and mixed-age batches train with
the importance-sampling correction on. Everything is a pure function of the seed: rollout
specs, server answers, weights, rows, metrics and artifact bytes.

Output directory::

    config.json              resolved run settings and trainer config
    metrics.jsonl            one line per step: batch, loss and trainer metrics (no timings)
    timings.jsonl            one line per step: timing/* seconds (generation, materialize, train, push)
    artifacts/step-NNNN.npz  the step's rows, masks, advantages, routes, logprobs (compactsim.harness.core.artifacts)
    artifacts/step-NNNN.json its metadata: row ids, spans, image history, logical records, metrics, versions
    rollouts/step-NNNN.jsonl the step's Gym /run results and agents' ground-truth logs (save_rollouts)
    train_summary.json       steps, versions, optimizer/scheduler counts, worst token_mult_prob_error
    wandb/                   only with wandb=True (offline mode)

Reference runs (`REFERENCE_RUNS`) are catalogue scenarios: `pr-validation-no-compaction` and
`pr-validation-image-compaction-k2`, 20 optimizer steps each, multimodal (synthetic screenshots
after every tool call), two prompt groups of two rollouts per step, rewards 1 and 0 in every
group. `resolve_recipe` turns any plain training scenario of the catalogue into a `RunRecipe`.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from compactsim.harness.core import metrics as M
from compactsim.mock_servers.serving import OpenServers, open_mock_servers
from compactsim.harness.core.artifacts import StepArtifact, encode_step_artifact, meta_to_json
from compactsim.harness.core.contract import with_trainer_policy_version
from compactsim.harness.core.errors import CompactsimError, ConfigError
from compactsim.harness.core.raised import exception_text
from compactsim.harness.core.seeds import check_seed, derive_int
from compactsim.harness.outputs import stops_the_run
from compactsim.harness.pipeline.backend import Backend, ReferenceBackend
from compactsim.harness.pipeline.replay_buffer import BufferedGroup, ReplayBuffer, ReplaySample
from compactsim.harness.pipeline.train_config import TrainerConfig, parse_trainer_config, validate_physical_trace_training_config
from compactsim.harness.pipeline.trainer import StepResult, TrainState, init_train_state

HOST = "127.0.0.1"
Device = Literal["cpu", "cuda", "auto"]
DType = Literal["float32", "float64", "bfloat16"]
#: |token_mult_prob_error − 1| allowed per step when generation and training share weights.
LOGPROB_TOLERANCE: dict[str, float] = {"float64": 1e-9, "float32": 1e-5, "bfloat16": 5e-2}

_STRICT = ConfigDict(extra="forbid", frozen=True)


class RunRecipe(BaseModel):
    """What one training run's logical batches look like (a named reference run or a scenario's training part)."""

    model_config = _STRICT

    description: str = ""
    #: Agents' compaction preset (`compactsim.agents.policy_preset`): "identity", "recency-images-k2", ...
    compaction: str = "identity"
    #: Model calls per rollout: `turns - 1` tool calls, each answered with screenshots, then an answer.
    turns: int = Field(4, ge=1)
    images_per_observation: int = Field(1, ge=0)
    flavour: Literal["gym-0.7.0-transport", "gym-0.7.0-full", "gym-pr2870", "osworld", "none"] = "gym-0.7.0-transport"
    num_prompts_per_step: int = Field(2, ge=1)
    num_generations_per_prompt: int = Field(2, ge=1)
    #: Reward of the rollout at index i of its group: `reward_pattern[i % len]`.
    reward_pattern: tuple[float, ...] = Field((1.0, 0.0), min_length=1)
    steps: int = Field(20, ge=1)
    #: `TrainerConfig` overrides (nested mappings), applied over the run's defaults.
    trainer: dict[str, Any] = Field(default_factory=dict)


#: The feature's own validation runs, reproduced on CPU (issue 7); their recipes live in the catalogue.
REFERENCE_RUNS: tuple[str, ...] = ("pr-validation-no-compaction", "pr-validation-image-compaction-k2")


def resolve_recipe(name: str) -> RunRecipe:
    """The training recipe of a catalogue scenario; `ConfigError` when it is unknown or not trainable."""
    from compactsim.scenarios.catalogue import default_catalogue

    catalogue = default_catalogue()
    if name not in catalogue.names:
        raise ConfigError(
            "invalid_argument",
            f"unknown training scenario {name!r}; reference runs: {list(REFERENCE_RUNS)} "
            "(`compactsim scenarios list` shows the catalogue)",
        )
    return RunRecipe.model_validate(catalogue.get(name).training_recipe())


class TrainRunConfig(BaseModel):
    """Everything one training run depends on (besides the backend)."""

    model_config = _STRICT

    scenario: str
    recipe: RunRecipe
    seed: int = Field(0, ge=0, lt=2**63)
    #: Optimizer steps; None: the recipe's.
    steps: int | None = Field(None, ge=1)
    device: Device = "cpu"
    dtype: DType = "float64"
    async_mode: bool = False
    #: Async: groups generated ahead at version 0 beyond the first step's (0 <= n <= age × groups
    #: per step). None: half the steady lead, so consecutive steps train on mixed-age batches.
    async_prefetch_groups: int | None = Field(None, ge=0)
    #: Where the mock servers live: in this process (no port) or on 127.0.0.1 (a real port).
    server: Literal["inprocess", "http"] = "inprocess"
    #: Threads running rollouts concurrently (results never depend on it).
    workers: int = Field(1, ge=1)
    #: torch intra-op threads (fixed for determinism).
    num_threads: int = Field(1, ge=1)
    save_rollouts: bool = True
    wandb: bool = False
    #: `TrainerConfig` overrides applied last (over the recipe's).
    trainer_overrides: dict[str, Any] = Field(default_factory=dict)

    @property
    def num_steps(self) -> int:
        return self.steps if self.steps is not None else self.recipe.steps


@dataclass(frozen=True, slots=True)
class StepRecord:
    """What the run reports after each step (for progress display)."""

    step: int
    metrics: Mapping[str, float | int]
    timings: Mapping[str, float]
    num_rows: int
    policy_version: int


@dataclass(frozen=True, slots=True)
class TrainRunSummary:
    """The run's outcome: deterministic fields plus total wall time."""

    scenario: str
    seed: int
    steps: int
    device: str
    dtype: str
    async_mode: bool
    optimizer_steps: int
    scheduler_steps: int
    final_policy_version: int
    max_token_mult_prob_error_dev: float
    tolerance: float
    total_rows: int
    total_tokens: int
    out: str | None
    seconds: float

    def to_json(self) -> dict[str, Any]:
        """The deterministic part (what `train_summary.json` holds)."""
        return {
            "scenario": self.scenario, "seed": self.seed, "steps": self.steps, "device": self.device,
            "dtype": self.dtype, "async_mode": self.async_mode, "optimizer_steps": self.optimizer_steps,
            "scheduler_steps": self.scheduler_steps, "final_policy_version": self.final_policy_version,
            "max_token_mult_prob_error_dev": self.max_token_mult_prob_error_dev, "tolerance": self.tolerance,
            "total_rows": self.total_rows, "total_tokens": self.total_tokens,
        }


# ---------------------------------------------------------------------------------------------
# configuration


def resolve_device(device: Device) -> str:
    """`auto` → cuda when available, else cpu; `cuda` without a GPU is a `ConfigError`."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("invalid_argument", "--device cuda: no CUDA device is available (use cpu or auto)")
    return device


def trainer_config(run: TrainRunConfig) -> TrainerConfig:
    """The run's `TrainerConfig`: defaults from the recipe and flags, then recipe and run overrides, validated."""
    r = run.recipe
    values: dict[str, Any] = {
        "grpo": {
            "num_prompts_per_step": r.num_prompts_per_step,
            "num_generations_per_prompt": r.num_generations_per_prompt,
            "max_num_steps": run.num_steps,
            "seed": run.seed,
            "async_grpo": {"enabled": run.async_mode, "max_trajectory_age_steps": 1},
        },
        # async GRPO needs the importance-sampling correction (NeMo asserts it; validation enforces it)
        "loss_fn": {"use_importance_sampling_correction": run.async_mode},
        "policy": {
            "train_global_batch_size": r.num_prompts_per_step * r.num_generations_per_prompt,
            "precision": run.dtype,
            "logprob_dtype": "float64" if run.dtype == "float64" else "float32",
            "router_replay_enabled": True,
        },
    }
    merged = _deep_merge(_deep_merge(values, r.trainer), run.trainer_overrides)
    return validate_physical_trace_training_config(parse_trainer_config(merged))


def _deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), Mapping) else v
    return out


def _prefetch_groups(run: TrainRunConfig, cfg: TrainerConfig) -> int:
    """Groups generated ahead at the first step in async mode; checked against the age limit."""
    lead = cfg.grpo.async_grpo.max_trajectory_age_steps
    per_step = cfg.grpo.num_prompts_per_step
    n = run.async_prefetch_groups if run.async_prefetch_groups is not None else (lead * per_step + 1) // 2
    if n > lead * per_step:
        raise ConfigError(
            "invalid_config",
            f"async_prefetch_groups={n} exceeds max_trajectory_age_steps × num_prompts_per_step = {lead} × {per_step}; "
            "groups generated that far ahead would be too old to train on",
        )
    return n


# ---------------------------------------------------------------------------------------------
# rollouts


def group_specs(recipe: RunRecipe, seed: int, group: int) -> list[Any]:
    """The `RolloutSpec`s of prompt group number `group` of a run (a pure function of its arguments)."""
    from compactsim.agents import ImageSpec, RolloutScript, RolloutSpec, ToolCallSpec, ToolResult, TurnScript, policy_preset

    task = group % recipe.num_prompts_per_step
    turns: list[Any] = []
    for t in range(1, recipe.turns):
        x = derive_int(seed, "train_run.click", group=group, turn=t) % 100
        images = tuple(ImageSpec(key=f"screen-{t}-{j}") for j in range(recipe.images_per_observation))
        turns.append(TurnScript(
            reasoning=f"look {t}",
            tool_calls=(ToolCallSpec(name=("click", "scroll", "type_text")[(t - 1) % 3], arguments={"x": x}),),
            tool_results=(ToolResult(output=f"ok {x}", images=images, caption=f"screen {t}" if images else None),),
        ))
    turns.append(TurnScript(reasoning="done", text="Settings open."))
    script = RolloutScript(task=f"Open the settings app (task {task}).", turns=tuple(turns))
    history = policy_preset(recipe.compaction)
    return [
        RolloutSpec(
            rollout_id=f"group{group:04d}-rollout{i}",
            group_id=f"group{group:04d}",
            task_id=f"task-{task}",
            rollout_index=i,
            attempt_index=0,
            seed=derive_int(seed, "train_run.rollout", group=group, index=i),
            script=script,
            context_history=history,
            flavour=recipe.flavour,
        )
        for i in range(recipe.num_generations_per_prompt)
    ]


@contextmanager
def open_servers(run: TrainRunConfig, cfg: TrainerConfig, total_groups: int) -> Iterator[OpenServers]:
    """The mock model server (policy mode, the run's seed) and reward server, with one client each."""
    from compactsim.agents import server_script
    from compactsim.mock_servers.model_server import ServerSettings
    from compactsim.mock_servers.reward_server import RewardSettings

    specs = [s for g in range(total_groups) for s in group_specs(run.recipe, run.seed, g)]
    model_settings = ServerSettings.model_validate({
        "mode": "policy",
        "seed": run.seed,
        "script": server_script(specs),
        # the generator computes in float64 for a float64 run and in float32 otherwise (it has no bf16)
        "policy": {"dtype": "float64" if cfg.policy.precision == "float64" else "float32"},
    })
    reward_settings = RewardSettings.model_validate({"rule": {"kind": "pattern", "pattern": list(run.recipe.reward_pattern)}})
    with open_mock_servers(model_settings.model_dump(mode="json"), reward_settings.model_dump(mode="json"),
                           run.server) as servers:
        yield servers


def collect_groups(
    clients: OpenServers, run: TrainRunConfig, groups: Sequence[int], *, generation_version: int
) -> list[Any]:
    """Run every rollout of prompt groups `groups` (in order); each must complete.

    Each `/run` result is labelled ``trainer_policy_version`` = `generation_version`, the version the
    trainer last synced to the generation server (its own bookkeeping: Gym's items carry no version).

    A failed rollout here is a harness problem (the servers run no faults), not a finding.
    """
    from compactsim.agents import LocalExecutor, collect

    specs = [s for g in groups for s in group_specs(run.recipe, run.seed, g)]
    collected = collect(specs, clients, executor=LocalExecutor(run.workers))
    failed = [c for c in collected if c.status != "completed"]
    if failed:
        f = failed[0].failure or {}
        raise ConfigError("training_failed", f"rollout {failed[0].rollout_id!r} failed: {f.get('kind')}: {f.get('detail')}")
    for c in collected:
        with_trainer_policy_version(c.result, generation_version)
    return collected


def _push_weights(client: Any, state: TrainState) -> int:
    """`POST /weights` with the trainer's weights; the server's new version must be the trainer's."""
    resp = client.post("/weights", content=state.policy.to_bytes(), headers={"content-type": "application/octet-stream"})
    if resp.status_code != 200:
        raise ConfigError("training_failed", f"POST /weights answered {resp.status_code}: {resp.text[:300]}")
    version = int(resp.json()["policy_version"])
    if version != state.version:
        raise ConfigError("training_failed", f"server policy_version is {version} after the push; the trainer's weights are version {state.version}")
    return version


def _server_weights_digest(client: Any) -> str:
    resp = client.get("/weights")
    resp.raise_for_status()
    return str(resp.json()["weights_digest"])


# ---------------------------------------------------------------------------------------------
# the run


def run_training(
    run: TrainRunConfig,
    out: Path | None,
    *,
    backend: Backend | None = None,
    on_step: Callable[[StepRecord], None] | None = None,
) -> TrainRunSummary:
    """Train `run.num_steps` optimizer steps; write metrics and artifacts under `out` (None: write nothing)."""
    from compactsim.harness.core.policy import configure_determinism

    started = time.perf_counter()
    backend = backend or ReferenceBackend()
    cfg = trainer_config(run)
    prefetch = _prefetch_groups(run, cfg) if run.async_mode else 0
    configure_determinism(run.num_threads)
    device = resolve_device(run.device)
    state = init_train_state(cfg, device=device)
    per_step = cfg.grpo.num_prompts_per_step
    lead = cfg.grpo.async_grpo.max_trajectory_age_steps
    total_groups = run.num_steps * per_step + (lead * per_step if run.async_mode else 0)
    writer = _RunWriter(out, run, cfg, backend) if out is not None else None
    wandb_run = _WandbLogger(out, run, cfg) if run.wandb else None
    summary_rows = summary_tokens = 0
    worst = 0.0
    try:
        with open_servers(run, cfg, total_groups) as clients:
            _sync_initial_weights(clients.model, state, cfg)
            # the version the trainer last synced to the generation server (its own bookkeeping); every
            # `/run` result is labelled with it when collected, since Gym's items carry no version
            generation_version = state.version
            buffer = ReplayBuffer()
            pending: dict[str, Any] = {}  # async: group key → its collected rollouts, until trained
            next_group = 0
            for step in range(run.num_steps):
                t0 = time.perf_counter()
                # ---- generation: one logical batch (sync), or top up the replay buffer and sample (async)
                sample: ReplaySample | None = None
                if run.async_mode:
                    budget = per_step + (prefetch if step == 0 else 0)
                    targets = buffer.collection_targets(state.version, max_age_steps=lead, groups_per_step=per_step, budget=budget)
                    groups = list(range(next_group, next_group + len(targets)))
                    next_group += len(targets)
                    collected = collect_groups(clients, run, groups, generation_version=generation_version)
                    size = run.recipe.num_generations_per_prompt
                    members = {f"group{g:04d}": collected[k * size:(k + 1) * size] for k, g in enumerate(groups)}
                    buffer = buffer.add(*(
                        BufferedGroup(key, tuple(c.result for c in members[key]),
                                      generation_version=generation_version, target_version=t)
                        for key, t in zip(members, targets, strict=True)
                    ))
                    pending.update(members)
                    sample, buffer = buffer.sample(per_step, state.version, lead)
                    if sample is None:
                        raise ConfigError("training_failed", f"replay buffer stalled at version {state.version}: fewer than {per_step} groups")
                    results = sample.results
                    collected_all = [c for g in sample.groups for c in pending.pop(g.group_key)]
                else:
                    groups = list(range(step * per_step, (step + 1) * per_step))
                    collected_all = collect_groups(clients, run, groups, generation_version=generation_version)
                    results = [c.result for c in collected_all]
                t1 = time.perf_counter()
                # ---- plan, logical advantages, materialize (the backend under test)
                with _backend_stage(step, "plan"):
                    plans = [backend.plan(r) for r in results]
                with _backend_stage(step, "materialize"):
                    batch = backend.materialize(plans, cfg)
                if sample is not None:
                    _check_group_versions(batch, sample)
                t2 = time.perf_counter()
                # ---- one optimizer step
                with _backend_stage(step, "train_step"):
                    result = backend.train_step(state, batch, cfg)
                t3 = time.perf_counter()
                # ---- new weights to the generator
                try:
                    generation_version = _push_weights(clients.model, state)
                except ConfigError as exc:
                    raise ConfigError("training_failed", f"step {step}: {exc.detail}") from None
                t4 = time.perf_counter()

                result = _with_replay(result, sample)
                timings = {M.TIMING_GENERATION: t1 - t0, M.TIMING_MATERIALIZE: t2 - t1, M.TIMING_TRAIN: t3 - t2,
                           M.TIMING_WEIGHT_PUSH: t4 - t3, M.TIMING_STEP: t4 - t0}
                summary_rows += int(result.metrics[M.NUM_PHYSICAL_ROWS])
                summary_tokens += int(result.metrics[M.TOTAL_NUM_TOKENS])
                worst = max(worst, abs(float(result.metrics[M.TOKEN_MULT_PROB_ERROR]) - 1.0))
                if writer is not None:
                    writer.step(step, result, timings, collected_all if run.save_rollouts else None)
                if wandb_run is not None:
                    wandb_run.log(step, {**result.metrics, **timings})
                if on_step is not None:
                    on_step(StepRecord(step, result.metrics, timings, batch.num_real_rows, state.version))
    finally:
        if wandb_run is not None:
            wandb_run.finish()
    summary = TrainRunSummary(
        scenario=run.scenario, seed=run.seed, steps=run.num_steps, device=device, dtype=run.dtype,
        async_mode=run.async_mode, optimizer_steps=state.optimizer_steps, scheduler_steps=state.scheduler_steps,
        final_policy_version=state.version, max_token_mult_prob_error_dev=worst, tolerance=LOGPROB_TOLERANCE[run.dtype],
        total_rows=summary_rows, total_tokens=summary_tokens, out=None if out is None else str(out),
        seconds=time.perf_counter() - started,
    )
    if writer is not None:
        writer.finish(summary)
    return summary


@contextmanager
def _backend_stage(step: int, stage: str) -> Iterator[None]:
    """A backend's own exception as a typed error naming the step and the stage (compactsim's own errors pass)."""
    try:
        yield
    except CompactsimError:
        raise
    except BaseException as exc:  # noqa: BLE001 - whatever the backend under test raised (sys.exit and its own too)
        if stops_the_run(exc):
            raise
        raise ConfigError("training_failed", f"step {step}: the backend's {stage} raised {type(exc).__name__}: "
                                             f"{exception_text(exc)}") from exc


def _sync_initial_weights(client: Any, state: TrainState, cfg: TrainerConfig) -> None:
    """Start generation from the trainer's checkpoint.

    Same seed and config give the server the trainer's weights already (float32/float64: the
    digests match and nothing is sent). A bfloat16 trainer's rounded weights differ from the
    server's float32 copy, so they are pushed once and the trainer adopts the server's version.
    """
    import torch

    from compactsim.harness.core.digests import bytes_digest
    from compactsim.harness.core.policy import TinyPolicy

    server_dtype = torch.float64 if cfg.policy.precision == "float64" else torch.float32
    as_served = TinyPolicy.load_bytes(state.policy.to_bytes(), dtype=server_dtype)
    if _server_weights_digest(client) == bytes_digest(as_served.to_bytes()):
        return
    state.version += 1
    _push_weights(client, state)




def _check_group_versions(batch: Any, sample: ReplaySample) -> None:
    """Every row's generation version (from the result's label) is its buffered group's tag."""
    tag = {g.group_key: g.generation_version for g in sample.groups}
    for rec in batch.logical:
        want = tag.get(rec.group_key)
        if want is not None and rec.generation_policy_version != want:
            raise ConfigError(
                "training_failed",
                f"rollout {rec.rollout_id!r} carries generation policy_version {rec.generation_policy_version}; its "
                f"replay-buffer group {rec.group_key!r} was generated at version {want}"
            )


def _with_replay(result: StepResult, sample: ReplaySample | None) -> StepResult:
    """Async: add the sampled groups' ages to the metrics and their versions to the artifact."""
    if sample is None:
        return result
    ages = sample.ages
    extra = {
        M.ASYNC_TRAJECTORY_AGE_MEAN: math.fsum(ages) / len(ages),
        M.ASYNC_TRAJECTORY_AGE_MAX: max(ages),
        M.ASYNC_NUM_EVICTED_GROUPS: len(sample.evicted),
    }
    metrics = {**result.metrics, **extra}
    artifact: StepArtifact = replace(result.artifact, metrics=metrics, replay=sample.to_json())
    return replace(result, metrics=metrics, artifact=artifact)


# ---------------------------------------------------------------------------------------------
# outputs (the only place that writes files)


def _json_line(obj: Mapping[str, Any]) -> str:
    def num(v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
        return v

    return json.dumps({k: num(v) for k, v in obj.items()}, sort_keys=True, allow_nan=False) + "\n"


class _RunWriter:
    """Writes `config.json`, the per-step JSONL files and artifacts, and `train_summary.json`."""

    def __init__(self, out: Path, run: TrainRunConfig, cfg: TrainerConfig, backend: Backend) -> None:
        self.out = out
        (out / "artifacts").mkdir(parents=True, exist_ok=True)
        if run.save_rollouts:
            (out / "rollouts").mkdir(parents=True, exist_ok=True)
        config = {"run": run.model_dump(mode="json"), "trainer": cfg.model_dump(mode="json"),
                  "backend": f"{type(backend).__module__}:{type(backend).__qualname__}"}
        (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        for name in ("metrics.jsonl", "timings.jsonl"):
            (out / name).write_text("", encoding="utf-8")

    def step(self, step: int, result: StepResult, timings: Mapping[str, float], collected: Sequence[Any] | None) -> None:
        npz, meta = encode_step_artifact(result.artifact)
        stem = self.out / "artifacts" / f"step-{step:04d}"
        stem.with_suffix(".npz").write_bytes(npz)
        stem.with_suffix(".json").write_text(meta_to_json(meta), encoding="utf-8")
        with (self.out / "metrics.jsonl").open("a", encoding="utf-8") as fh:
            fh.write(_json_line({"step": step, **result.metrics}))
        with (self.out / "timings.jsonl").open("a", encoding="utf-8") as fh:
            fh.write(_json_line({"step": step, **timings}))
        if collected is not None:
            lines = [json.dumps({"rollout_id": c.rollout_id, "result": c.result, "ground_truth": c.ground_truth},
                                sort_keys=True) + "\n" for c in collected]
            (self.out / "rollouts" / f"step-{step:04d}.jsonl").write_text("".join(lines), encoding="utf-8")

    def finish(self, summary: TrainRunSummary) -> None:
        text = json.dumps(summary.to_json(), indent=2, sort_keys=True) + "\n"
        (self.out / "train_summary.json").write_text(text, encoding="utf-8")


class _WandbLogger:
    """Weights & Biases in offline mode under `<out>/wandb` (never online from here)."""

    def __init__(self, out: Path | None, run: TrainRunConfig, cfg: TrainerConfig) -> None:
        import os

        import wandb

        os.environ.setdefault("WANDB_SILENT", "true")
        directory = out if out is not None else Path.cwd()
        directory.mkdir(parents=True, exist_ok=True)
        self._run = wandb.init(
            project="compactsim", name=f"{run.scenario}-seed{run.seed}", mode="offline", dir=str(directory),
            config={"run": run.model_dump(mode="json"), "trainer": cfg.model_dump(mode="json")},
            reinit="create_new",
        )

    def log(self, step: int, values: Mapping[str, Any]) -> None:
        self._run.log({k: v for k, v in values.items() if isinstance(v, (int, float))}, step=step)

    def finish(self) -> None:
        self._run.finish()


def load_run_config(scenario: str, **settings: Any) -> TrainRunConfig:
    """`TrainRunConfig` for a named scenario and CLI-style settings; every problem as one `ConfigError`."""
    check_seed(settings.get("seed", 0))
    try:
        return TrainRunConfig.model_validate({"scenario": scenario, "recipe": resolve_recipe(scenario), **settings})
    except ValidationError as exc:
        found = tuple(f"{'.'.join(map(str, e['loc']))}={e.get('input')!r}: {e['msg']}" for e in exc.errors())
        raise ConfigError("invalid_config", f"{len(found)} invalid training setting(s)", violations=found) from None


__all__ = [
    "LOGPROB_TOLERANCE",
    "REFERENCE_RUNS",
    "RunRecipe",
    "StepRecord",
    "TrainRunConfig",
    "TrainRunSummary",
    "collect_groups",
    "group_specs",
    "load_run_config",
    "open_servers",
    "resolve_device",
    "resolve_recipe",
    "run_training",
    "trainer_config",
]
