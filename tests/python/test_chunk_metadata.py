"""The host metadata builder through the C ABI, against a brute-force Python loop over the definition:
chunk_indices rows (n, c) sequence-major with c < ceil(len_n / BT), chunk_offsets the running chunk count."""

import random

import numpy as np
import pytest

import kda
from kda.errors import KdaInvalidArgumentError


def brute_force_tables(cu, chunk_size):
    rows, offsets = [], [0]
    for n in range(len(cu) - 1):
        length = cu[n + 1] - cu[n]
        chunks = 0
        while chunks * chunk_size < length:  # ceil(length / BT) by counting, not by formula
            rows.append((n, chunks))
            chunks += 1
        offsets.append(offsets[-1] + chunks)
    longest = max([cu[n + 1] - cu[n] for n in range(len(cu) - 1)], default=0)
    return rows, offsets, longest


def random_cu_seqlens(rng):
    kind = rng.choice(["prefill", "decode_mix", "spec", "zeros", "single"])
    if kind == "prefill":
        lengths = [rng.randint(0, 3000) for _ in range(rng.randint(1, 12))]
    elif kind == "decode_mix":
        lengths = [1] * rng.randint(0, 40) + [rng.randint(1, 2000) for _ in range(rng.randint(0, 5))]
    elif kind == "spec":
        lengths = [rng.choice([2, 4, 8, 16])] * rng.randint(1, 100)
    elif kind == "zeros":
        lengths = [rng.choice([0, 0, 1, 63, 64, 65, 128]) for _ in range(rng.randint(1, 20))]
    else:
        lengths = [rng.randint(0, 20000)]
    cu = [0]
    for length in lengths:
        cu.append(cu[-1] + length)
    return cu


@pytest.mark.parametrize("chunk_size", [16, 32, 64])
def test_builder_matches_brute_force_on_random_batches(chunk_size):
    rng = random.Random(1234 + chunk_size)
    for _ in range(400):
        cu = random_cu_seqlens(rng)
        rows, offsets, longest = brute_force_tables(cu, chunk_size)
        m = kda.build_chunk_metadata(cu, chunk_size)
        assert m.num_chunks == len(rows)
        assert m.chunk_indices.shape == (len(rows), 2)
        assert m.chunk_indices.tolist() == [list(r) for r in rows]
        assert m.chunk_offsets.tolist() == offsets
        assert m.max_sequence_tokens == longest
        assert kda.count_chunks(cu, chunk_size) == len(rows)
        assert kda.longest_sequence(cu) == longest


@pytest.mark.parametrize("index_dtype, numpy_dtype", [("int32", np.int32), ("int64", np.int64), (np.int64, np.int64)])
def test_output_index_dtype(index_dtype, numpy_dtype):
    m = kda.build_chunk_metadata([0, 70, 70, 200], 64, index_dtype=index_dtype)
    assert m.chunk_indices.dtype == numpy_dtype and m.chunk_offsets.dtype == numpy_dtype
    assert m.chunk_indices.tolist() == [[0, 0], [0, 1], [2, 0], [2, 1], [2, 2]]
    assert m.chunk_offsets.tolist() == [0, 2, 2, 5]


@pytest.mark.parametrize("make", [list, tuple, lambda v: np.array(v, dtype=np.int32),
                                  lambda v: np.array(v, dtype=np.int64), lambda v: np.array(v, dtype=np.uint16)])
def test_input_kinds_give_the_same_tables(make):
    cu = [0, 15, 100, 300, 1200, 2000]
    m = kda.build_chunk_metadata(make(cu), 64)
    rows, offsets, _ = brute_force_tables(cu, 64)
    assert m.chunk_indices.tolist() == [list(r) for r in rows]
    assert m.chunk_offsets.tolist() == offsets


def test_non_contiguous_numpy_input_is_read_correctly():
    backing = np.array([[0, -1], [64, -1], [64, -1], [200, -1]], dtype=np.int64)
    m = kda.build_chunk_metadata(backing[:, 0], 64)  # stride 2 elements
    assert m.chunk_offsets.tolist() == [0, 1, 1, 4]


def test_empty_batch_and_all_empty_sequences():
    m = kda.build_chunk_metadata([0], 64)
    assert m.num_chunks == 0 and m.chunk_indices.shape == (0, 2) and m.chunk_offsets.tolist() == [0]
    m = kda.build_chunk_metadata([0, 0, 0], 64)
    assert m.num_chunks == 0 and m.chunk_offsets.tolist() == [0, 0, 0] and m.max_sequence_tokens == 0


@pytest.mark.parametrize(
    "cu, position, message",
    [
        ([1, 5, 9], 0, "cu_seqlens[0] must be 0"),
        ([0, 100, 50, 200], 2, "cu_seqlens is decreasing"),
        ([0, 10, 9], 2, "cu_seqlens is decreasing"),
    ],
)
def test_bad_cu_seqlens_names_the_entry(cu, position, message):
    with pytest.raises(KdaInvalidArgumentError) as error:
        kda.build_chunk_metadata(cu, 64)
    assert message in str(error.value)
    assert f"at cu_seqlens[{position}]" in str(error.value)
    assert isinstance(error.value, ValueError)


def test_total_tokens_must_match_the_last_entry():
    with pytest.raises(KdaInvalidArgumentError, match=r"does not equal total_tokens.*at cu_seqlens\[2\]"):
        kda.build_chunk_metadata([0, 5, 9], 64, total_tokens=10)
    assert kda.build_chunk_metadata([0, 5, 9], 64, total_tokens=9).num_chunks == 2


def test_values_that_do_not_fit_int32_tables_are_refused():
    cu = [0, 2**31 + 5]
    with pytest.raises(KdaInvalidArgumentError, match="does not fit out_type"):
        kda.build_chunk_metadata(cu, 64, index_dtype="int32")
    assert kda.count_chunks(cu, 64) == (2**31 + 5 + 63) // 64  # int64 tables would take it


@pytest.mark.parametrize(
    "value, message",
    [
        (np.array([[0, 1], [2, 3]]), "cu_seqlens: expected a 1-D array"),
        ([[0, 1], [2, 3]], "cu_seqlens: expected a list, numpy array or CPU torch tensor of integers"),
        (np.array([0.0, 1.0]), "cu_seqlens: dtype float64 is not an integer type"),
        ([], "cu_seqlens: empty"),
        ([0, 2**64], "does not fit int64"),
        (5, "expected a list, numpy array or CPU torch tensor"),
    ],
)
def test_bad_inputs_are_named(value, message):
    with pytest.raises(ValueError, match=message):
        kda.build_chunk_metadata(value, 64)


def test_bad_chunk_size_and_index_dtype():
    with pytest.raises(KdaInvalidArgumentError, match="chunk_size must be 16, 32 or 64"):
        kda.build_chunk_metadata([0, 5], 48)
    with pytest.raises(ValueError, match="index_dtype: uint8 is not supported"):
        kda.build_chunk_metadata([0, 5], 64, index_dtype="uint8")


def test_torch_cpu_tensor_in_gives_torch_tensors_out():
    torch = pytest.importorskip("torch")
    cu = torch.tensor([0, 70, 70, 200], dtype=torch.int32)
    m = kda.build_chunk_metadata(cu, 64)
    assert isinstance(m.chunk_indices, torch.Tensor) and m.chunk_indices.dtype == torch.int32
    assert m.chunk_indices.tolist() == [[0, 0], [0, 1], [2, 0], [2, 1], [2, 2]]
    assert m.chunk_offsets.tolist() == [0, 2, 2, 5]
    assert kda.build_chunk_metadata(cu.to(torch.int64), 64, index_dtype=torch.int64).chunk_offsets.dtype == torch.int64
