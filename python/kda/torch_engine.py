"""kda.chunk_kda_with_state_pool: the engine form, writing into the engine's own buffers.

Rules:
  - Packed tokens only: q, k: [T, H, K] or [1, T, H, K]; v, g, beta, out likewise; cu_seqlens [N+1] on the device.
  - The state pool is the engine's fp32 pool [P, H, K, V] ([P, H, V, K] with state_v_first), read and written in
    place: sequence n starts from slot state_indices[n] (slot n without state_indices; a negative index = no state:
    zero start, nothing written), or from zero where has_initial_state[n] is 0, and its final state is stored back
    into the same slot. No pool: every sequence starts from zero and no state is written.
  - o goes into `out` (it may be v itself, as vLLM passes it).
  - Chunk tables: chunk_indices and chunk_offsets (both, from kda.upload_chunk_metadata outside any graph), or
    neither (kda derives them on the device, no host sync). max_sequence_tokens: a host-known bound on every
    sequence's length, 0 = unknown (kda_chunk_kda_args.max_sequence_tokens).
  - The gate, beta and scale flags are FLA's (fla_semantics). workspace: a uint8 CUDA tensor to reuse, or None
    for one from torch's caching allocator (the default; under CUDA-graph capture it comes from the graph's pool).

The launch is the torch custom op torch.ops.kda.chunk_kda_with_state_pool (where torch.library.custom_op exists,
PyTorch >= 2.4), declared as mutating out, the pool and the workspace and with a fake implementation that does
nothing (it returns nothing and allocates nothing), so torch.compile traces it as one opaque call and CUDA-graph
capture records its kernels. Nothing on this path synchronises the host.
"""

from typing import Optional

import torch

from .chunk_kda_args import ChunkKdaOptions
from .fla_semantics import fla_chunk_kda_options
from .torch_tensors import run_chunk_kda_on_tensors

OP_NAMESPACE = "kda"
OP_NAME = "chunk_kda_with_state_pool"


def _run_with_state_pool(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    out: torch.Tensor,
    cu_seqlens: torch.Tensor,
    A_log: Optional[torch.Tensor],
    dt_bias: Optional[torch.Tensor],
    state_pool: Optional[torch.Tensor],
    state_indices: Optional[torch.Tensor],
    has_initial_state: Optional[torch.Tensor],
    chunk_indices: Optional[torch.Tensor],
    chunk_offsets: Optional[torch.Tensor],
    workspace: Optional[torch.Tensor],
    scale: Optional[float],
    gate: int,
    lower_bound: float,
    beta_activation: int,
    qk_l2norm: bool,
    state_layout: int,
    chunk_size: int,
    max_sequence_tokens: int,
) -> None:
    options = ChunkKdaOptions(
        gate=gate,
        lower_bound=lower_bound,
        beta_activation=beta_activation,
        qk_l2norm=qk_l2norm,
        scale=scale,
        state_layout=state_layout,
        chunk_size=chunk_size,
        max_sequence_tokens=max_sequence_tokens,
    )
    run_chunk_kda_on_tensors(
        options, q=q, k=k, v=v, g=g, beta=beta, o=out, cu_seqlens=cu_seqlens, A_log=A_log, dt_bias=dt_bias,
        initial_state=state_pool, final_state=state_pool, state_indices=state_indices,
        has_initial_state=has_initial_state, chunk_indices=chunk_indices, chunk_offsets=chunk_offsets,
        workspace=workspace,
    )


def _register_custom_op():
    """torch.ops.kda.chunk_kda_with_state_pool, or the plain function where torch.library.custom_op is missing."""
    if not hasattr(torch.library, "custom_op"):
        return _run_with_state_pool
    op = torch.library.custom_op(
        f"{OP_NAMESPACE}::{OP_NAME}", mutates_args=("out", "state_pool", "workspace")
    )(_run_with_state_pool)

    @op.register_fake
    def _fake(*args, **kwargs):
        return None

    return getattr(getattr(torch.ops, OP_NAMESPACE), OP_NAME)


chunk_kda_op = _register_custom_op()


def chunk_kda_with_state_pool(
    q,
    k,
    v,
    g,
    beta,
    out,
    cu_seqlens,
    *,
    state_pool=None,
    state_indices=None,
    has_initial_state=None,
    scale=None,
    use_qk_l2norm_in_kernel=False,
    use_gate_in_kernel=False,
    use_beta_sigmoid_in_kernel=False,
    allow_neg_eigval=False,
    A_log=None,
    dt_bias=None,
    lower_bound=None,
    state_v_first=False,
    chunk_indices=None,
    chunk_offsets=None,
    max_sequence_tokens=0,
    chunk_size=64,
    workspace=None,
):
    """The KDA prefill into the engine's buffers (see the module docstring); returns None."""
    if not use_gate_in_kernel:
        A_log = dt_bias = None
    options = fla_chunk_kda_options(
        scale=scale,
        use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
        use_gate_in_kernel=use_gate_in_kernel,
        use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel,
        allow_neg_eigval=allow_neg_eigval,
        has_A_log=A_log is not None,
        lower_bound=lower_bound,
        state_v_first=state_v_first,
        chunk_size=chunk_size,
        max_sequence_tokens=max_sequence_tokens,
    )
    chunk_kda_op(
        q, k, v, g, beta, out, cu_seqlens, A_log, dt_bias, state_pool, state_indices, has_initial_state,
        chunk_indices, chunk_offsets, workspace, None if scale is None else float(scale), options.gate,
        options.lower_bound, options.beta_activation, options.qk_l2norm, options.state_layout, options.chunk_size,
        int(max_sequence_tokens),
    )
