"""What the harness measures of the training state it owns, before and after a backend's step.

The harness builds the weights, optimizer and scheduler it hands a backend, so it can read them
itself instead of trusting the backend's account of the step (DESIGN §6a): a float64 copy of
every parameter, the learning rate the optimizer will use, the optimizer's own per-parameter step
counters, its moments (Adam's ``exp_avg`` and ``exp_avg_sq``) and the scheduler's ``last_epoch``.
The difference between two snapshots is what one ``train_step`` really did, including the
gradient the optimizer applied: Adam's moment update ``m ← β1·m + (1 − β1)·g`` gives it back as
``g = (m_after − β1·m_before) / (1 − β1)`` (`MeasuredStep.applied_gradient`). Reading is
duck-typed (``policy`` with ``named_parameters`` and ``config``, a torch optimizer, a torch LR
scheduler), so no pipeline type is imported here.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass(frozen=True, slots=True, eq=False)
class TrainingSnapshot:
    """The training state at one instant, as plain tensors and numbers."""

    #: Parameter name → float64 CPU copy.
    weights: Mapping[str, torch.Tensor] = field(repr=False)
    #: The policy's shape (`compactsim.harness.core.policy.PolicyConfig`), so the same model can be rebuilt.
    model_config: Any
    #: Learning rate of every optimizer parameter group (what the next `optimizer.step()` uses).
    lrs: tuple[float, ...]
    #: The optimizer's own update counters: smallest and largest per-parameter ``step`` (0 before any).
    optimizer_step_min: int
    optimizer_step_max: int
    #: ``scheduler.last_epoch``: LR-scheduler increments so far.
    scheduler_epoch: int
    #: Parameter name → float64 copy of the optimizer's first moment (zeros before its first update), or
    #: None when the optimizer keeps no Adam-style ``exp_avg`` or some parameter is not in it.
    first_moments: Mapping[str, torch.Tensor] | None = field(default=None, repr=False)
    #: The same for the second moment (``exp_avg_sq``).
    second_moments: Mapping[str, torch.Tensor] | None = field(default=None, repr=False)
    #: Why `first_moments` is None (which group or parameter is not kept as torch's Adam/AdamW keeps it); None
    #: when they were read.
    moments_problem: str | None = None
    #: Parameter name → (β1, β2 of its parameter group, machine epsilon of the dtype its moments are stored in).
    moment_settings: Mapping[str, tuple[float, float, float]] = field(default_factory=dict, repr=False)
    #: Parameter name → (Adam's ε, decoupled weight decay λ: AdamW's, or 0 for Adam's L2 decay, which is
    #: inside the gradient) of its parameter group; None unless every group is a plain Adam/AdamW update
    #: (no amsgrad), the only rule whose learning rate `MeasuredStep.applied_lr` can read back.
    update_rule: Mapping[str, tuple[float, float]] | None = field(default=None, repr=False)
    #: Why `update_rule` is None although the moments were read (amsgrad set, ...); None otherwise.
    update_rule_problem: str | None = None
    #: Parameter name → the optimizer's own ``step`` for it (0 before its first update). torch keeps one
    #: per parameter and skips a parameter whose ``.grad`` is None; empty when not read.
    steps_by_param: Mapping[str, int] = field(default_factory=dict, repr=False)


def _step_count(state: Mapping[str, Any]) -> int:
    value = state.get("step", 0)
    return int(value.item()) if isinstance(value, torch.Tensor) else int(value)


#: Attributes under which wrappers hold the model they wrap, each prefixing its parameter names with
#: ``<attr>.``: DDP, FSDP(1) and DataParallel (``module``), and ``torch.compile``'s `OptimizedModule`
#: (``_orig_mod``).
WRAPPER_ATTRIBUTES: tuple[str, ...] = ("module", "_orig_mod")


def _unwrapped(policy: Any) -> Any:
    """The model inside DDP/FSDP-style or ``torch.compile`` wrappers, whose parameter names carry the
    wrapper's prefix (``module.``, ``_orig_mod.``).

    A trainer may wrap the policy it was handed; the weights are still the policy's own and are
    named and rebuilt as the policy names them.
    """
    for _ in range(8):  # wrappers nest (FSDP around DDP, compile around DDP); a cycle cannot loop forever
        names = [name for name, _ in policy.named_parameters()]
        for attr in WRAPPER_ATTRIBUTES:
            inner = getattr(policy, attr, None)
            if inner is not None and inner is not policy and hasattr(inner, "named_parameters") and names \
                    and all(name.startswith(f"{attr}.") for name in names):
                policy = inner
                break
        else:
            return policy
    return policy


_Moments = tuple[dict[str, torch.Tensor] | None, dict[str, torch.Tensor] | None, dict[str, tuple[float, float, float]],
                 str | None]


def _moments(named: list[tuple[str, torch.Tensor]], optimizer: Any) -> _Moments:
    """Each parameter's Adam moments (float64 copies) with (β1, β2, storage epsilon), or Nones and why they are unreadable."""
    betas_of: dict[int, tuple[float, float]] = {}
    for k, group in enumerate(optimizer.param_groups):
        betas = group.get("betas")
        if not isinstance(betas, tuple | list) or len(betas) != 2:
            return None, None, {}, f"param group {k} of {type(optimizer).__name__} has no (β1, β2) `betas`"
        for p in group["params"]:
            betas_of[id(p)] = (float(betas[0]), float(betas[1]))
    first: dict[str, torch.Tensor] = {}
    second: dict[str, torch.Tensor] = {}
    settings: dict[str, tuple[float, float, float]] = {}
    for name, p in named:
        state = optimizer.state.get(p, {})
        m, v = state.get("exp_avg"), state.get("exp_avg_sq")
        if id(p) not in betas_of:
            return None, None, {}, f"parameter {name!r} is in no param group of the optimizer"
        if (m is None) != (v is None) or (m is None and _step_count(state) > 0):
            # updated, but not by an Adam-style rule (or not kept under torch's keys): nothing to read the gradient from
            return None, None, {}, (f"{type(optimizer).__name__}'s state for parameter {name!r} has the keys "
                                    f"{sorted(map(str, state))}, not AdamW's `exp_avg` and `exp_avg_sq`")
        if m is None:
            first[name] = second[name] = torch.zeros(p.shape, dtype=torch.float64)
        else:
            first[name] = m.detach().to(device="cpu", dtype=torch.float64).clone()
            second[name] = v.detach().to(device="cpu", dtype=torch.float64).clone()
        stored = p if m is None else m
        settings[name] = (*betas_of[id(p)], float(torch.finfo(stored.dtype).eps))
    return first, second, settings, None


def _real(x: Any) -> float | None:
    """A hyperparameter as a float: any real number (a numpy scalar from a config included) or a one-element tensor."""
    if isinstance(x, torch.Tensor):
        return float(x.item()) if x.numel() == 1 else None
    return float(x) if isinstance(x, numbers.Real) else None


def _update_rule(named: list[tuple[str, torch.Tensor]], optimizer: Any) -> tuple[dict[str, tuple[float, float]] | None, str | None]:
    """Each parameter's (Adam ε, decoupled weight decay) from its group, or None and why for any other update rule."""
    rule_of: dict[int, tuple[float, float]] = {}
    for k, group in enumerate(optimizer.param_groups):
        eps, decay = group.get("eps"), group.get("weight_decay", 0.0)
        decoupled = group.get("decoupled_weight_decay", isinstance(optimizer, torch.optim.AdamW))
        # `maximize` only negates the gradient on its way into the moments (a trainer that minimises -loss with it is
        # AdamW on loss); the moments then show a wrong sign as a wrong gradient (`train.gradient`). amsgrad changes
        # the update itself.
        amsgrad = bool(group.get("amsgrad"))
        eps_value, decay_value = _real(eps), _real(decay)
        if amsgrad or eps_value is None or decay_value is None:
            why = "sets amsgrad" if amsgrad else f"has eps={eps!r}, weight_decay={decay!r}"
            return None, f"param group {k} of {type(optimizer).__name__} {why}: not AdamW's plain update"
        for p in group["params"]:
            rule_of[id(p)] = (eps_value, decay_value if decoupled else 0.0)
    missing = next((name for name, p in named if id(p) not in rule_of), None)
    if missing is not None:
        return None, f"parameter {missing!r} is in no param group of the optimizer"
    return {name: rule_of[id(p)] for name, p in named}, None


#: Wrapper modules a trainer may put around blocks *inside* the policy (torch.distributed's activation checkpointing,
#: FSDP1 per block, `torch.compile` per block): their name components are dropped, as `state_dict()` drops them.
INNER_WRAPPER_COMPONENTS: frozenset[str] = frozenset({"_checkpoint_wrapped_module", "_fsdp_wrapped_module",
                                                      "_orig_mod"})


def _named_parameters(policy: Any) -> list[tuple[str, Any]]:
    """The policy's parameters under the names its own modules give them, wrapper components dropped at any depth
    (``blocks.0._checkpoint_wrapped_module.w_in`` is ``blocks.0.w_in``); the raw names if dropping them collides."""
    named = list(policy.named_parameters())
    plain = [(".".join(c for c in name.split(".") if c not in INNER_WRAPPER_COMPONENTS), p) for name, p in named]
    return plain if len({name for name, _ in plain}) == len(plain) else named


def _scheduler_epoch(scheduler: Any) -> int:
    """How many times the scheduler stepped: its `last_epoch`, or, for a `ChainedScheduler` (which has none), the
    count its members share (each steps once per `step()`)."""
    epoch = getattr(scheduler, "last_epoch", None)
    if epoch is None:
        members = {int(m.last_epoch) for m in getattr(scheduler, "_schedulers", ()) if hasattr(m, "last_epoch")}
        if len(members) != 1:
            raise TypeError(f"the scheduler in state ({type(scheduler).__name__}) has no last_epoch and no members "
                            "that agree on one: its step count cannot be read")
        epoch = members.pop()
    return int(epoch)


def snapshot_training_state(policy: Any, optimizer: Any, scheduler: Any) -> TrainingSnapshot:
    """Read the weights, learning rates, counters and moments of a live training state (copies; nothing is changed)."""
    policy = _unwrapped(policy)
    named = _named_parameters(policy)
    weights = {name: p.detach().to(device="cpu", dtype=torch.float64).clone() for name, p in named}
    steps = [_step_count(optimizer.state.get(p, {})) for group in optimizer.param_groups for p in group["params"]]
    steps_by_param = {name: _step_count(optimizer.state.get(p, {})) for name, p in named}
    first, second, moment_settings, moments_problem = _moments(named, optimizer)
    rule, rule_problem = _update_rule(named, optimizer) if first is not None else (None, None)
    return TrainingSnapshot(
        weights=weights,
        model_config=getattr(policy, "config", None),
        lrs=tuple(float(group["lr"]) for group in optimizer.param_groups),
        optimizer_step_min=min(steps, default=0),
        optimizer_step_max=max(steps, default=0),
        scheduler_epoch=_scheduler_epoch(scheduler),
        first_moments=first,
        second_moments=second,
        moments_problem=moments_problem,
        moment_settings=moment_settings,
        update_rule=rule,
        update_rule_problem=rule_problem,
        steps_by_param=steps_by_param,
    )


@dataclass(frozen=True, slots=True)
class AppliedRate:
    """The learning rate one Adam/AdamW update used, read back from the state it changed (`MeasuredStep.applied_lr`)."""

    lr: float
    #: The rate is known to ±`bound`: the weights' and moments' rounding, carried through the fit.
    bound: float


@dataclass(frozen=True, slots=True, eq=False)
class MeasuredStep:
    """What one backend step did to the training state, measured by the harness (never reported by it)."""

    before: TrainingSnapshot
    after: TrainingSnapshot
    #: `applied_gradient` and `_adam_directions`, computed once: several checks of a step read each (pure in the snapshots)
    _memo: dict[str, Any] = field(default_factory=dict, init=False, repr=False)

    def _once(self, key: str, compute: Callable[[], Any]) -> Any:
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    @property
    def optimizer_steps(self) -> int:
        """Optimizer updates the step took: the largest per-parameter counter increase."""
        return self.after.optimizer_step_max - self.before.optimizer_step_max

    def _advances(self) -> dict[str, int] | None:
        """Parameter name → how far its own counter moved, or None when the counters were not read per parameter."""
        a, b = self.after.steps_by_param, self.before.steps_by_param
        if not a or set(a) != set(b):
            return None
        return {name: a[name] - b[name] for name in a}

    @property
    def skipped_parameters(self) -> frozenset[str]:
        """Parameters a single update left out: their counter stayed while the others advanced by one.

        torch's optimizers skip a parameter whose ``.grad`` is None, which a plain loop leaves on a
        parameter no row reached; whether that was allowed is the oracle's to say (`unreached`).
        """
        advances = self._advances()
        if advances is None or self.optimizer_steps != 1:
            return frozenset()
        return frozenset(name for name, k in advances.items() if k == 0)

    @property
    def optimizer_steps_uneven(self) -> bool:
        """Some parameters were updated more often than others, besides those one update skipped (`skipped_parameters`)."""
        advances = self._advances()
        if advances is None:
            return (self.after.optimizer_step_max - self.before.optimizer_step_max
                    != self.after.optimizer_step_min - self.before.optimizer_step_min)
        kinds = set(advances.values()) - ({0} if self.optimizer_steps == 1 else set())
        return len(kinds) > 1

    @property
    def scheduler_increments(self) -> int:
        return self.after.scheduler_epoch - self.before.scheduler_epoch

    @property
    def lr(self) -> float:
        """The learning rate the step's update used (read before it)."""
        return self.before.lrs[0] if self.before.lrs else float("nan")

    def applied_gradient(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]] | None:
        """See `_read_applied_gradient` (read once per step; callers must not change the tensors)."""
        return self._once("applied_gradient", self._read_applied_gradient)

    def _read_applied_gradient(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]] | None:
        """Parameter name → (gradient the optimizer applied, elementwise bound on its reading error), or None.

        Adam's first-moment update is ``m ← β1·m + (1 − β1)·g`` (torch computes it as
        ``m.lerp_(g, 1 − β1)``), so one update gives back the gradient it used:
        ``g = (m_after − β1·m_before) / (1 − β1)`` — after clipping, before weight decay (decoupled in
        AdamW), whatever the trainer reported. Rounding of the stored moments bounds the reading error by
        ``4·eps·(|m_after| + β1·|m_before| + |g|) / (1 − β1)`` with eps that of the moments' dtype.
        A parameter the update skipped (`skipped_parameters`) applied none: a zero gradient, read
        exactly, provided its moment did not move. None unless the step took exactly one update and
        both snapshots hold Adam moments for the same parameters.
        """
        a, b = self.after.first_moments, self.before.first_moments
        if a is None or b is None or set(a) != set(b) or self.optimizer_steps != 1 or self.optimizer_steps_uneven:
            return None
        skipped = self.skipped_parameters
        out: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        for name, m_after in a.items():
            beta1, _, eps = self.after.moment_settings[name]
            m_before = b[name]
            if m_before.shape != m_after.shape or not 0.0 <= beta1 < 1.0:
                return None
            if name in skipped:
                if not torch.equal(m_after, m_before):
                    return None  # a moment moved without its counter: no single update explains it
                out[name] = (torch.zeros_like(m_after), torch.zeros_like(m_after))
                continue
            g = (m_after - beta1 * m_before) / (1.0 - beta1)
            err = 4.0 * eps * (m_after.abs() + beta1 * m_before.abs() + g.abs()) / (1.0 - beta1)
            out[name] = (g, err)
        return out

    def applied_lr(self) -> AppliedRate | None:
        """The learning rate the update used, measured from the weights and moments; None when unreadable.

        One Adam/AdamW step moves every weight along a direction the harness can rebuild from the state
        the step left (the update `torch.optim.AdamW` documents, step ``t``, bias corrections
        ``bc1 = 1 − β1^t``, ``bc2 = 1 − β2^t``)::

            p_after − p_before = −lr · u,   u = λ·p_before + (m_after / bc1) / (sqrt(v_after) / sqrt(bc2) + ε)

        so the least-squares fit ``lr = −Σ Δ·u / Σ u²`` gives the rate back, whatever the param groups
        said before or after the step (a scheduler stepped before the optimizer changes the rate in
        between). Rounding: each weight is off by at most ``eps·(|p_after| + |p_before|)`` plus
        ``4·eps·lr·|Adam term|`` (eps of the moments' dtype, taken generously), which bounds the fitted
        rate by ``Σ e·|u| / Σ u²``. None unless the step took one update of a plain Adam/AdamW rule
        (`TrainingSnapshot.update_rule`), some weight was meant to move, and one rate explains every
        weight to within that rounding (``‖residual‖ ≤ 2‖e‖``): an update of another shape (L2 decay
        applied by hand, a frozen parameter, a wrong ε) has no single rate, and `train.update` names it.
        ``t`` is each parameter's own counter; parameters the update skipped are left out of the fit
        (`train.update` checks that they did not move).
        """
        directions = self._adam_directions()
        if directions is None:
            return None
        parts: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, float]] = []  # (Δ, u, |Adam term|, |a|+|b|, eps)
        dot = norm2 = 0.0
        for name, (u, adam) in directions.items():
            eps = self.after.moment_settings[name][2]
            before, after = self.before.weights[name], self.after.weights[name]
            delta = after - before
            dot += float((delta * u).sum())
            norm2 += float((u * u).sum())
            parts.append((delta, u, adam.abs(), after.abs() + before.abs(), eps))
        if not norm2 > 0.0 or not math.isfinite(norm2) or not math.isfinite(dot):
            return None
        lr = -dot / norm2
        residual2 = error2 = spread = 0.0
        for delta, u, adam, magnitude, eps in parts:
            e = eps * magnitude + 4.0 * eps * abs(lr) * adam
            residual2 += float(((delta + lr * u) ** 2).sum())
            error2 += float((e * e).sum())
            spread += float((e * u.abs()).sum())
        if math.sqrt(residual2) > 2.0 * math.sqrt(error2):
            return None
        return AppliedRate(lr=lr, bound=spread / norm2)

    def _adam_directions(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]] | None:
        """See `_read_adam_directions` (read once per step)."""
        return self._once("adam_directions", self._read_adam_directions)

    def _read_adam_directions(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]] | None:
        """Per updated parameter, (u, Adam term) of the update its own state dictates: ``p_after = p_before − lr·u``,
        ``u = λ·p_before + Adam term``, ``Adam term = (m_after/bc1) / (sqrt(v_after)/sqrt(bc2) + ε)`` (see
        `applied_lr`). None unless the step took one update of a plain Adam/AdamW rule whose state was read."""
        rule, m_after, v_after = self.after.update_rule, self.after.first_moments, self.after.second_moments
        names = set(self.after.weights)
        if rule is None or m_after is None or v_after is None or self.optimizer_steps != 1 or self.optimizer_steps_uneven \
                or not names or set(rule) != names or set(m_after) != names or set(v_after) != names \
                or set(self.before.weights) != names:
            return None
        out: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        for name in sorted(names - self.skipped_parameters):
            t = self.after.steps_by_param.get(name, self.after.optimizer_step_max)
            beta1, beta2, _ = self.after.moment_settings[name]
            adam_eps, decay = rule[name]
            before = self.before.weights[name]
            if before.shape != self.after.weights[name].shape or not (0.0 <= beta1 < 1.0 and 0.0 <= beta2 < 1.0):
                return None
            adam = (m_after[name] / (1.0 - beta1**t)) / (v_after[name].sqrt() / math.sqrt(1.0 - beta2**t) + adam_eps)
            out[name] = (decay * before + adam, adam)
        return out

    def own_moment_update(self, lr: float, decays: Mapping[str, float]) -> dict[str, torch.Tensor] | None:
        """Per updated parameter, the weights one AdamW step at rate `lr` and decoupled decay ``decays[name]`` gives
        from the weights before it and the moments the optimizer itself holds after it
        (``p_before − lr·(λ·p_before + Adam term)``, `_adam_directions`); None when unreadable.

        Where the gradient was zero, the moments are all the step has to go on: a trainer whose moments
        drifted from the oracle's by rounding in earlier steps must still move each such entry as its own
        moments say, with its momentum. The decay is the caller's (the oracle's), not the param group's: a
        trainer may apply it outside the optimizer (``p.mul_(1 − lr·λ)`` before a ``weight_decay=0`` step)."""
        directions = self._adam_directions()
        if directions is None:
            return None
        return {name: self.before.weights[name] - lr * (decays.get(name, 0.0) * self.before.weights[name] + adam)
                for name, (_, adam) in directions.items()}

    def moments_agree(self) -> bool | None:
        """Whether AdamW's two moments moved by one update with the same gradient, or None when unreadable
        (`moments_disagreement` says where they do not)."""
        readable, disagreement = self._compare_moments()
        return None if not readable else disagreement is None

    def moments_disagreement(self) -> MomentsDisagreement | None:
        """The first parameter (by name) whose second moment did not move with the gradient its first moment applied.

        ``v ← β2·v + (1 − β2)·g²`` (β2 its param group's) gives ``g²`` back as the first moment gives
        ``g``. A state reset or replaced during the step leaves them disagreeing (``g²`` from v falls far
        below zero, say), as does a second moment advanced with another β2 than the group holds, while
        a wrong but consistently applied gradient keeps them in agreement. Bounds are the stored
        moments' rounding, taken generously. None when they agree or cannot be read.
        """
        return self._compare_moments()[1]

    def _compare_moments(self) -> tuple[bool, MomentsDisagreement | None]:
        """(readable, the first disagreement by parameter name) for `moments_agree` / `moments_disagreement`."""
        applied = self.applied_gradient()
        va, vb = self.after.second_moments, self.before.second_moments
        if applied is None or va is None or vb is None or set(va) != set(applied) or set(vb) != set(applied):
            return False, None
        skipped = self.skipped_parameters
        for name in sorted(applied):
            if name in skipped:
                continue  # no update: nothing for the two moments to agree on
            g, err = applied[name]
            _, beta2, eps = self.after.moment_settings[name]
            if not 0.0 <= beta2 < 1.0:
                return False, None
            g2 = (va[name] - beta2 * vb[name]) / (1.0 - beta2)
            bound = 16.0 * eps * (va[name].abs() + beta2 * vb[name].abs() + g2.abs()) / (1.0 - beta2) \
                + 2.0 * g.abs() * err + err * err
            excess = (g * g - g2).abs() - (bound + 1e-3 * (g * g))
            if bool((excess > 0).any()):
                i = int(torch.argmax(torch.nan_to_num(excess, nan=math.inf)))
                return True, MomentsDisagreement(name, float((g * g).flatten()[i]), float(g2.flatten()[i]))
        return True, None


@dataclass(frozen=True, slots=True)
class MomentsDisagreement:
    """Where AdamW's moments disagree: g² as the first moment reads it and as the second moment does (worst entry)."""

    name: str
    from_first_moment: float
    from_second_moment: float


__all__ = ["AppliedRate", "MeasuredStep", "MomentsDisagreement", "TrainingSnapshot", "snapshot_training_state"]
