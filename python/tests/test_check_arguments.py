"""The arguments every check_* shares, refused before any call: `trials`
below 1 (zero silently ran one trial), an empty `seeds` list (it ran no
case and reported FAIL) and a negative count (`trials`, `samples`,
`group`, `top_k`, an ulps count: PyO3's OverflowError) are each a
ValueError naming the argument, and the callable is never called.

The checks are found in the module (every name starting `check_`), so a
new check is covered as soon as MINIMAL names its required arguments:
test_every_check_is_listed fails until it does."""

import inspect

import pytest

import kernel_oracle as ko

CHECKS = sorted(n for n in dir(ko) if n.startswith("check_") and callable(getattr(ko, n)))

# The arguments each check requires besides its callable (its first
# argument), at values the check accepts.
MINIMAL = {
    "check_act_and_mul": {},
    "check_attention": {},
    "check_causal_conv1d_update": {},
    "check_concat_and_cache_mla": {},
    "check_fp8_block_gemm": {},
    "check_fp8_group_quant": {},
    "check_fp8_scaled_mm": {},
    "check_fp8_scaled_quant": {},
    "check_fused_moe_fp8": {},
    "check_gated_delta_rule": {},
    "check_int8_group_quant": {},
    "check_int8_quant": {},
    "check_int8_scaled_mm": {},
    "check_merge_attn_states": {},
    "check_moe_align_block_size": {},
    "check_moe_routing": {"top_k": 2},
    "check_mul_mat": {},
    "check_penalties": {},
    "check_rejection_sample": {},
    "check_reshape_and_cache": {},
    "check_rms_norm": {},
    "check_rms_norm_fp8_quant": {},
    "check_rotary_embedding": {},
    "check_sampling": {},
}

# Each check's count arguments besides `trials`, with the least value the
# shared conversion takes: 1 for a count that must be positive, 0 for one
# whose range the contract checks after it (an ulps count: the conversion
# rules out the sign only).
COUNTS = {
    "check_act_and_mul": {"act_ulps": 0},
    "check_fp8_group_quant": {"group": 1},
    "check_fp8_scaled_mm": {"promote": 1},
    "check_int8_group_quant": {"group_size": 1},
    "check_moe_routing": {"top_k": 1, "n_group": 1, "topk_group": 1, "exp_ulps": 0},
    "check_penalties": {"recip_ulps": 0},
    "check_rms_norm": {"rsqrt_ulps": 0},
    "check_rms_norm_fp8_quant": {"rsqrt_ulps": 0},
    "check_sampling": {"samples": 1, "exp_ulps": 0},
}

COUNT_CASES = sorted((c, a, least) for c, args in COUNTS.items() for a, least in args.items())


class Recorder:
    """A callable that records every call; with `interrupt`, it raises
    KeyboardInterrupt (which every check lets through) on the first."""

    def __init__(self, interrupt=False):
        self.calls = 0
        self.interrupt = interrupt
        self.__name__ = "recorder"

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.interrupt:
            raise KeyboardInterrupt("the callable was reached")


def refused(check, match, **kw):
    """Runs `check` with its minimal arguments and `kw`; asserts a
    ValueError whose message matches `match` and that the callable was
    never called."""
    f = Recorder()
    args = MINIMAL[check] | kw
    with pytest.raises(ValueError, match=match):
        getattr(ko, check)(f, verbose=False, **args)
    assert f.calls == 0, f"{check} called the callable {f.calls} time(s) before refusing {kw}"


def test_every_check_is_listed():
    assert len(CHECKS) >= 17
    assert set(CHECKS) == set(MINIMAL), (
        "a check_* without minimal arguments here is not covered: "
        f"missing {sorted(set(CHECKS) - set(MINIMAL))}, stale {sorted(set(MINIMAL) - set(CHECKS))}"
    )
    assert set(COUNTS) <= set(CHECKS)


@pytest.mark.parametrize("check", CHECKS)
def test_every_check_takes_seeds_and_trials(check):
    params = inspect.signature(getattr(ko, check)).parameters
    assert params["seeds"].default is None
    assert params["trials"].default == 1


@pytest.mark.parametrize("check", CHECKS)
def test_every_integer_argument_is_a_listed_count(check):
    # An argument with an int default (not a bool) is a count: it must go
    # through the shared conversion and be listed in COUNTS (or be trials).
    params = inspect.signature(getattr(ko, check)).parameters
    ints = {n for n, p in params.items()
            if type(p.default) is int and n != "trials"}
    assert ints <= set(COUNTS.get(check, {})), f"{check}: unlisted counts {ints}"


@pytest.mark.parametrize("check", CHECKS)
def test_the_minimal_arguments_reach_the_callable(check):
    # The control for the tests below: with the minimal arguments and
    # valid shared ones, the check calls the callable (which interrupts
    # it), so their ValueError comes from the argument under test.
    f = Recorder(interrupt=True)
    with pytest.raises(KeyboardInterrupt):
        getattr(ko, check)(f, verbose=False, trials=1, **MINIMAL[check])
    assert f.calls == 1


@pytest.mark.parametrize("check", CHECKS)
def test_trials_zero_is_refused_before_any_call(check):
    refused(check, r"^trials must be at least 1, got 0$", trials=0)


@pytest.mark.parametrize("check", CHECKS)
def test_negative_trials_are_refused_before_any_call(check):
    refused(check, r"^trials must be at least 1, got -1$", trials=-1)
    refused(check, r"^trials must be at least 1, got -9223372036854775808$", trials=-(2**63))


@pytest.mark.parametrize("check", CHECKS)
def test_trials_are_checked_even_when_seeds_are_given(check):
    refused(check, r"^trials must be at least 1, got 0$", trials=0, seeds=[1])


@pytest.mark.parametrize("check", CHECKS)
def test_an_empty_seeds_list_is_refused_before_any_call(check):
    refused(check, r"^seeds must name at least one seed", seeds=[])


@pytest.mark.parametrize("check", CHECKS)
def test_an_empty_arms_list_is_refused_before_any_call(check):
    if "arms" in inspect.signature(getattr(ko, check)).parameters:
        refused(check, r"^arms must name at least one arm", arms=[])


@pytest.mark.parametrize("check,arg,least", COUNT_CASES)
def test_a_negative_count_is_a_value_error_naming_it(check, arg, least):
    params = inspect.signature(getattr(ko, check)).parameters
    assert arg in params
    want = (rf"^{arg} must not be negative, got -1$" if least == 0
            else rf"^{arg} must be at least 1, got -1$")
    refused(check, want, **{arg: -1})


@pytest.mark.parametrize("check,arg", [(c, a) for c, a, least in COUNT_CASES if least == 1])
def test_a_zero_count_that_must_be_positive_is_a_value_error_naming_it(check, arg):
    refused(check, rf"^{arg} must be at least 1, got 0$", **{arg: 0})


@pytest.mark.parametrize("check,arg", [(c, a) for c, a, least in COUNT_CASES if least == 0])
def test_an_ulps_count_past_u32_is_a_value_error_naming_it(check, arg):
    refused(check, rf"^{arg} is 4294967296, more than a u32 holds$", **{arg: 2**32})


@pytest.mark.parametrize("check", CHECKS)
def test_the_docstring_header_names_every_argument(check):
    # help() shows the first docstring line as the signature: it must name
    # the arguments the check takes, in order.
    fn = getattr(ko, check)
    head = fn.__doc__.strip().splitlines()[0]
    assert head.startswith(check + "(") and head.endswith(") -> CheckReport"), head
    inner = head[len(check) + 1:-len(") -> CheckReport")]
    names = [a.split("=")[0].strip() for a in inner.split(", ")]
    assert names == list(inspect.signature(fn).parameters), head


def test_an_output_written_in_place_and_a_different_one_returned_fails():
    # A wrapper returning a reference's copy must not hide a broken
    # in-place kernel: which array is the kernel's is unknown, so it fails.
    def writes_zeros_returns_good(x, q, s):
        q[...] = 0
        return ko.quantize_fp8_scaled(x, "token")

    def writes_good_returns_it(x, q, s):
        q[...], s[...] = ko.quantize_fp8_scaled(x, "token")
        return q, s

    r = ko.check_fp8_scaled_quant(writes_zeros_returns_good, granularity="token", verbose=False)
    assert not r and "returned a different array" in r.failures[0], r.failures[:1]
    assert ko.check_fp8_scaled_quant(writes_good_returns_it, granularity="token", verbose=False)


@pytest.mark.parametrize("name", CHECKS)
def test_a_callable_that_is_not_callable_is_a_type_error(name):
    """None (or any non-callable) in the kernel's place is one TypeError
    naming the argument, before any case runs: not a failed row per case."""
    with pytest.raises(TypeError, match="must be callable"):
        getattr(ko, name)(None, **MINIMAL[name])
