#!/usr/bin/env python3
"""Host time per call of the Python entry points against the bare C ABI call, on a GPU machine with torch.

    KDA_LIBRARY=build/capi/libkda_capi.so PYTHONPATH=python python3 scripts/python_host_overhead.py

Host time is the wall time of the Python call alone (the GPU runs asynchronously); the stream is synchronised
every `--sync-every` calls, outside the timed region, so the launch queue never fills and blocks a call. Prints
the median over all calls for each form, for one small batch (its GPU time does not matter here).
"""

import argparse
import ctypes
import statistics
import time

import torch

import kda
from kda._library import library
from kda.chunk_kda_args import ChunkKdaTensors, make_chunk_kda_args
from kda.fla_semantics import fla_chunk_kda_options
from kda.torch_tensors import describe, workspace_bytes


def host_times_us(call, calls, sync_every):
    times = []
    for i in range(calls):
        if i % sync_every == 0:
            torch.cuda.synchronize()
        start = time.perf_counter_ns()
        call()
        times.append((time.perf_counter_ns() - start) / 1000.0)
    torch.cuda.synchronize()
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=1024)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--sync-every", type=int, default=50)
    a = parser.parse_args()

    T, H, D = a.tokens, a.heads, 128
    dev = "cuda"
    q, k, v = (torch.randn(1, T, H, D, device=dev, dtype=torch.bfloat16) for _ in range(3))
    g = torch.randn(1, T, H, D, device=dev)
    beta = torch.randn(1, T, H, device=dev)
    A_log = torch.randn(H, device=dev)
    dt_bias = torch.randn(H * D, device=dev)
    h0 = torch.randn(1, H, D, D, device=dev)
    cu = torch.tensor([0, T], dtype=torch.int32, device=dev)
    flags = dict(use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True)

    # The bare C ABI call: struct and workspace prepared once, only kda_chunk_kda_fwd timed.
    o = torch.empty_like(v)
    options = fla_chunk_kda_options(has_A_log=True, **flags)
    tensors = ChunkKdaTensors(q=describe(q), k=describe(k), v=describe(v), g=describe(g), beta=describe(beta),
                              o=describe(o), cu_seqlens=describe(cu), A_log=describe(A_log),
                              dt_bias=describe(dt_bias), initial_state=describe(h0), final_state=describe(h0))
    args = make_chunk_kda_args(tensors, options)
    nbytes = workspace_bytes(args)
    workspace = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    lib = library()
    stream = torch.cuda.current_stream().cuda_stream
    args_ref = ctypes.byref(args)

    def bare():
        lib.kda_chunk_kda_fwd(args_ref, workspace.data_ptr(), nbytes, stream)

    def functional():
        kda.chunk_kda(q, k, v, g, beta, initial_state=h0, output_final_state=True, A_log=A_log, dt_bias=dt_bias,
                      cu_seqlens=cu, **flags)

    def functional_host_tables():
        kda.chunk_kda(q, k, v, g, beta, initial_state=h0, output_final_state=True, A_log=A_log, dt_bias=dt_bias,
                      cu_seqlens=cu, cu_seqlens_cpu=[0, T], **flags)

    pool = h0.clone()
    out = torch.empty_like(v)

    def engine():
        kda.chunk_kda_with_state_pool(q[0], k[0], v[0], g[0], beta[0], out[0], cu, state_pool=pool, A_log=A_log,
                                      dt_bias=dt_bias, **flags)

    forms = [("C ABI call alone", bare), ("kda.chunk_kda (device-derived tables)", functional),
             ("kda.chunk_kda (cu_seqlens_cpu: host tables)", functional_host_tables),
             ("kda.chunk_kda_with_state_pool (custom op)", engine)]
    with torch.no_grad():
        for _, call in forms:
            for _ in range(20):
                call()  # warm-up: library load, op registration, allocator caches
        results = [(name, host_times_us(call, a.calls, a.sync_every)) for name, call in forms]
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, T={T}, H={H}, K=V={D}, bf16, "
          f"{a.calls} calls, median host time per call")
    base = results[0][1]
    for name, us in results:
        print(f"  {name:48s} {us:8.1f} us   (+{us - base:.1f} us over the C ABI call)")


if __name__ == "__main__":
    main()
