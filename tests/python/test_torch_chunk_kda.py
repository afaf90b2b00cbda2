"""kda.chunk_kda and kda.chunk_kda_with_state_pool on a GPU, against the float64 recurrence (FLA's bar: relative RMS
error <= 5e-3 for o and the final state), plus the properties an engine relies on: bit-identical metadata paths,
strided inputs without copies, o written into v, the state pool updated in place, torch.compile and CUDA-graph
capture giving the same bits as eager calls. Marked gpu: ctest runs it as its own entry (label gpu).
"""

import os

import pytest

pytestmark = pytest.mark.gpu

if os.environ.get("KDA_REQUIRE_GPU") == "1":
    import torch  # a missing torch fails the gpu entry instead of skipping it

    assert torch.cuda.is_available(), "KDA_REQUIRE_GPU=1 but torch sees no CUDA device"
else:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device", allow_module_level=True)

import torch.nn.functional as F  # noqa: E402

import kda  # noqa: E402
from kda_torch_reference import (  # noqa: E402
    fla_inputs,
    lower_bound_gate,
    recurrence,
    relative_rms_error,
    softplus_gate,
)

TOLERANCE = 5e-3


def packed(x):
    """[B, T, ...] -> [B*T, ...]."""
    return x.reshape((-1,) + tuple(x.shape[2:]))


def equal_cu(B, T):
    return [b * T for b in range(B + 1)]


def assert_close(name, reference, result):
    error = relative_rms_error(reference, result)
    assert error <= TOLERANCE, f"{name}: relative RMS error {error:.2e} > {TOLERANCE}"


# ---- FLA's test_chunk cases: B equal sequences, a precomputed gate with masked entries -----------------------------


@pytest.mark.parametrize(
    "B, T, H, D, scale, normalizer, mask_zero, mask_large, l2norm_in_kernel, dtype",
    [
        (1, 63, 1, 64, 1.0, 1.0, 0.0, 0.0, False, torch.float16),
        (2, 500, 3, 64, 1.0, 1.0, 0.0, 0.0, False, torch.float16),
        (2, 1000, 3, 64, 0.1, 1.0, 0.5, 0.0, False, torch.float16),
        (3, 1024, 4, 128, 1.0, 0.1, 0.0, 0.0, False, torch.bfloat16),
        (4, 1024, 4, 128, 0.1, 1.0, 0.2, 0.1, False, torch.bfloat16),
        (4, 1024, 4, 128, 0.1, 1.0, 0.0, 0.05, True, torch.float16),
        (2, 777, 2, 256, 0.1, 1.0, 0.1, 0.1, True, torch.bfloat16),
    ],
)
def test_chunk_equal_length_batches(B, T, H, D, scale, normalizer, mask_zero, mask_large, l2norm_in_kernel, dtype):
    q, k, v, g, beta, h0 = fla_inputs(B, T, H, D, D, dtype, gate_logit_normalizer=normalizer,
                                      mask_zero_p=mask_zero, mask_large_p=mask_large)
    if not l2norm_in_kernel:
        q = F.normalize(q.float(), p=2, dim=-1).to(dtype)
        k = F.normalize(k.float(), p=2, dim=-1).to(dtype)
    with torch.no_grad():
        o, ht = kda.chunk_kda(q, k, v, g, beta, scale=scale, initial_state=h0, output_final_state=True,
                              use_qk_l2norm_in_kernel=l2norm_in_kernel)
    assert o.shape == v.shape and o.dtype == dtype and ht.shape == (B, H, D, D) and ht.dtype == torch.float32
    ref_o, ref_ht = recurrence(packed(q), packed(k), packed(v), packed(g), packed(beta), scale=scale,
                               cu_seqlens=equal_cu(B, T), initial_state=h0, l2norm=l2norm_in_kernel)
    assert_close("o", ref_o, packed(o))
    assert_close("ht", ref_ht, ht)


# ---- Gates and beta in the kernel ----------------------------------------------------------------------------------


@pytest.mark.parametrize("gate", ["softplus", "lower_bound", "lower_bound_without_A_log"])
@pytest.mark.parametrize("beta_kind", ["sigmoid", "sigmoid_times_two"])
def test_gates_and_beta_in_kernel(gate, beta_kind):
    B, T, H, D, dtype = 2, 300, 4, 128, torch.bfloat16
    q, k, v, _, _, h0 = fla_inputs(B, T, H, D, D, dtype, seed=7)
    gen = torch.Generator(device="cpu").manual_seed(8)
    g_raw = torch.randn(B, T, H, D, generator=gen).cuda()
    beta_raw = torch.randn(B, T, H, generator=gen).cuda().to(dtype)
    A_log = torch.log(torch.empty(1, 1, H, 1).uniform_(1, 16, generator=gen)).cuda()  # FLA's [1, 1, H, 1]
    dt_bias = torch.randn(H * D, generator=gen).cuda()
    lower_bound = None if gate == "softplus" else -5.0
    if gate == "lower_bound_without_A_log":
        A_log = None
    with torch.no_grad():
        o, ht = kda.chunk_kda(q, k, v, g_raw, beta_raw, initial_state=h0, output_final_state=True,
                              use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                              use_beta_sigmoid_in_kernel=True, allow_neg_eigval=beta_kind == "sigmoid_times_two",
                              A_log=A_log, dt_bias=dt_bias, lower_bound=lower_bound)
    if gate == "softplus":
        g_log = softplus_gate(g_raw, A_log, dt_bias)
    else:
        g_log = lower_bound_gate(g_raw, A_log, dt_bias, -5.0)
    beta = beta_raw.double().sigmoid() * (2.0 if beta_kind == "sigmoid_times_two" else 1.0)
    ref_o, ref_ht = recurrence(packed(q), packed(k), packed(v), packed(g_log), packed(beta), scale=D ** -0.5,
                               cu_seqlens=equal_cu(B, T), initial_state=h0, l2norm=True)
    assert_close("o", ref_o, packed(o))
    assert_close("ht", ref_ht, ht)


# ---- FLA's test_chunk_varlen cases ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "D, mask_zero, cu, dtype",
    [
        (64, 0.0, [0, 15], torch.float16),
        (64, 0.0, [0, 256, 500, 1000], torch.float16),
        (128, 0.5, [0, 256, 500, 1000], torch.float16),
        (128, 0.0, [0, 15, 100, 300, 1200, 2000], torch.bfloat16),
        (256, 0.0, [0, 100, 300, 1200, 3000, 4096], torch.float16),
        (128, 0.1, [0, 0, 1, 2, 70, 70, 200], torch.bfloat16),  # empty sequences and decodes mixed in
    ],
)
def test_chunk_varlen_both_metadata_paths(D, mask_zero, cu, dtype):
    H, T, N = 4, cu[-1], len(cu) - 1
    q, k, v, g, beta, _ = fla_inputs(1, T, H, D, D, dtype, mask_zero_p=mask_zero, mask_large_p=0.02)
    h0 = torch.randn(N, H, D, D, generator=torch.Generator().manual_seed(3)).cuda()
    cu_device = torch.tensor(cu, dtype=torch.int64, device="cuda")
    with torch.no_grad():
        derived = kda.chunk_kda(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                use_qk_l2norm_in_kernel=True, cu_seqlens=cu_device)
        host_built = kda.chunk_kda(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                   use_qk_l2norm_in_kernel=True, cu_seqlens=cu_device,
                                   cu_seqlens_cpu=torch.tensor(cu, dtype=torch.int32))
        cpu_only = kda.chunk_kda(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                 use_qk_l2norm_in_kernel=True, cu_seqlens=torch.tensor(cu))
    ref_o, ref_ht = recurrence(q[0], k[0], v[0], g[0], beta[0], scale=D ** -0.5, cu_seqlens=cu, initial_state=h0,
                               l2norm=True)
    assert_close("o", ref_o, derived[0][0])
    assert_close("ht", ref_ht, derived[1])
    # Device-derived and host-built tables run the same kernels: the same bits.
    assert torch.equal(derived[0], host_built[0]) and torch.equal(derived[1], host_built[1])
    assert torch.equal(derived[0], cpu_only[0]) and torch.equal(derived[1], cpu_only[1])


def test_chunk_size_32():
    q, k, v, g, beta, h0 = fla_inputs(2, 160, 2, 64, 64, torch.float16)
    with torch.no_grad():
        o, ht = kda.chunk_kda(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                              use_qk_l2norm_in_kernel=True, chunk_size=32)
    ref_o, ref_ht = recurrence(packed(q), packed(k), packed(v), packed(g), packed(beta), scale=64 ** -0.5,
                               cu_seqlens=equal_cu(2, 160), initial_state=h0, l2norm=True)
    assert_close("o", ref_o, packed(o))
    assert_close("ht", ref_ht, ht)


# ---- Layouts: V-first states, strided inputs, o into v, no state -------------------------------------------------


def test_state_v_first_is_the_transposed_k_first_state():
    q, k, v, g, beta, h0 = fla_inputs(2, 200, 3, 128, 64, torch.bfloat16)
    with torch.no_grad():
        o_k, ht_k = kda.chunk_kda(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                  use_qk_l2norm_in_kernel=True)
        o_v, ht_v = kda.chunk_kda(q, k, v, g, beta, initial_state=h0.transpose(-1, -2).contiguous(),
                                  output_final_state=True, use_qk_l2norm_in_kernel=True, state_v_first=True)
    assert ht_v.shape == (2, 3, 64, 128)
    assert_close("o", o_k, o_v)
    assert_close("ht", ht_k, ht_v.transpose(-1, -2))


def test_views_into_a_fused_projection_give_the_same_bits_as_copies():
    T, H, D = 300, 4, 128
    qkv = torch.rand(1, T, 3 * H * D, device="cuda").to(torch.bfloat16)
    q, k, v = (qkv[..., i * H * D:(i + 1) * H * D].view(1, T, H, D) for i in range(3))
    assert not q.is_contiguous()
    _, _, _, g, beta, h0 = fla_inputs(1, T, H, D, D, torch.bfloat16)
    with torch.no_grad():
        strided = kda.chunk_kda(q, k, v, g, beta, initial_state=h0, output_final_state=True,
                                use_qk_l2norm_in_kernel=True)
        copied = kda.chunk_kda(q.contiguous(), k.contiguous(), v.contiguous(), g, beta, initial_state=h0,
                               output_final_state=True, use_qk_l2norm_in_kernel=True)
        transposed_g = kda.chunk_kda(q, k, v, g.transpose(1, 2).contiguous().transpose(1, 2), beta,
                                     initial_state=h0, output_final_state=True, use_qk_l2norm_in_kernel=True)
    assert torch.equal(strided[0], copied[0]) and torch.equal(strided[1], copied[1])
    assert torch.equal(strided[0], transposed_g[0])  # a head-major g is read in place too


def test_out_may_be_v_and_inputs_that_need_a_copy_are_copied():
    q, k, v, g, beta, h0 = fla_inputs(1, 257, 2, 64, 64, torch.float16)
    with torch.no_grad():
        expected, _ = kda.chunk_kda(q, k, v, g, beta, initial_state=h0, use_qk_l2norm_in_kernel=True)
        v_buffer = v.clone()
        o, final = kda.chunk_kda(q, k, v_buffer, g, beta, initial_state=h0, use_qk_l2norm_in_kernel=True,
                                 out=v_buffer)
        # q with a non-unit innermost stride cannot be a kda view: it is copied, and the result is the same.
        q_odd = torch.stack([q, q], dim=-1)[..., 0]
        assert q_odd.stride(-1) == 2
        o_odd, _ = kda.chunk_kda(q_odd, k, v, g, beta, initial_state=h0, use_qk_l2norm_in_kernel=True)
    assert o.data_ptr() == v_buffer.data_ptr() and final is None
    assert torch.equal(o, expected)
    assert torch.equal(o_odd, expected)


def test_no_initial_state_is_a_zero_start():
    q, k, v, g, beta, _ = fla_inputs(2, 100, 2, 64, 64, torch.float16)
    with torch.no_grad():
        o, ht = kda.chunk_kda(q, k, v, g, beta, output_final_state=True, use_qk_l2norm_in_kernel=True)
        o0, ht0 = kda.chunk_kda(q, k, v, g, beta, initial_state=torch.zeros(2, 2, 64, 64, device="cuda"),
                                output_final_state=True, use_qk_l2norm_in_kernel=True)
    assert torch.equal(o, o0) and torch.equal(ht, ht0)


# ---- Calls kda refuses -----------------------------------------------------------------------------------------


def test_refusals_name_the_argument():
    q, k, v, g, beta, h0 = fla_inputs(1, 64, 2, 64, 64, torch.float16)
    with pytest.raises(ValueError, match=r"^q: dtype float32 is not supported"):
        kda.chunk_kda(q.float(), k.float(), v.float(), g, beta)
    with pytest.raises(ValueError, match=r"grouped value heads"):
        kda.chunk_kda(q, k, torch.cat([v, v], dim=2), torch.cat([g, g], dim=2), torch.cat([beta, beta], dim=2))
    with pytest.raises(ValueError, match=r"^q: head dim K=32 is not supported"):
        kda.chunk_kda(q[..., :32], k[..., :32], v, g[..., :32], beta)
    with pytest.raises(ValueError, match=r"^q: requires grad, but kda has no backward pass"):
        kda.chunk_kda(q.clone().requires_grad_(), k, v, g, beta)
    with pytest.raises(ValueError, match=r"^q: batch size must be 1 with cu_seqlens"):
        kda.chunk_kda(torch.cat([q, q]), k, v, g, beta, cu_seqlens=torch.tensor([0, 64], device="cuda"))
    with pytest.raises(ValueError, match=r"^initial_state: dtype bfloat16 is not supported"):
        kda.chunk_kda(q, k, v, g, beta, initial_state=h0.to(torch.bfloat16))
    with pytest.raises(ValueError, match=r"^return_intermediate_states: not supported by kda"):
        kda.chunk_kda(q, k, v, g, beta, return_intermediate_states=True)
    with pytest.raises(kda.KdaInvalidArgumentError, match=r"cu_seqlens is decreasing.*cu_seqlens\[2\]"):
        kda.chunk_kda(q, k, v, g, beta, cu_seqlens_cpu=[0, 40, 30, 64], cu_seqlens=torch.tensor([0, 40, 30, 64],
                                                                                                 device="cuda"))


# ---- The engine form -----------------------------------------------------------------------------------------------


def engine_batch(dtype=torch.bfloat16, D=128, H=4, seed=11):
    cu = [0, 1, 1, 130, 131, 400]  # a decode, an empty sequence, prefills
    T, N = cu[-1], len(cu) - 1
    q, k, v, g, beta, _ = fla_inputs(1, T, H, D, D, dtype, mask_large_p=0.02, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    pool = torch.randn(8, H, D, D, generator=gen).cuda()
    state_indices = torch.tensor([5, 0, -1, 2, 7], dtype=torch.int32, device="cuda")
    has_initial_state = torch.tensor([True, False, True, True, False], device="cuda")
    return dict(q=q[0], k=k[0], v=v[0], g=g[0], beta=beta[0], cu=cu, pool=pool, state_indices=state_indices,
                has_initial_state=has_initial_state, N=N, H=H, D=D)


def test_engine_form_reads_and_writes_the_pool_in_place():
    b = engine_batch()
    pool, before = b["pool"], b["pool"].clone()
    out = torch.empty_like(b["v"])
    cu_device = torch.tensor(b["cu"], dtype=torch.int32, device="cuda")
    with torch.no_grad():
        kda.chunk_kda_with_state_pool(b["q"], b["k"], b["v"], b["g"], b["beta"], out, cu_device, state_pool=pool,
                                      state_indices=b["state_indices"], has_initial_state=b["has_initial_state"],
                                      use_qk_l2norm_in_kernel=True)
    slots = b["state_indices"].tolist()
    starts = torch.stack([before[s] if (s >= 0 and h) else torch.zeros_like(before[0])
                          for s, h in zip(slots, b["has_initial_state"].tolist())])
    ref_o, ref_ht = recurrence(b["q"], b["k"], b["v"], b["g"], b["beta"], scale=b["D"] ** -0.5, cu_seqlens=b["cu"],
                               initial_state=starts, l2norm=True)
    assert_close("o", ref_o, out)
    for n, s in enumerate(slots):
        if s >= 0:
            assert_close(f"pool[{s}]", ref_ht[n], pool[s])
    untouched = [s for s in range(pool.shape[0]) if s not in slots]
    assert torch.equal(pool[untouched], before[untouched])  # slots no sequence names, and index -1, are left alone


def test_engine_form_matches_the_functional_form_bit_for_bit_with_o_in_v():
    b = engine_batch(dtype=torch.float16, D=64)
    cu_device = torch.tensor(b["cu"], dtype=torch.int64, device="cuda")
    identity = torch.arange(b["N"], dtype=torch.int64, device="cuda")
    with torch.no_grad():
        h0 = b["pool"][: b["N"]].clone()
        o_ref, ht_ref = kda.chunk_kda(b["q"][None], b["k"][None], b["v"][None], b["g"][None], b["beta"][None],
                                      initial_state=h0, output_final_state=True, cu_seqlens=cu_device,
                                      use_qk_l2norm_in_kernel=True)
        pool = h0.clone()
        v_buffer = b["v"].clone()
        tables = kda.upload_chunk_metadata(b["cu"], "cuda")
        kda.chunk_kda_with_state_pool(b["q"], b["k"], v_buffer, b["g"], b["beta"], v_buffer, cu_device,
                                      state_pool=pool, state_indices=identity, use_qk_l2norm_in_kernel=True,
                                      chunk_indices=tables.chunk_indices, chunk_offsets=tables.chunk_offsets,
                                      max_sequence_tokens=tables.max_sequence_tokens)
    assert torch.equal(v_buffer, o_ref[0])
    assert torch.equal(pool, ht_ref)


def _engine_call(b, out, pool, cu_device):
    kda.chunk_kda_with_state_pool(b["q"], b["k"], b["v"], b["g"], b["beta"], out, cu_device, state_pool=pool,
                                  state_indices=b["state_indices"], has_initial_state=b["has_initial_state"],
                                  use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, lower_bound=-5.0,
                                  use_beta_sigmoid_in_kernel=True)


def test_engine_op_under_torch_compile_gives_the_eager_bits():
    b = engine_batch()
    cu_device = torch.tensor(b["cu"], dtype=torch.int32, device="cuda")
    out_eager, pool_eager = torch.empty_like(b["v"]), b["pool"].clone()
    out_compiled, pool_compiled = torch.empty_like(b["v"]), b["pool"].clone()
    with torch.no_grad():
        _engine_call(b, out_eager, pool_eager, cu_device)
        compiled = torch.compile(lambda out, pool: _engine_call(b, out, pool, cu_device), fullgraph=True)
        compiled(out_compiled, pool_compiled)
    assert torch.equal(out_eager, out_compiled)
    assert torch.equal(pool_eager, pool_compiled)


def test_engine_op_replays_in_a_cuda_graph_with_the_eager_bits():
    b = engine_batch()
    cu_device = torch.tensor(b["cu"], dtype=torch.int32, device="cuda")
    start_pool = b["pool"].clone()
    out, pool = torch.empty_like(b["v"]), start_pool.clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(stream):
        _engine_call(b, out, pool, cu_device)  # warm-up outside the graph
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        _engine_call(b, out, pool, cu_device)
    for seed in (21, 22):
        fresh = engine_batch(seed=seed)
        for name in ("q", "k", "v", "g", "beta"):
            b[name].copy_(fresh[name])  # new contents, same buffers
        pool.copy_(start_pool)
        graph.replay()
        out_eager, pool_eager = torch.empty_like(out), start_pool.clone()
        with torch.no_grad():
            _engine_call(b, out_eager, pool_eager, cu_device)
        torch.cuda.synchronize()
        assert torch.equal(out, out_eager), seed
        assert torch.equal(pool, pool_eager), seed


def test_engine_op_has_a_fake_implementation():
    b = engine_batch()
    from torch._subclasses.fake_tensor import FakeTensorMode

    cu_real = torch.tensor(b["cu"], dtype=torch.int32, device="cuda")
    with FakeTensorMode() as mode:
        fake = {name: mode.from_tensor(b[name]) for name in ("q", "k", "v", "g", "beta", "pool")}
        out = torch.empty_like(fake["v"])
        cu_device = mode.from_tensor(cu_real)
        kda.chunk_kda_with_state_pool(fake["q"], fake["k"], fake["v"], fake["g"], fake["beta"], out, cu_device,
                                      state_pool=fake["pool"], use_qk_l2norm_in_kernel=True)
