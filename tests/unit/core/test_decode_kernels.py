"""The compiled one-position step: it compiles everywhere and never raises on non-finite weights.

Its agreement with the torch forward is tested with the rest of decoding (`test_policy_decoding.py`).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from compactsim.harness.core.policy import TinyPolicy, configure_determinism
from compactsim.mock_servers.model_server.sampling import sample_text_token


def test_the_compiled_step_still_compiles_where_no_cache_directory_is_writable(monkeypatch: pytest.MonkeyPatch) -> None:
    """numba refuses `cache=True` without a writable location; the kernels then compile per process."""
    from numba.core import caching

    from compactsim.harness.core import decode_kernels

    monkeypatch.setattr(caching.CacheImpl, "_locator_classes", [])

    def twice(x: float) -> float:
        return 2.0 * x

    with pytest.raises(RuntimeError, match="no locator available"):
        decode_kernels.njit(cache=True)(twice)
    compiled = decode_kernels._compiled(twice)
    assert compiled(3.0) == 6.0 and type(compiled._cache).__name__ == "NullCache"



@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_weights_give_non_finite_numbers_not_an_exception(bad: float) -> None:
    """The server then answers 422 from the authoritative forward; sampling itself must not raise first."""
    configure_determinism()
    model = TinyPolicy.from_seed(2, dtype=torch.float64)
    with torch.no_grad():
        model.blocks[0].router.weight[1, :] = bad
        model.blocks[1].w_out[0, 0, 0] = bad
    state = model.start_decoding([40, 41, 42])
    for position in range(3):
        t = sample_text_token(state.logprobs, seed=1, request_digest="d", position=position)
        state = model.extend_decoding(state, [t])
    assert not np.isfinite(state.logprobs).all()
