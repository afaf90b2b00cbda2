"""Framework-free descriptions of tensors, and the layout rules kda's C ABI puts on them.

Rule: the argument translation (chunk_kda_args.py) sees tensors only as TensorDescription values (address, shape,
strides in elements, dtype name, device name), so it can be tested without torch and reused by any framework that
can say where its memory is. The torch layer makes them with torch_tensors.describe.

A "token-major view" is what kda_tensor_view can express: the tensor's leading dimensions flatten into one token
axis with a single stride, then a head axis, then a contiguous innermost axis (absent for beta). Tokens and heads
must not overlap, in either order (the C ABI accepts token-major and head-major views alike).
"""

from __future__ import annotations

from dataclasses import dataclass

DTYPE_ITEMSIZE = {
    "bfloat16": 2,
    "float16": 2,
    "float32": 4,
    "float64": 8,
    "int32": 4,
    "int64": 8,
    "uint8": 1,
    "bool": 1,
}


@dataclass(frozen=True)
class TensorDescription:
    """Where a tensor's elements are: element i (a tuple) is at data_ptr + sum(i[d] * strides[d]) * itemsize.

    dtype is a name from DTYPE_ITEMSIZE (others may appear and are rejected where they matter); device is the
    framework's device name, "cpu" for host memory ("cuda:0" and the like otherwise).
    """

    data_ptr: int
    shape: tuple
    strides: tuple
    dtype: str
    device: str

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def numel(self):
        n = 1
        for size in self.shape:
            n *= size
        return n

    def is_contiguous(self):
        """Dense row-major (dimensions of size 1 may have any stride, as in torch)."""
        expected = 1
        for size, stride in zip(reversed(self.shape), reversed(self.strides)):
            if size != 1 and stride != expected:
                return False
            expected *= size
        return True


def flattened_token_stride(shape, strides):
    """The stride between consecutive tokens when the dimensions `shape` (the leading, token dimensions) flatten
    into one axis: an int, None when there is at most one token (any stride serves), or False when they do not
    flatten (e.g. a batch slice of a longer buffer)."""
    token_stride = None
    inner_tokens = 1
    for size, stride in zip(reversed(shape), reversed(strides)):
        if size == 1:
            continue
        if token_stride is None:
            token_stride = stride
        elif stride != token_stride * inner_tokens:
            return False
        inner_tokens *= size
    return token_stride


def _views_do_not_overlap(tokens, heads, dim, token_stride, head_stride):
    if token_stride < 0 or head_stride < 0:
        return False
    if head_stride >= dim and token_stride >= (heads - 1) * head_stride + dim:
        return True  # token-major
    return token_stride >= dim and head_stride >= (tokens - 1) * token_stride + dim  # head-major


def token_head_strides(desc: TensorDescription, has_inner_dim: bool = True):
    """(token_stride, head_stride) of the view [tokens, H, D] (has_inner_dim) or [tokens, H] (beta), or None when
    the tensor is no token-major view. Strides that do not matter (one head, at most one token) are given their
    dense values, since the C ABI checks them anyway."""
    lead = desc.ndim - (2 if has_inner_dim else 1)
    if lead < 0:
        return None
    heads = desc.shape[lead]
    dim = desc.shape[-1] if has_inner_dim else 1
    if has_inner_dim and dim > 1 and desc.strides[-1] != 1:
        return None
    head_stride = desc.strides[lead] if heads > 1 else dim
    token_stride = flattened_token_stride(desc.shape[:lead], desc.strides[:lead])
    if token_stride is False:
        return None
    tokens = 1
    for size in desc.shape[:lead]:
        tokens *= size
    if token_stride is None or tokens <= 1:
        token_stride = (heads - 1) * head_stride + dim
    if tokens > 0 and heads > 0 and not _views_do_not_overlap(tokens, heads, dim, token_stride, head_stride):
        return None
    return token_stride, head_stride
