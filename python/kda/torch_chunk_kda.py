"""kda.chunk_kda: FLA's chunk_kda (forward) on kda's kernels, with FLA's names, shapes and defaults.

Rules, beyond fla_semantics (gate, beta, lower_bound, chunk_size):
  - q, k: [B, T, H, K]; v: [B, T, H, V]; g: [B, T, H, K]; beta: [B, T, H]. With cu_seqlens, B must be 1 and the
    sequences are packed along T; without, the B rows are B sequences of T tokens each (cu_seqlens is then built
    on the host from the shape: no device work to derive it).
  - initial_state: [N, H, K, V] fp32 ([N, H, V, K] with state_v_first), read only. The final state is a new
    [N, H, K, V] fp32 tensor when output_final_state, else None. o is a new [B, T, H, V] tensor of q's dtype, or
    `out` (same shape and dtype; it may be v itself, as vLLM passes it).
  - Chunk tables: from cu_seqlens_cpu (or the shape) they are built on the host and uploaded with one async copy
    (exact grids, and the longest sequence as the bound kda uses for short-sequence batches); otherwise kda
    derives them on the device inside the call, with no host sync. Both give the same bits. A chunk_indices
    without cu_seqlens_cpu is not needed for that and is not used (it is checked for shape only).
  - kda is forward-only: a call that would need a gradient (grad mode on and an input that requires grad) raises
    ValueError instead of returning a result without one.
  - Inputs whose strides no kda view can express are copied contiguous first; `out` must be such a view already.
"""

from __future__ import annotations

import torch

from .fla_semantics import fla_chunk_kda_options, reject_fla_only_options
from .torch_metadata import upload_chunk_metadata
from .torch_tensors import contiguous_float32, run_chunk_kda_on_tensors


def _reject_gradients(named_tensors):
    if not torch.is_grad_enabled():
        return
    for name, t in named_tensors:
        if t is not None and t.requires_grad:
            raise ValueError(
                f"{name}: requires grad, but kda has no backward pass (call it under torch.no_grad() or "
                f"torch.inference_mode(), or detach the inputs)"
            )


def chunk_kda(
    q,
    k,
    v,
    g,
    beta,
    *,
    scale=None,
    initial_state=None,
    output_final_state=False,
    use_qk_l2norm_in_kernel=False,
    use_gate_in_kernel=False,
    use_beta_sigmoid_in_kernel=False,
    A_log=None,
    dt_bias=None,
    lower_bound=None,
    cu_seqlens=None,
    cu_seqlens_cpu=None,
    chunk_indices=None,
    state_v_first=False,
    out=None,
    allow_neg_eigval=False,
    safe_gate=False,
    chunk_size=64,
    **fla_only_options,
):
    """The KDA prefill forward pass, FLA-compatible: returns (o, final_state). See the module docstring."""
    reject_fla_only_options(fla_only_options)
    if not use_gate_in_kernel:
        A_log = dt_bias = None  # FLA ignores them without the in-kernel gate
    options = fla_chunk_kda_options(
        scale=scale,
        use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
        use_gate_in_kernel=use_gate_in_kernel,
        use_beta_sigmoid_in_kernel=use_beta_sigmoid_in_kernel,
        allow_neg_eigval=allow_neg_eigval,
        has_A_log=A_log is not None,
        lower_bound=lower_bound,
        safe_gate=safe_gate,
        state_v_first=state_v_first,
        chunk_size=chunk_size,
    )
    _reject_gradients(
        (("q", q), ("k", k), ("v", v), ("g", g), ("beta", beta), ("A_log", A_log), ("dt_bias", dt_bias),
         ("initial_state", initial_state))
    )
    if q.dim() != 4:
        raise ValueError(f"q: expected [B, T, H, K], got shape {list(q.shape)}")
    batch, seq_len, heads, head_dim_k = q.shape
    device = q.device

    if cu_seqlens is not None and cu_seqlens.device.type == "cpu":
        cu_seqlens_cpu, cu_seqlens = (cu_seqlens if cu_seqlens_cpu is None else cu_seqlens_cpu), None
        varlen = True
    else:
        varlen = cu_seqlens is not None or cu_seqlens_cpu is not None
    if varlen and batch != 1:
        raise ValueError(f"q: batch size must be 1 with cu_seqlens (packed sequences), got {batch}")
    if chunk_indices is not None and (chunk_indices.dim() != 2 or chunk_indices.shape[-1] != 2):
        raise ValueError(f"chunk_indices: expected shape [NT, 2], got {list(chunk_indices.shape)}")

    tables = None
    if not varlen:
        host_cu = list(range(0, (batch + 1) * seq_len, seq_len)) if seq_len > 0 else [0] * (batch + 1)
        tables = upload_chunk_metadata(host_cu, device, chunk_size=chunk_size, with_cu_seqlens=True)
        cu_seqlens = tables.cu_seqlens
    elif cu_seqlens_cpu is not None:
        tables = upload_chunk_metadata(cu_seqlens_cpu, device, chunk_size=chunk_size,
                                       with_cu_seqlens=cu_seqlens is None)
        if cu_seqlens is None:
            cu_seqlens = tables.cu_seqlens
    if tables is not None:
        options = options._replace(max_sequence_tokens=tables.max_sequence_tokens)
    num_sequences = cu_seqlens.shape[0] - 1

    if initial_state is not None and initial_state.shape[0] != num_sequences:
        raise ValueError(
            f"initial_state: {initial_state.shape[0]} states for {num_sequences} sequences (one per sequence)"
        )
    if out is None:
        out = torch.empty(v.shape, dtype=q.dtype, device=device)
    final_state = None
    if output_final_state:
        head_dim_v = v.shape[-1]
        state_shape = (heads, head_dim_v, head_dim_k) if state_v_first else (heads, head_dim_k, head_dim_v)
        final_state = torch.empty((num_sequences,) + state_shape, dtype=torch.float32, device=device)

    run_chunk_kda_on_tensors(
        options, q=q, k=k, v=v, g=g, beta=beta, o=out, cu_seqlens=cu_seqlens, A_log=contiguous_float32(A_log),
        dt_bias=contiguous_float32(dt_bias), initial_state=initial_state, final_state=final_state,
        chunk_indices=tables.chunk_indices if tables is not None else None,
        chunk_offsets=tables.chunk_offsets if tables is not None else None,
    )
    return out, final_state
