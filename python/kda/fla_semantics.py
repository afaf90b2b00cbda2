"""FLA's chunk_kda flags -> kda's options, with FLA's own rules and kda's limits.

Rules (flash-linear-attention fla/ops/kda/chunk.py and gate.py, forward pass):
  - use_gate_in_kernel=False: g is already the natural-log decay (GATE_PRECOMPUTED); A_log, dt_bias and
    lower_bound are then unused, as in FLA.
  - use_gate_in_kernel=True, lower_bound None: -exp(A_log) * softplus(g + dt_bias) (GATE_SOFTPLUS). FLA requires
    A_log here, and so does kda.
  - use_gate_in_kernel=True, lower_bound set: lower_bound * sigmoid(exp(A_log) * (g + dt_bias)), or without A_log
    lower_bound * sigmoid(g + dt_bias) (GATE_LOWER_BOUND). kda takes lower_bound in [-5, 0) only, the range FLA
    calls safe; FLA accepts others without safe_gate, kda cannot.
  - use_beta_sigmoid_in_kernel: beta = sigmoid(raw); with allow_neg_eigval, 2 * sigmoid(raw). allow_neg_eigval
    without it is an error in FLA too.
  - safe_gate only picks FLA's faster intra-chunk kernel for bounded gates; kda's result is the same function, so
    it is checked like FLA checks it and otherwise has no effect.
  - chunk_size 32 or 64, as FLA; scale None is K^-0.5.
FLA features kda does not have (per-chunk states h, context parallelism, FLA's graph mode) are refused by
reject_fla_only_options with a ValueError naming them.
"""

from __future__ import annotations

from . import _abi
from .chunk_kda_args import ChunkKdaOptions

LOWER_BOUND_RANGE = (-5.0, 0.0)

# FLA chunk_kda keywords kda does not implement, and why; refused unless left at FLA's default.
FLA_ONLY_OPTIONS = {
    "return_intermediate_states": "kda keeps no per-chunk states h in memory",
    "cp_context": "context parallelism across devices is not in kda",
    "use_graph": "FLA's fixed-shape graph mode is not in kda (kda's calls are graph-capturable as they are; graph "
    "buckets with padded cu_seqlens are issue 55 item 4)",
    "max_num_seqs": "it belongs to FLA's use_graph mode",
    "transpose_state_layout": "FLA's deprecated name; pass state_v_first",
}
# FLA keywords that only shape the backward pass: accepted, no effect on the forward output.
FLA_BACKWARD_ONLY_OPTIONS = ("disable_recompute",)


def reject_fla_only_options(options: dict):
    """Raises ValueError for FLA-only keywords given a non-default value, TypeError for unknown keywords."""
    for name, value in options.items():
        if name in FLA_BACKWARD_ONLY_OPTIONS:
            continue
        if name not in FLA_ONLY_OPTIONS:
            raise TypeError(f"chunk_kda() got an unexpected keyword argument '{name}'")
        if value is not None and value is not False:
            raise ValueError(f"{name}: not supported by kda ({FLA_ONLY_OPTIONS[name]})")


def fla_chunk_kda_options(
    *,
    scale=None,
    use_qk_l2norm_in_kernel=False,
    use_gate_in_kernel=False,
    use_beta_sigmoid_in_kernel=False,
    allow_neg_eigval=False,
    has_A_log=False,
    lower_bound=None,
    safe_gate=False,
    state_v_first=False,
    chunk_size=64,
    max_sequence_tokens=0,
) -> ChunkKdaOptions:
    """kda's options for FLA's flags, by the module's rules; ValueError names the flag kda or FLA refuses."""
    if chunk_size not in (32, 64):
        raise ValueError(f"chunk_size: must be 32 or 64 for KDA, got {chunk_size}")
    if allow_neg_eigval and not use_beta_sigmoid_in_kernel:
        raise ValueError("allow_neg_eigval: requires use_beta_sigmoid_in_kernel=True")
    if use_beta_sigmoid_in_kernel:
        beta_activation = _abi.BETA_SIGMOID_TIMES_TWO if allow_neg_eigval else _abi.BETA_SIGMOID
    else:
        beta_activation = _abi.BETA_NONE

    gate = _abi.GATE_PRECOMPUTED
    bound = -5.0
    if use_gate_in_kernel:
        if safe_gate and lower_bound is None:
            raise ValueError("lower_bound: must be set when safe_gate=True and use_gate_in_kernel=True")
        if lower_bound is None:
            if not has_A_log:
                raise ValueError("A_log: must be provided when use_gate_in_kernel=True and lower_bound is not set")
            gate = _abi.GATE_SOFTPLUS
        else:
            bound = float(lower_bound)
            low, high = LOWER_BOUND_RANGE
            if not (low <= bound < high):
                raise ValueError(f"lower_bound: must be in [-5, 0) for kda's lower-bound gate, got {lower_bound}")
            gate = _abi.GATE_LOWER_BOUND

    return ChunkKdaOptions(
        gate=gate,
        lower_bound=bound,
        beta_activation=beta_activation,
        qk_l2norm=bool(use_qk_l2norm_in_kernel),
        scale=scale,
        state_layout=_abi.STATE_V_FIRST if state_v_first else _abi.STATE_K_FIRST,
        chunk_size=chunk_size,
        max_sequence_tokens=max_sequence_tokens,
    )
