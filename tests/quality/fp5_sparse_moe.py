"""A CORRECT backend (false-positive hunt 5): the trainer's own MoE layer, sparse and with a routing-map softmax.

Trainers do not run the generator's modelling code: Megatron-core's MoE layer (and HF's for training) evaluates only
the experts each token is routed to (a gather of the chosen experts' weights, no dense pass over every expert) and,
under router replay, builds a routing map from the recorded ids and takes the gates as the softmax of the router
logits over that map (-inf elsewhere). The same weights give the same function: softmax over the K chosen logits
equals the masked softmax over E, and an unchosen expert contributes exactly 0 either way (so its gradient is 0).
Installed on the state's policy before the first step by replacing each block's forward on the instance.
"""

from __future__ import annotations

import types

import torch
import torch.nn.functional as F

from compactsim.harness.core.policy import _attention_scores
from compactsim.harness.pipeline.backend import ReferenceBackend

SCENARIO = "router-one-layer-top3-microbatch"


def _sparse_forward(self, h, replay, past=None):
    b, s, d = h.shape
    nh = self.n_heads
    q, k, v = self.qkv(self.ln1(h)).split(d, dim=-1)
    q, k, v = (t.view(b, s, nh, d // nh).transpose(1, 2) for t in (q, k, v))
    if past is not None:
        k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
    t_all = k.shape[2]
    att = _attention_scores(q, k, d // nh)
    causal = torch.ones(s, t_all, dtype=torch.bool, device=h.device).triu(t_all - s + 1)
    att = att.masked_fill_(causal, float("-inf")).softmax(dim=-1)
    y = (att @ v).transpose(1, 2).reshape(b, s, d)
    h = h + self.proj(y)

    m = self.ln2(h)
    logits = self.router(m)  # (B, S, E)
    own = logits.topk(self.top_k, dim=-1).indices
    if replay is None:
        chosen = own
    else:
        chosen = torch.where((replay == -1).all(dim=-1, keepdim=True), own, replay)
    routing_map = torch.zeros_like(logits, dtype=torch.bool).scatter_(-1, chosen, True)  # (B, S, E)
    probs = logits.masked_fill(~routing_map, float("-inf")).softmax(dim=-1)  # (B, S, E), 0 off the map
    gates = probs.gather(-1, chosen)  # (B, S, K)
    w_in, b_in = self.w_in[chosen], self.b_in[chosen]  # (B, S, K, d, F), (B, S, K, F)
    w_out, b_out = self.w_out[chosen], self.b_out[chosen]  # (B, S, K, F, d), (B, S, K, d)
    hidden = F.gelu(torch.einsum("bsd,bskdf->bskf", m, w_in) + b_in)
    out = torch.einsum("bskf,bskfd->bskd", hidden, w_out) + b_out
    h = h + (gates[..., None] * out).sum(-2)
    return h, chosen, (k, v)


class Backend(ReferenceBackend):
    name = "fp5-sparse-moe"

    def train_step(self, state, batch, cfg):
        policy = state.policy
        if not getattr(policy, "_fp5_sparse", False):
            for block in policy.blocks:
                block.forward = types.MethodType(_sparse_forward, block)
            policy._fp5_sparse = True
        return super().train_step(state, batch, cfg)
