"""The tiny multimodal mixture-of-experts policy shared by the mock model server and the trainer.

A pre-norm causal transformer (default: 2 layers, d_model 64, 4 heads) whose MLP is a top-k
mixture of experts (default 4 experts, top-2), with sinusoidal positions and an image patch
embedding: each image is area-pooled to `image_size` x `image_size` RGB pixels and cut into
`image_grid`**2 patches, one per `<|image|>` placeholder token (`IMAGE_PATCH_TOKENS`), so a
row with the wrong images scores differently.

Router replay: `routes` is an int tensor [B, S, L, K] of expert ids; where a (token, layer) row
is all `-1` the model uses its own router, otherwise it uses exactly those K experts (gates are
the softmax of its router logits over them). Replaying the routes the model chose reproduces
its logits exactly. A row mixing `-1` with ids, an id outside [0, E) or a repeated id is an error.

Everything is deterministic: seeded init through `compactsim.harness.core.seeds.torch_generator` (drawn in
float64 on CPU, then cast, so float32 and float64 models of one seed share their weights up to
rounding), plain matmul attention (no fused kernels), dense expert evaluation (no scatter).
Call `configure_determinism()` once at a process edge.

Log-probability conventions:
- `next_token_logprobs(ids, images, routes)` -> [V]: log-softmax over the full vocabulary of the
  token that follows `ids`.
- `token_logprobs(ids[B,S], images, routes, lengths)` -> [B, S]: column t = log p(ids[t] | ids[:t]),
  column 0 = 0, columns >= length = 0. Right padding only (causal attention keeps real
  positions independent of the padding).
"""

from __future__ import annotations

import io
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import threadpoolctl
import torch
import torch.nn.functional as F
from torch import nn

from compactsim.harness.core import tokenizer as tok
from compactsim.harness.core.allocator import keep_freed_memory
from compactsim.harness.core.errors import ConfigError
from compactsim.harness.core.numpy_decoding import NumpyDecoder
from compactsim.harness.core.positions import sinusoid
from compactsim.harness.core.seeds import check_seed, torch_generator

_FORMAT = "compactsim-tiny-policy/1"
#: Bounds on a policy shape, checked before anything is allocated: pushed weights carry their own config, and a
#: 10 KB payload could otherwise ask for hundreds of GB (`n_layers=10**6`).
MAX_DIMENSION = 1 << 16
MAX_PARAMETERS = 50_000_000


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    """Shape of the tiny policy; saved with the weights."""

    vocab_size: int = tok.VOCAB_SIZE
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_experts: int = 4
    top_k: int = 2
    d_expert: int = 128  # hidden width of each expert MLP
    image_size: int = 16  # pixels are area-pooled to image_size x image_size
    image_grid: int = 2  # patches per side; image_grid**2 placeholder tokens per image

    def check(self) -> PolicyConfig:
        problems = [f"{f.name}={getattr(self, f.name)!r}: expected an int in [1, {MAX_DIMENSION}]"
                    for f in fields(self) if type(getattr(self, f.name)) is not int
                    or not 1 <= getattr(self, f.name) <= MAX_DIMENSION]
        if problems:  # the rules below divide and multiply by these
            raise ConfigError("invalid_config", "PolicyConfig is invalid", violations=tuple(problems))
        if self.parameter_count() > MAX_PARAMETERS:
            problems.append(f"{self.parameter_count()} parameters; the limit is {MAX_PARAMETERS}")
        if self.d_model % self.n_heads:
            problems.append(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if not 1 <= self.top_k <= self.n_experts:
            problems.append(f"top_k={self.top_k}: expected 1 <= top_k <= n_experts={self.n_experts}")
        if self.image_grid**2 != tok.IMAGE_PATCH_TOKENS:
            problems.append(f"image_grid={self.image_grid}: image_grid**2 must equal IMAGE_PATCH_TOKENS={tok.IMAGE_PATCH_TOKENS}")
        if self.image_size % self.image_grid:
            problems.append(f"image_size={self.image_size} is not divisible by image_grid={self.image_grid}")
        if self.vocab_size < tok.VOCAB_SIZE:
            problems.append(f"vocab_size={self.vocab_size}: must be >= tokenizer VOCAB_SIZE={tok.VOCAB_SIZE}")
        if problems:
            raise ConfigError("invalid_config", "PolicyConfig is invalid", violations=tuple(problems))
        return self

    def parameter_count(self) -> int:
        """The parameters a policy of this shape holds, within a few norms' worth (counted before allocating any)."""
        d, patch = self.d_model, 3 * (self.image_size // max(self.image_grid, 1)) ** 2
        per_layer = 4 * d * d + 4 * d + d * self.n_experts + self.n_experts * (2 * d * self.d_expert + self.d_expert + d)
        return 2 * self.vocab_size * d + self.n_layers * (per_layer + 4 * d) + (patch + 1) * d + self.image_grid**2 * d


def _config_of(value: object) -> PolicyConfig:
    """The `PolicyConfig` a weights payload declares, every key known and every value checked (`ConfigError`)."""
    if not isinstance(value, dict):
        raise ConfigError("invalid_argument", f"weights payload has no 'config' mapping (found {type(value).__name__})")
    known = {f.name for f in fields(PolicyConfig)}
    unknown = sorted(str(k) for k in value if k not in known)
    if unknown:
        raise ConfigError("invalid_argument", f"weights config has unknown key(s) {unknown[:5]}")
    config = PolicyConfig(**value)
    try:
        return config.check()
    except ConfigError as exc:
        raise ConfigError("invalid_argument", f"weights config is invalid: {'; '.join(exc.violations)}") from None


@dataclass(frozen=True, slots=True, eq=False)
class PolicyOutput:
    """Logits [B, S, V] and the routes actually used [B, S, L, K] (replayed or own)."""

    logits: torch.Tensor
    routes: torch.Tensor


@dataclass(frozen=True, slots=True, eq=False)
class DecodeState:
    """A sequence being sampled: its length, the log-softmax of its next token, and its key/value cache.

    `logprobs` is float64 numpy [V] whatever the model's dtype: sampling runs in numpy. `cache` is a
    `numpy_decoding.KVCache` when decoding in numpy, else the per-layer (keys, values) torch tensors.
    """

    length: int
    logprobs: np.ndarray
    cache: Any
    #: numpy decoding: the weights as numpy arrays (kept on the policy until a parameter changes). None: torch module path.
    decoder: NumpyDecoder | None = None


def configure_determinism(num_threads: int = 1) -> None:
    """Process-wide torch settings for bit-stable results (call from servers, CLIs, tests).

    Also limits numpy's BLAS to the same thread count, sets ``CUBLAS_WORKSPACE_CONFIG`` (if unset)
    so cuBLAS matmuls are deterministic on CUDA, and keeps freed heap memory mapped
    (`allocator.keep_freed_memory`: speed only, same bits).
    Uninitialised-memory filling stays on: a backend that reads `torch.empty` gets NaN, loudly.
    """
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    keep_freed_memory()
    torch.set_num_threads(num_threads)
    # numpy's BLAS too (sampling runs in numpy): its default, a thread per core, spins against the
    # other worker processes on a small machine (two scenario workers on 2 cores: 25 s -> 33 s)
    threadpoolctl.threadpool_limits(limits=num_threads, user_api="blas")
    _use_deterministic_algorithms()


def _use_deterministic_algorithms() -> None:
    """`torch.use_deterministic_algorithms(True, warn_only=True)` without importing Inductor.

    torch 2.13's function imports `torch._inductor.config` only to set its `deterministic` flag,
    which costs 1.3 s per process (every CLI run, worker and server). Inductor reads the same flag
    from `TORCHINDUCTOR_DETERMINISTIC` when it is first imported, so a backend that compiles later
    still gets it; one already imported is set directly.
    """
    os.environ["TORCHINDUCTOR_DETERMINISTIC"] = "1"  # forced, as torch's own function forces the flag
    inductor_config = sys.modules.get("torch._inductor.config")
    if inductor_config is not None:
        inductor_config.deterministic = True  # type: ignore[attr-defined]
    torch._C._set_deterministic_algorithms(True, warn_only=True)


#: Cache rows prepared beyond the prompt when decoding starts (the cache doubles when outgrown).
_DECODE_HEADROOM = 256


def _attention_scores(q: torch.Tensor, k: torch.Tensor, head_size: int) -> torch.Tensor:
    """`(q @ kᵀ) / √head_size`, bit for bit, as a fresh tensor.

    When √head_size is a power of two (head sizes 4ⁿ; the default 16 → 4), q is divided before the
    product: scaling by 2ⁿ is exact in binary floating point, so every product and partial sum is
    the same number scaled, and the division over the (S, T) matrix, and again in backward,
    becomes one over the (S, head_size) queries. Only where values leave the normal range (a
    subnormal product, or one that overflows before the division but not after: weights that
    have already diverged) can the two differ.
    """
    scale = math.sqrt(head_size)
    if math.frexp(scale)[0] == 0.5:
        return (q / scale) @ k.transpose(-2, -1)
    return (q @ k.transpose(-2, -1)) / scale


class _Block(nn.Module):
    """Pre-norm causal self-attention + top-k MoE MLP."""

    def __init__(self, c: PolicyConfig) -> None:
        super().__init__()
        d, e, f = c.d_model, c.n_experts, c.d_expert
        self.n_heads, self.top_k = c.n_heads, c.top_k
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.router = nn.Linear(d, e, bias=False)
        self.w_in = nn.Parameter(torch.empty(e, d, f))
        self.b_in = nn.Parameter(torch.empty(e, f))
        self.w_out = nn.Parameter(torch.empty(e, f, d))
        self.b_out = nn.Parameter(torch.empty(e, d))

    def forward(
        self, h: torch.Tensor, replay: torch.Tensor | None, past: tuple[torch.Tensor, torch.Tensor] | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        b, s, d = h.shape
        nh = self.n_heads
        q, k, v = self.qkv(self.ln1(h)).split(d, dim=-1)
        q, k, v = (t.view(b, s, nh, d // nh).transpose(1, 2) for t in (q, k, v))  # (B, nh, S, hs)
        if past is not None:  # incremental decoding: keys/values of the earlier positions
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)  # (B, nh, T, hs)
        t_all = k.shape[2]
        att = _attention_scores(q, k, d // nh)  # (B, nh, S, T), a fresh tensor: masked in place
        causal = torch.ones(s, t_all, dtype=torch.bool, device=h.device).triu(t_all - s + 1)
        att = att.masked_fill_(causal, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, s, d)  # (B, S, d)
        h = h + self.proj(y)

        m = self.ln2(h)
        router_logits = self.router(m)  # (B, S, E)
        own = router_logits.topk(self.top_k, dim=-1).indices  # (B, S, K), by descending score
        if replay is None:
            chosen = own
        else:
            use_own = (replay == -1).all(dim=-1, keepdim=True)  # (B, S, 1)
            chosen = torch.where(use_own, own, replay)
        gates = router_logits.gather(-1, chosen).softmax(dim=-1)  # (B, S, K)
        weights = (F.one_hot(chosen, router_logits.shape[-1]).to(gates.dtype) * gates[..., None]).sum(-2)  # (B, S, E)
        hidden = F.gelu(torch.einsum("bsd,edf->bsef", m, self.w_in) + self.b_in)  # (B, S, E, F)
        out = torch.einsum("bsef,efd->bsed", hidden, self.w_out) + self.b_out  # (B, S, E, d)
        h = h + (weights[..., None] * out).sum(-2)
        return h, chosen, (k, v)


class TinyPolicy(nn.Module):
    """The whole model; see the module docstring for shapes and conventions."""

    def __init__(self, config: PolicyConfig = PolicyConfig()) -> None:
        super().__init__()
        self.config = config.check()
        c = config
        patch = c.image_size // c.image_grid
        self.tok_emb = nn.Embedding(c.vocab_size, c.d_model)
        self.patch_proj = nn.Linear(3 * patch * patch, c.d_model)
        self.patch_pos = nn.Parameter(torch.empty(c.image_grid**2, c.d_model))
        self.blocks = nn.ModuleList(_Block(c) for _ in range(c.n_layers))
        self.ln_f = nn.LayerNorm(c.d_model)
        self.lm_head = nn.Linear(c.d_model, c.vocab_size)

    # ------------------------------------------------------------------ construction, I/O

    @classmethod
    def from_seed(
        cls, seed: int, config: PolicyConfig = PolicyConfig(), *, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"
    ) -> TinyPolicy:
        """Seeded init: every parameter drawn from its own key (seed, "policy_init", name)."""
        check_seed(seed)
        model = cls(config)
        with torch.no_grad():
            for name, p in sorted(model.named_parameters()):
                if name.endswith(("ln1.weight", "ln2.weight", "ln_f.weight")):
                    p.copy_(torch.ones_like(p))
                    continue
                if name.endswith(("ln1.bias", "ln2.bias", "ln_f.bias")):
                    p.copy_(torch.zeros_like(p))
                    continue
                std = _init_std(name, p, config)
                g = torch_generator(seed, "policy_init", param=name)
                p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) * std)
        return model.to(device=device, dtype=dtype).eval()

    def to_bytes(self) -> bytes:
        """`torch.save` of {format, config, state_dict} (CPU tensors); read back with `load_bytes`."""
        buf = io.BytesIO()
        sd = {k: v.detach().to("cpu") for k, v in self.state_dict().items()}
        torch.save({"format": _FORMAT, "config": asdict(self.config), "state_dict": sd}, buf)
        return buf.getvalue()

    @classmethod
    def load_bytes(cls, data: bytes, *, dtype: torch.dtype | None = None, device: str | torch.device = "cpu",
                   expect: PolicyConfig | None = None) -> TinyPolicy:
        """Inverse of `to_bytes`. Uses `torch.load(weights_only=True)`: no arbitrary unpickling.

        The payload's config and tensors are checked before the model is built (`ConfigError` naming the part):
        a config of bounded ints (`PolicyConfig.check`), equal to `expect` when given (a server takes weights for
        its own policy's shape, never a new architecture), and real floating-point tensors by name.
        """
        try:
            obj = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        except Exception as exc:  # torch raises several unrelated types for bad payloads
            raise ConfigError("invalid_argument", f"weights payload does not load: {type(exc).__name__}: {exc}") from None
        if not isinstance(obj, dict) or obj.get("format") != _FORMAT:
            raise ConfigError("invalid_argument", f"weights payload is not {_FORMAT!r}")
        config = _config_of(obj.get("config"))
        if expect is not None and config != expect:
            differ = [f"{f.name} {getattr(config, f.name)} (this policy: {getattr(expect, f.name)})"
                      for f in fields(config) if getattr(config, f.name) != getattr(expect, f.name)]
            raise ConfigError("invalid_argument", f"weights config is for another policy shape: {'; '.join(differ)}")
        sd = obj.get("state_dict")
        if not isinstance(sd, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in sd.items()):
            raise ConfigError("invalid_argument", "weights 'state_dict' must map parameter names to tensors")
        not_real = sorted(k for k, v in sd.items() if not v.is_floating_point())  # ints, bools and complex numbers
        if not_real:
            raise ConfigError("invalid_argument", f"weights 'state_dict' entry {not_real[0]!r} is {sd[not_real[0]].dtype}; "
                                                  "parameters are real floating-point tensors")
        model = cls(config)
        src_dtype = next(iter(sd.values())).dtype if sd else torch.float32
        model.to(dtype=src_dtype)
        try:
            model.load_state_dict(sd, strict=True)
        except RuntimeError as exc:
            raise ConfigError("invalid_argument", f"weights do not fit PolicyConfig: {exc}") from None
        return model.to(device=device, dtype=dtype or src_dtype).eval()

    def save(self, path: str | Path) -> None:
        Path(path).write_bytes(self.to_bytes())

    @classmethod
    def load(cls, path: str | Path, *, dtype: torch.dtype | None = None, device: str | torch.device = "cpu") -> TinyPolicy:
        return cls.load_bytes(Path(path).read_bytes(), dtype=dtype, device=device)

    @property
    def dtype(self) -> torch.dtype:
        return self.tok_emb.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.tok_emb.weight.device

    # ------------------------------------------------------------------ forward

    def embed_images(self, images: Sequence[torch.Tensor]) -> torch.Tensor:
        """Images [3, H, W] in [0, 1] -> patch embeddings [len(images) * grid**2, d]."""
        c = self.config
        if not images:
            return torch.zeros(0, c.d_model, dtype=self.dtype, device=self.device)
        pooled = []
        for j, img in enumerate(images):
            if img.dim() != 3 or img.shape[0] != 3:
                raise ConfigError("invalid_argument", f"images[{j}] has shape {tuple(img.shape)}; expected (3, H, W)")
            x = img.to(device=self.device, dtype=self.dtype)[None]  # (1, 3, H, W)
            pooled.append(F.adaptive_avg_pool2d(x, c.image_size)[0])  # (3, P, P)
        x = torch.stack(pooled)  # (N, 3, P, P)
        n, p = x.shape[0], c.image_size // c.image_grid
        x = x.view(n, 3, c.image_grid, p, c.image_grid, p).permute(0, 2, 4, 1, 3, 5)  # (N, gy, gx, 3, p, p)
        x = x.reshape(n, c.image_grid**2, 3 * p * p)
        return (self.patch_proj(x) + self.patch_pos).reshape(n * c.image_grid**2, c.d_model)

    def forward(
        self,
        input_ids: torch.Tensor,
        images: Sequence[Sequence[torch.Tensor]] | None = None,
        routes: torch.Tensor | None = None,
    ) -> PolicyOutput:
        """ids [B, S] (long), images per row (each [3, H, W]), routes [B, S, L, K] or None."""
        c = self.config
        if input_ids.dim() != 2:
            raise ConfigError("invalid_argument", f"input_ids has shape {tuple(input_ids.shape)}; expected (B, S)")
        ids = input_ids.to(device=self.device, dtype=torch.long)
        b, s = ids.shape
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= c.vocab_size):
            raise ConfigError("invalid_argument", f"input_ids outside [0, {c.vocab_size})")
        replay = self._check_routes(routes, b, s)
        h = self.tok_emb(ids)  # (B, S, d)
        rows = list(images) if images is not None else [[] for _ in range(b)]
        if len(rows) != b:
            raise ConfigError("invalid_argument", f"images has {len(rows)} rows; input_ids has {b}")
        is_img = ids == tok.IMAGE
        per_row = is_img.sum(dim=1).tolist()
        if any(per_row) or any(len(r) for r in rows):
            for r, (n_tok, imgs) in enumerate(zip(per_row, rows)):
                if n_tok != len(imgs) * tok.IMAGE_PATCH_TOKENS:
                    raise ConfigError(
                        "invalid_argument",
                        f"row {r}: {n_tok} <|image|> tokens but {len(imgs)} images x {tok.IMAGE_PATCH_TOKENS} patches",
                    )
            emb = torch.cat([self.embed_images(list(imgs)) for imgs in rows])  # (sum n_tok, d), row-major order
            bidx, sidx = is_img.nonzero(as_tuple=True)
            h = h.index_put((bidx, sidx), emb)
        h = h + sinusoid(s, c.d_model, dtype=h.dtype, device=h.device)
        used = []
        for layer, block in enumerate(self.blocks):
            h, chosen, _ = block(h, None if replay is None else replay[:, :, layer, :])
            used.append(chosen)
        logits = self.lm_head(self.ln_f(h))  # (B, S, V)
        return PolicyOutput(logits=logits, routes=torch.stack(used, dim=2))  # routes (B, S, L, K)

    @torch.no_grad()
    def start_decoding(
        self, input_ids: Sequence[int], images: Sequence[torch.Tensor] = (), *, numpy: bool | None = None
    ) -> DecodeState:
        """Prefill one prompt for sampling; `state.logprobs` is the next-token log-softmax [V].

        For *sampling* only: the authoritative logprobs and routes of a finished sequence come from
        one full forward (`sequence_logprobs`), exactly as the trainer recomputes them. With
        `numpy` (the default on the CPU, where torch's per-operation cost dominates) the steps run
        in `numpy_decoding` (same arithmetic, other kernels, so equal to rounding); otherwise
        through the blocks' own `forward` with a torch cache. Extensions follow the state's choice.
        """
        prompt = [int(t) for t in input_ids]
        if not prompt or not all(0 <= t < self.config.vocab_size for t in prompt):
            raise ConfigError("invalid_argument", f"start_decoding: input_ids must be a non-empty list of ids in [0, {self.config.vocab_size})")
        ids = torch.tensor(prompt, dtype=torch.long, device=self.device)[None]  # (1, S)
        h = self._embed(ids, [list(images)])  # (1, S, d)
        s = ids.shape[1]
        if self.device.type == "cpu" if numpy is None else numpy:
            decoder = self._numpy_decoder()
            cache = decoder.new_cache(s + _DECODE_HEADROOM)
            return DecodeState(length=s, logprobs=decoder.prefill(h[0].numpy(), cache), cache=cache, decoder=decoder)
        logprobs, past = self._module_step(h, None, 0)
        return DecodeState(length=s, logprobs=logprobs, cache=past)

    def extend_decoding(self, state: DecodeState, new_ids: Sequence[int]) -> DecodeState:
        """Feed more (non-image) tokens after `state`; returns the new state (`state` stays valid).

        Called once per sampled token: the numpy path skips torch (no `no_grad` context to enter).
        """
        new = [int(t) for t in new_ids]
        if not new:
            return state
        if tok.IMAGE in new:
            raise ConfigError("invalid_argument", "extend_decoding cannot take <|image|> tokens")
        if min(new) < 0 or max(new) >= self.config.vocab_size:
            raise ConfigError("invalid_argument", f"extend_decoding: new_ids outside [0, {self.config.vocab_size})")
        length = state.length + len(new)
        decoder = state.decoder
        if decoder is None:
            with torch.no_grad():
                ids = torch.tensor(new, dtype=torch.long, device=self.device)[None]  # (1, n)
                logprobs, past = self._module_step(F.embedding(ids, self.tok_emb.weight), state.cache, state.length)
            return DecodeState(length=length, logprobs=logprobs, cache=past)
        cache = state.cache
        if cache.filled != state.length or cache.capacity < length:  # a branch, or full: a copy with room
            cache = cache.branch(state.length, max(cache.capacity, 2 * length))
        logprobs = decoder.run(decoder.embed(new), cache, state.length)
        return DecodeState(length=length, logprobs=logprobs, cache=cache, decoder=decoder)

    def _numpy_decoder(self) -> NumpyDecoder:
        """The weights as numpy arrays, rebuilt only when a parameter was replaced or changed in place since."""
        key = tuple((p.data_ptr(), p._version) for p in self.parameters())
        cached = self.__dict__.get("_numpy_decoder_cache")
        if cached is None or cached[0] != key:
            cached = (key, NumpyDecoder.from_policy(self))
            self.__dict__["_numpy_decoder_cache"] = cached
        return cached[1]

    def _embed(self, ids: torch.Tensor, images: Sequence[Sequence[torch.Tensor]]) -> torch.Tensor:
        """Token embeddings [1, S, d] with each `<|image|>` row replaced by its patch embedding (no positions)."""
        h = F.embedding(ids, self.tok_emb.weight)
        is_img = ids == tok.IMAGE
        n_tok = int(is_img.sum())
        if n_tok != len(images[0]) * tok.IMAGE_PATCH_TOKENS:
            raise ConfigError("invalid_argument", f"{n_tok} <|image|> tokens but {len(images[0])} images x {tok.IMAGE_PATCH_TOKENS} patches")
        if n_tok:
            bidx, sidx = is_img.nonzero(as_tuple=True)
            h = h.index_put((bidx, sidx), self.embed_images(images[0]))
        return h

    def _module_step(self, h: torch.Tensor, past, offset: int) -> tuple[np.ndarray, tuple]:
        """Positions [offset, offset + n) through the blocks' `forward` with the cache: (log-softmax [V] float64, new cache)."""
        n = h.shape[1]
        h = h + sinusoid(offset + n, self.config.d_model, dtype=h.dtype, device=h.device)[offset:]
        new_past = []
        for layer, block in enumerate(self.blocks):
            h, _, kv = block(h, None, None if past is None else past[layer])
            new_past.append(kv)
        logprobs = self.lm_head(self.ln_f(h[0, -1])).log_softmax(-1)
        return logprobs.to("cpu", torch.float64).numpy(), tuple(new_past)

    def _check_routes(self, routes: torch.Tensor | None, b: int, s: int) -> torch.Tensor | None:
        c = self.config
        if routes is None:
            return None
        routes = torch.as_tensor(routes).to(device=self.device, dtype=torch.long)
        want = (b, s, c.n_layers, c.top_k)
        if tuple(routes.shape) != want:
            raise ConfigError("invalid_argument", f"routes has shape {tuple(routes.shape)}; expected {want} (B, S, L, K)")
        unset = routes == -1
        mixed = unset.any(-1) & ~unset.all(-1)
        if bool(mixed.any()):
            where = tuple(mixed.nonzero()[0].tolist())
            raise ConfigError("invalid_argument", f"routes row (b, s, layer)={where} mixes -1 with expert ids")
        bad = ~unset & ((routes < 0) | (routes >= c.n_experts))
        if bool(bad.any()):
            where = tuple(bad.nonzero()[0].tolist())
            raise ConfigError("invalid_argument", f"routes{list(where)}={int(routes[where])}: expected -1 or an expert id in [0, {c.n_experts})")
        srt = routes.sort(dim=-1).values
        dup = ((srt[..., 1:] == srt[..., :-1]) & (srt[..., 1:] != -1)).any(-1)
        if bool(dup.any()):
            where = tuple(dup.nonzero()[0].tolist())
            raise ConfigError("invalid_argument", f"routes row (b, s, layer)={where} repeats an expert id")
        return routes

    # ------------------------------------------------------------------ conveniences shared by server and trainer

    def _single(self, input_ids: Any, images: Sequence[torch.Tensor], routes: torch.Tensor | None) -> PolicyOutput:
        ids = torch.as_tensor(list(input_ids) if not isinstance(input_ids, torch.Tensor) else input_ids, dtype=torch.long)
        if ids.dim() != 1 or ids.numel() == 0:
            raise ConfigError("invalid_argument", f"input_ids has shape {tuple(ids.shape)}; expected a non-empty (S,)")
        r = None if routes is None else torch.as_tensor(routes)[None]
        return self(ids[None], [list(images)], r)

    @torch.no_grad()
    def next_token_logprobs(
        self, input_ids: Sequence[int] | torch.Tensor, images: Sequence[torch.Tensor] = (), routes: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Full-vocabulary log-softmax [V] of the token after `input_ids` (S,), given its images and optional routes [S, L, K]."""
        return self._single(input_ids, images, routes).logits[0, -1].log_softmax(-1)

    @torch.no_grad()
    def sequence_logprobs(
        self, input_ids: Sequence[int] | torch.Tensor, images: Sequence[torch.Tensor] = (), routes: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(log-softmax [S, V] of the token after each position, routes used [S, L, K]) for one sequence."""
        out = self._single(input_ids, images, routes)
        return out.logits[0].log_softmax(-1), out.routes[0]

    @torch.no_grad()
    def own_routes(self, input_ids: Sequence[int] | torch.Tensor, images: Sequence[torch.Tensor] = ()) -> torch.Tensor:
        """The experts the model itself picks for every token and layer: [S, L, K]."""
        return self._single(input_ids, images, None).routes[0]

    def token_logprobs(
        self,
        input_ids: torch.Tensor,
        images: Sequence[Sequence[torch.Tensor]] | None = None,
        routes: torch.Tensor | None = None,
        lengths: torch.Tensor | Sequence[int] | None = None,
    ) -> torch.Tensor:
        """Training-row logprobs [B, S]: column t = log p(ids[t] | ids[:t]); column 0 and columns >= length are 0.

        Differentiable (no `no_grad`). Rows are right-padded; `lengths` [B] defaults to S.
        """
        out = self(input_ids, images, routes)
        ids = input_ids.to(device=self.device, dtype=torch.long)
        b, s = ids.shape
        logp = out.logits[:, :-1].log_softmax(-1).gather(-1, ids[:, 1:, None])[..., 0]  # (B, S-1)
        logp = torch.cat([torch.zeros(b, 1, dtype=logp.dtype, device=logp.device), logp], dim=1)  # (B, S)
        if lengths is not None:
            lens = torch.as_tensor(lengths, device=self.device).reshape(b, 1)
            logp = logp.masked_fill(torch.arange(s, device=self.device)[None, :] >= lens, 0.0)
        return logp


def _init_std(name: str, p: torch.Tensor, c: PolicyConfig) -> float:
    if name.endswith("tok_emb.weight") or name.endswith("patch_pos"):
        return 0.5
    if name.endswith("router.weight"):
        return 1.0  # large, so experts are clearly separated and routes are stable under rounding
    if name.endswith("bias") or name.endswith("b_in") or name.endswith("b_out"):
        return 0.02
    fan_in = {"w_in": c.d_model, "w_out": c.d_expert}.get(name.rsplit(".", 1)[-1], p.shape[-1])
    return 1.0 / math.sqrt(fan_in)


__all__ = ["DecodeState", "PolicyConfig", "PolicyOutput", "TinyPolicy", "configure_determinism"]
