"""FLA's chunk_kda flags map onto kda's codes by FLA's rules; what FLA refuses or kda lacks is a named error."""

import pytest

from kda import _abi
from kda.fla_semantics import fla_chunk_kda_options, reject_fla_only_options


def test_defaults_are_flas_precomputed_gate_and_raw_beta():
    o = fla_chunk_kda_options()
    assert o.gate == _abi.GATE_PRECOMPUTED
    assert o.beta_activation == _abi.BETA_NONE
    assert o.qk_l2norm is False
    assert o.scale is None
    assert o.state_layout == _abi.STATE_K_FIRST
    assert o.chunk_size == 64


def test_gate_in_kernel_without_lower_bound_is_softplus_and_needs_A_log():
    assert fla_chunk_kda_options(use_gate_in_kernel=True, has_A_log=True).gate == _abi.GATE_SOFTPLUS
    with pytest.raises(ValueError, match=r"^A_log: must be provided when use_gate_in_kernel=True"):
        fla_chunk_kda_options(use_gate_in_kernel=True, has_A_log=False)


def test_gate_in_kernel_with_lower_bound_is_the_lower_bound_gate_with_or_without_A_log():
    for has_A_log in (True, False):
        o = fla_chunk_kda_options(use_gate_in_kernel=True, lower_bound=-3.5, has_A_log=has_A_log)
        assert o.gate == _abi.GATE_LOWER_BOUND and o.lower_bound == -3.5


@pytest.mark.parametrize("bound", [-5.0001, 0.0, 0.5, -10.0, float("nan")])
def test_lower_bound_outside_kdas_range_is_refused(bound):
    with pytest.raises(ValueError, match=r"^lower_bound: must be in \[-5, 0\)"):
        fla_chunk_kda_options(use_gate_in_kernel=True, lower_bound=bound, has_A_log=True)


def test_without_gate_in_kernel_lower_bound_and_A_log_do_not_matter():
    o = fla_chunk_kda_options(use_gate_in_kernel=False, lower_bound=-10.0, has_A_log=False)
    assert o.gate == _abi.GATE_PRECOMPUTED


def test_safe_gate_needs_lower_bound_with_gate_in_kernel():
    with pytest.raises(ValueError, match=r"^lower_bound: must be set when safe_gate=True"):
        fla_chunk_kda_options(use_gate_in_kernel=True, safe_gate=True, has_A_log=True)
    assert fla_chunk_kda_options(use_gate_in_kernel=True, safe_gate=True, lower_bound=-5).gate == _abi.GATE_LOWER_BOUND


def test_beta_activation():
    assert fla_chunk_kda_options(use_beta_sigmoid_in_kernel=True).beta_activation == _abi.BETA_SIGMOID
    o = fla_chunk_kda_options(use_beta_sigmoid_in_kernel=True, allow_neg_eigval=True)
    assert o.beta_activation == _abi.BETA_SIGMOID_TIMES_TWO
    with pytest.raises(ValueError, match=r"^allow_neg_eigval: requires use_beta_sigmoid_in_kernel=True"):
        fla_chunk_kda_options(allow_neg_eigval=True)


def test_other_flags_pass_through():
    o = fla_chunk_kda_options(use_qk_l2norm_in_kernel=True, scale=0.1, state_v_first=True, chunk_size=32,
                              max_sequence_tokens=16)
    assert (o.qk_l2norm, o.scale, o.state_layout, o.chunk_size, o.max_sequence_tokens) == (
        True, 0.1, _abi.STATE_V_FIRST, 32, 16)
    with pytest.raises(ValueError, match=r"^chunk_size: must be 32 or 64"):
        fla_chunk_kda_options(chunk_size=16)


@pytest.mark.parametrize("name, value", [("return_intermediate_states", True), ("use_graph", True),
                                         ("cp_context", object()), ("max_num_seqs", 8),
                                         ("transpose_state_layout", True)])
def test_fla_features_kda_lacks_are_named(name, value):
    with pytest.raises(ValueError, match=rf"^{name}: not supported by kda"):
        reject_fla_only_options({name: value})
    reject_fla_only_options({name: None if name != "use_graph" else False})  # FLA's defaults are fine


def test_backward_only_flags_are_accepted_and_unknown_keywords_are_type_errors():
    reject_fla_only_options({"disable_recompute": True})
    with pytest.raises(TypeError, match="unexpected keyword argument 'use_magic'"):
        reject_fla_only_options({"use_magic": True})
