"""The float64 ground truth for the torch tests: KDA's token-by-token recurrence (KDA_SPEC section 4) and the gates
and beta activations of section 1, written independently of kda, plus FLA's error metric.

Every function takes and returns torch tensors and computes in float64 on the tensors' device.
"""

import torch
import torch.nn.functional as F


def softplus_gate(g, A_log, dt_bias):
    """-exp(A_log[h]) * softplus(g + dt_bias), softplus(x) = x above 20 (FLA's threshold)."""
    H, K = g.shape[-2:]
    x = g.double()
    if dt_bias is not None:
        x = x + dt_bias.double().view(H, K)
    soft = torch.where(x > 20, x, torch.log1p(torch.exp(torch.clamp(x, max=20))))
    return -torch.exp(A_log.double().view(H, 1)) * soft


def lower_bound_gate(g, A_log, dt_bias, lower_bound):
    """lower_bound * sigmoid(exp(A_log[h]) * (g + dt_bias)); without A_log, lower_bound * sigmoid(g + dt_bias)."""
    H, K = g.shape[-2:]
    x = g.double()
    if dt_bias is not None:
        x = x + dt_bias.double().view(H, K)
    if A_log is not None:
        x = torch.exp(A_log.double().view(H, 1)) * x
    return lower_bound * torch.sigmoid(x)


def recurrence(q, k, v, g, beta, *, scale, cu_seqlens, initial_state=None, l2norm=False):
    """o [T, H, V] and final states [N, H, K, V] of packed sequences, in float64.

    q, k: [T, H, K]; v: [T, H, V]; g: [T, H, K], the natural-log decay per step; beta: [T, H] after any
    activation; cu_seqlens: a list [N+1]; initial_state: [N, H, K, V] or None. Per step: S <- diag(exp(g_t)) S;
    v' = beta_t (v_t - S^T k_t); S <- S + k_t v'^T; o_t = S^T (scale q_t), q and k l2-normalised first with l2norm.
    """
    q, k, v, g, beta = (x.double() for x in (q, k, v, g, beta))
    if l2norm:
        q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6)
        k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    T, H, K = q.shape
    V = v.shape[-1]
    o = torch.zeros(T, H, V, dtype=torch.float64, device=q.device)
    finals = []
    for n in range(len(cu_seqlens) - 1):
        if initial_state is not None:
            S = initial_state[n].double().clone()
        else:
            S = torch.zeros(H, K, V, dtype=torch.float64, device=q.device)
        for t in range(cu_seqlens[n], cu_seqlens[n + 1]):
            S = S * torch.exp(g[t]).unsqueeze(-1)
            v_new = (v[t] - torch.einsum("hkv,hk->hv", S, k[t])) * beta[t].unsqueeze(-1)
            S = S + torch.einsum("hk,hv->hkv", k[t], v_new)
            o[t] = torch.einsum("hkv,hk->hv", S, q[t] * scale)
        finals.append(S)
    return o, torch.stack(finals) if finals else torch.zeros(0, H, K, V, dtype=torch.float64, device=q.device)


def relative_rms_error(reference, result):
    """FLA's assert_close metric: rms(reference - result) / rms(reference), or 0 where the largest absolute error is
    at most 1e-6."""
    reference, result = reference.double(), result.double()
    if (reference - result).abs().max().item() <= 1e-6:
        return 0.0
    return ((reference - result).pow(2).mean().sqrt() / reference.pow(2).mean().sqrt()).item()


def fla_inputs(B, T, H, K, V, dtype, *, gate_logit_normalizer=1.0, mask_zero_p=0.0, mask_large_p=0.0, seed=42,
               device="cuda"):
    """FLA test_kda.py's inputs: q, k, v uniform in [0, 1); g = logsigmoid(randn) / normalizer with a share of
    entries set to 0 (no decay) and another share to -1000 (full decay); beta = sigmoid(randn); h0 randn fp32."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    q = torch.rand(B, T, H, K, generator=gen).to(dtype)
    k = torch.rand(B, T, H, K, generator=gen).to(dtype)
    v = torch.rand(B, T, H, V, generator=gen).to(dtype)
    g = F.logsigmoid(torch.randn(B, T, H, K, generator=gen)) / gate_logit_normalizer
    u = torch.rand(B, T, H, K, generator=gen)
    g = torch.where(u < mask_zero_p, torch.zeros_like(g), g)
    g = torch.where((u >= mask_zero_p) & (u < mask_zero_p + mask_large_p), torch.full_like(g, -1000.0), g)
    beta = torch.randn(B, T, H, generator=gen).sigmoid().to(dtype)
    h0 = torch.randn(B, H, K, V, generator=gen)
    return tuple(x.to(device) for x in (q, k, v, g, beta, h0))
