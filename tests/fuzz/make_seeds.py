#!/usr/bin/env python3
"""Writes the hand-made seed corpora of the kda fuzz targets (tests/fuzz/corpus/<target>/<name>).

Each seed is a readable request encoded in the byte layout its target documents at the top of its source
(little-endian, read front to back, zeros past the end). Run from anywhere; rewrites the seed files in place:
    python3 tests/fuzz/make_seeds.py
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
I64_MAX = 2**63 - 1


def u8(v): return struct.pack("<B", v & 0xFF)
def u16(v): return struct.pack("<H", v & 0xFFFF)
def u32(v): return struct.pack("<I", v & 0xFFFFFFFF)
def i8(v): return struct.pack("<b", v)
def i32(v): return struct.pack("<i", v)
def i64(v): return struct.pack("<q", v)


# ---- fuzz_chunk_metadata -----------------------------------------------------------------------------------------
CHUNK = {16: 0, 32: 1, 64: 2}


def meta_seed(cu_steps, chunk=64, cu64=False, out64=False, t_mode=1, t_payload=b"", cap_mode=0, first=None,
              raw_chunk=None, bogus_cu=None, bogus_out=None, cu_null=False, neg_n=None, cap_payload=b"",
              helpers=b""):
    """cu_steps: one (kind, payload) per sequence, as next_cu_value reads them; first: (kind, payload) for cu[0]."""
    flags = (3 if raw_chunk is not None else CHUNK[chunk]) | (4 if cu64 else 0) | (8 if out64 else 0)
    flags |= (16 if bogus_cu is not None else 0) | (32 if bogus_out is not None else 0)
    flags |= (64 if cu_null else 0) | (128 if neg_n is not None else 0)
    b = u8(flags)
    if raw_chunk is not None: b += i32(raw_chunk)
    if bogus_cu is not None: b += u8(bogus_cu)
    if bogus_out is not None: b += u8(bogus_out[0]) + u8(bogus_out[1])
    b += u16(len(cu_steps))
    if neg_n is not None: b += u8(neg_n)
    b += u8(t_mode) + t_payload + u8(cap_mode)
    b += u8(0) if first is None else u8(0x80) + u8(first[0]) + first[1]
    for kind, payload in cu_steps:
        b += u8(kind) + payload
    return b + cap_payload + helpers


def add(n): return (0, u8(n))          # cu += n (n < 256)
def add16(n): return (1, u16(n))       # cu += n (n < 65536)
def same(): return (2, b"")            # zero-length sequence
def chunks(c): return (3, u8(c))       # cu += 16 * (c % 5)
def raw(v, cu64): return (4, i64(v) if cu64 else i32(v))
def down(n): return (5, u8(n - 1))     # cu -= n
def near_max(d): return (6, u8(d))     # cu = type max - d
def add32(n): return (7, u32(n))


def helpers(lengths, chunk=64, out64=False, decodes=0, spec_n=0, spec_k=0, spec_k_mode=0, neg_decodes=None,
            neg_spec=None):
    """The batch-helper section: lengths as (kind, payload) pairs."""
    mode = {16: 0, 32: 1, 64: 2, 48: 3}[chunk] | (4 if out64 else 0) | (8 if neg_decodes is not None else 0)
    mode |= (16 if neg_spec is not None else 0) | (spec_k_mode << 5)
    b = u8(mode) + u8(len(lengths))
    for kind, payload in lengths:
        b += u8(kind) + payload
    b += u8(neg_decodes) if neg_decodes is not None else u16(decodes)
    b += u8(neg_spec) if neg_spec is not None else u16(spec_n)
    b += i64(spec_k) if spec_k_mode == 2 else u8(spec_k)
    return b


def L8(n): return (0, u8(n))
def L16(n): return (1, u16(n))
def L64(n): return (2, i64(n))
def Lmax(d): return (3, u8(d))


META_SEEDS = {
    # vLLM-style int32 batch: 100, 0 (empty), 64 tokens; T known; exact capacity.
    "varlen_int32": meta_seed([add(100), same(), add(64)], helpers=helpers([L8(100), L8(0), L8(64)], decodes=3,
                                                                           spec_n=4, spec_k=5)),
    # int64 everywhere, chunk 16, many small sequences incl. decodes (1 token) and exact multiples of BT.
    "int64_chunk16": meta_seed([add(1), add(1), chunks(4), add(17), same(), add16(1000)], chunk=16, cu64=True,
                               out64=True, t_mode=0, helpers=helpers([L16(4097), L8(1)], chunk=16, out64=True)),
    # chunk 32, int64 cu into int32 tables, T unknown, spare capacity.
    "chunk32_spare_capacity": meta_seed([add(33), add(31), add(32)], chunk=32, cu64=True, t_mode=0, cap_mode=2,
                                        cap_payload=u8(7)),
    # Errors, one class each.
    "decreasing": meta_seed([add(10), down(3), add(5)], helpers=helpers([L64(-5)])),
    "cu0_nonzero": meta_seed([add(10)], first=(0, u8(1))),
    "total_tokens_mismatch": meta_seed([add(70)], t_mode=2, t_payload=i8(-1)),
    "int32_overflow": meta_seed([add32(2**31 - 100), add(200)], cu64=True, t_mode=0,
                                helpers=helpers([Lmax(0), L8(1)], out64=False)),
    "int64_near_max": meta_seed([near_max(0)], cu64=True, out64=True, t_mode=0, cap_mode=3, cap_payload=i64(10),
                                helpers=helpers([L8(1)], spec_n=3, spec_k=1, spec_k_mode=3)),
    "capacity_too_small": meta_seed([add(200)], cap_mode=1, cap_payload=u8(0)),
    "null_outputs": meta_seed([add(1)], cap_mode=4 | 8 | 16),
    "bad_chunk_size": meta_seed([add(5)], raw_chunk=48, helpers=helpers([L8(5)], chunk=48)),
    "bad_enums": meta_seed([add(5)], bogus_cu=5, bogus_out=(3, 1)),
    "null_cu": meta_seed([add(5)], cu_null=True),
    "negative_n": meta_seed([add(5)], neg_n=0, helpers=helpers([], neg_decodes=2, neg_spec=0)),
    "negative_total": meta_seed([add(5)], t_mode=3, t_payload=i64(-2)),
    "raw_values": meta_seed([raw(-7, True), raw(I64_MAX, True), raw(3, True)], cu64=True, t_mode=3,
                            t_payload=i64(I64_MAX), cap_mode=3, cap_payload=i64(-1)),
    "pack_misaligned": meta_seed([add(80)], cap_mode=32),
    "pack_short_staging": meta_seed([add(80), add(3)], out64=True, cap_mode=64, cap_payload=u8(2)),
    "empty_batch": meta_seed([], t_mode=1),
    "all_empty_sequences": meta_seed([same(), same(), same()], cap_mode=4),
    "helpers_overflow": meta_seed([add(1)], helpers=helpers([Lmax(0), Lmax(0)], spec_n=2, spec_k=I64_MAX // 2 + 1,
                                                            spec_k_mode=2)),
}

# ---- fuzz_validation ---------------------------------------------------------------------------------------------
# Selector indices into the interesting-value lists of fuzz_validation.cpp (anything past a list reads a raw value).
SEQS = {1: 0, 2: 1, 0: 2, 3: 3, 7: 4, 64: 5, 1000: 6, 65536: 7, 2**30 - 1: 8, 2**30: 9, 2**31: 10, -1: 11,
        I64_MAX: 12}
TOKENS = {64: 0, 1: 1, 0: 2, 15: 3, 16: 4, 63: 5, 65: 6, 1000: 7, 4096: 8, 32768: 9, 2**31: 10, 2**36: 11,
          2**36 - 1: 12, -1: 13, I64_MAX: 14}
HEADS = {4: 0, 1: 1, 2: 2, 32: 3, 64: 4, 4096: 5, 4097: 6, 0: 7, -1: 8, 65535: 9, 65536: 10}
DIMS = {128: 0, 64: 1, 256: 2, 0: 3, 32: 4, 512: 5, -64: 6, 96: 7, 16: 8}
CHUNKS = {64: 0, 32: 1, 16: 2, 0: 3, 128: 4, -64: 5, 1: 6, 48: 7}
ENUM = {0: 0, 1: 1, 2: 2, 3: 3, -1: 4, 255: 5}
LOWER = {-5.0: 0, -1.0: 1, 0.0: 4, "nan": 6}
SCALE = {0.0: 0, 0.125: 1, 1.0: 2, -1.0: 3, "nan": 4, "inf": 5}
IDX = {0: 0, 1: 1, 2: 2, -1: 3}

# Bits of the u32 `nulls` word.
NULL_CU, NULL_Q, NULL_K, NULL_V, NULL_G, NULL_BETA, NULL_O, NULL_ALOG, NULL_DTBIAS = range(9)
INITIAL, FINAL, FINAL_IS_INITIAL, STATE_INDICES, HAS_INITIAL, CHUNK_INDICES, CHUNK_OFFSETS, NO_L2NORM, O_IS_V, O_IS_Q \
    = range(9, 19)


def bits(*names):
    return sum(1 << n for n in names)


def pick(table, value):
    return u8(table[value])


def val_seed(N=1, T=64, H=4, K=128, V=128, BT=64, dtype=0, g_type=0, beta_type=0, gate=1, beta_act=1, layout=0,
             lower=-5.0, scale=0.0, nulls=0, idx=(0, 0, 0, 0), nt_mode=b"\x04", pool_mode=b"\x00",
             strides=(b"\x00",) * 6):
    b = pick(SEQS, N) + pick(TOKENS, T) + pick(HEADS, H) + pick(DIMS, K) + pick(DIMS, V) + pick(CHUNKS, BT)
    b += pick(ENUM, dtype) + pick(ENUM, g_type) + pick(ENUM, beta_type) + pick(ENUM, gate) + pick(ENUM, beta_act)
    b += pick(ENUM, layout) + pick(LOWER, lower) + pick(SCALE, scale) + u32(nulls)
    b += b"".join(pick(IDX, t) for t in idx) + nt_mode + pool_mode + b"".join(strides)
    return b


CONTIGUOUS = b"\x00"
def fused(k): return u8(1) + u8(k - 2)       # token stride = k * H * D (a view into a fused projection)
HEADS_OVERLAP = u8(2) + u8(0)
TOKENS_OVERLAP = u8(3) + u8(0)
HEAD_MAJOR = u8(4)
def huge(p): return u8(5) + u8(p - 30)       # head stride 2^p
def raw_strides(ts, hs): return u8(7) + i64(ts) + i64(hs)

VALIDATION_SEEDS = {
    "default_bf16": val_seed(),
    # vLLM: o aliases v, an in-place state pool with slot indices, host tables, fused qkv views.
    "vllm_like": val_seed(N=7, T=1000, H=32, nulls=bits(INITIAL, FINAL_IS_INITIAL, STATE_INDICES, HAS_INITIAL,
                                                          CHUNK_INDICES, CHUNK_OFFSETS, O_IS_V),
                          layout=1, nt_mode=u8(6) + u8(2), pool_mode=u8(3) + u8(9), strides=(fused(3),) * 3 +
                          (CONTIGUOUS,) * 3),
    "empty_batch_nulls": val_seed(N=0, T=0, nulls=bits(NULL_Q, NULL_K, NULL_V, NULL_G, NULL_BETA, NULL_O)),
    "lower_bound_gate": val_seed(gate=2, lower=-5.0, nulls=bits(NULL_ALOG), beta_act=2),
    "lower_bound_zero": val_seed(gate=2, lower=0.0),
    "softplus_no_alog": val_seed(gate=1, nulls=bits(NULL_ALOG)),
    "fp16_k256_v64_bt32": val_seed(K=256, V=64, BT=32, dtype=1, g_type=2, beta_type=1, nulls=bits(NO_L2NORM),
                                   scale=0.125),
    "head_major_strides": val_seed(strides=(HEAD_MAJOR,) + (CONTIGUOUS,) * 5),
    "overlapping_strides": val_seed(strides=(CONTIGUOUS, HEADS_OVERLAP, TOKENS_OVERLAP) + (CONTIGUOUS,) * 3),
    "huge_strides": val_seed(T=65, strides=(huge(50), huge(62), raw_strides(2**62, 2**40)) + (CONTIGUOUS,) * 3),
    "max_heads_long": val_seed(N=1000, T=2**31, H=4096, K=256, V=256),
    "too_many_chunks": val_seed(N=2**30, T=2**36),
    "bad_enums": val_seed(dtype=2, gate=3, beta_act=-1, layout=255, g_type=3, beta_type=-1, idx=(2, -1, 2, -1)),
    "bad_sizes": val_seed(H=0, K=96, V=512, BT=16),
    "tables_inconsistent": val_seed(N=3, T=4096, nulls=bits(CHUNK_INDICES), nt_mode=u8(2)),
    "tables_nt_low": val_seed(N=3, T=4096, nulls=bits(CHUNK_INDICES, CHUNK_OFFSETS), nt_mode=u8(3)),
    "state_indices_without_pool": val_seed(nulls=bits(STATE_INDICES), pool_mode=u8(5) + i64(-1)),
    "pool_too_small": val_seed(N=64, T=4096, nulls=bits(INITIAL), pool_mode=u8(2)),
    "nan_scale_o_is_q": val_seed(scale="nan", nulls=bits(O_IS_Q, NO_L2NORM), K=64, V=64),
    "huge_n": val_seed(N=I64_MAX, T=64, H=1, V=64),
}


def write(target, seeds):
    out = os.path.join(HERE, "corpus", target)
    os.makedirs(out, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print(f"{target}: {len(seeds)} seeds in {os.path.relpath(out)}")


if __name__ == "__main__":
    write("fuzz_chunk_metadata", META_SEEDS)
    write("fuzz_validation", VALIDATION_SEEDS)
