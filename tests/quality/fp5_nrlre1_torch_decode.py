"""A CORRECT backend (false-positive hunt 5): NeMo-RL's `nrlre1` route envelopes decoded by the trainer itself.

Before planning, every `routed_experts` string `nrlre1:<int8|int16|int32>:SxLxK:<base64 little-endian>` of the
payload is decoded with `torch.frombuffer` (little-endian dtype, S-major `.view(S, L, K)`) and handed on as the
nested [tokens][layers][topk] lists NeMo-Gym's list form carries; a string that is not a well-formed envelope is
left as it is, so the planner refuses it as before; so is an envelope holding an id below -1, which a JSON list
cannot carry (the planner refuses the envelope with `routed_expert_id_out_of_range`).
"""

from __future__ import annotations

import base64
import binascii
import copy
import re

import torch

from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.planner import plan_rollout

SCENARIO = "routes-nrlre1-three-layers-top2"
_DT = {"int8": torch.int8, "int16": torch.int16, "int32": torch.int32}
_DIM = re.compile(r"[1-9][0-9]{0,8}")


def _decode(text: str):
    parts = text.split(":", 3)
    if len(parts) != 4 or parts[0] != "nrlre1" or parts[1] not in _DT:
        return None
    dims = parts[2].split("x")
    if len(dims) != 3 or not all(_DIM.fullmatch(d) for d in dims):
        return None
    s, l, k = (int(d) for d in dims)
    if s * l * k > 4_000_000:
        return None
    try:
        raw = base64.b64decode(parts[3], validate=True)
    except (ValueError, binascii.Error):
        return None
    dt = _DT[parts[1]]
    item = torch.empty((), dtype=dt).element_size()
    if len(raw) != s * l * k * item:
        return None
    buf = bytearray(raw)
    t = torch.frombuffer(buf, dtype=dt)
    if bool((t < -1).any()):  # an id the list form cannot hold: left for the planner to refuse with its own code
        return None
    return t.view(s, l, k).to(torch.int64).tolist()


def _walk(obj):
    if isinstance(obj, dict):
        for key, val in obj.items():
            if key == "routed_experts" and isinstance(val, str):
                dec = _decode(val)
                if dec is not None:
                    obj[key] = dec
            else:
                _walk(val)
    elif isinstance(obj, list):
        for v in obj:
            _walk(v)


class Backend(ReferenceBackend):
    name = "fp5-nrlre1-torch-decode"

    def plan(self, result):
        result = copy.deepcopy(result)
        _walk(result)
        return plan_rollout(result, strict=True)
