"""fla's `fused_recurrent_gated_delta_rule` (Triton) against the Gated
DeltaNet decode contract (seed 003) from the conv output on, through
`kernel_oracle.check_gated_delta_rule`.

fla's kernel has no conv (deployments run `causal_conv1d_update` first),
so the check hands it what the conv produced: q, k [B, t, num_k, 128]
before their L2 norm, v [B, t, num_v, 128], the raw gate inputs alpha
and beta_raw [B, t, num_v], the layer's A_log and dt_bias [num_v] and each
sequence's initial state [B, num_v, 128, 128] (`S[h][key][value]`, fla's
`state_v_first=False` layout). fla fuses the rest in its kernel:
`use_qk_l2norm_in_kernel=True`, `use_gate_in_kernel=True` (g = -exp(A_log)
softplus(alpha + dt_bias)), `use_beta_sigmoid_in_kernel=True`, scale
1/sqrt(128).

fla is not bit-exact (another summation order, fused multiply-adds,
Triton's approximate exp, sqrt and division), so the check judges every
element of o and of the final state against `2 B` around the oracle's,
`B` a first-order forward-error bound of any f32 evaluation of the
contract (see `help(kernel_oracle.check_gated_delta_rule)`), over three
arms: RAND, GATES (softplus past exp's f32 overflow, at its threshold,
deep below zero; saturating sigmoids) and NORM (all-zero heads, sums of
squares near the L2 norm's eps). Each row prints, for o and the final
state, the largest distance in ulps, the share of bit-identical elements
and the worst ratio of an error to its limit (above 1 fails).

The second part judges fla's GDN-2 kernel (`fused_recurrent_gdn2_fwd`) as
the field's decode path calls it: on a pool of state slots updated in place
(`inplace_final_state=True`, `ssm_state_indices`, and in speculative
decoding `num_accepted_tokens`), through `check_gated_delta_rule(...,
pool="decode")` and `pool="spec"`. GDN-2 with its erase and write gates both
beta broadcast over the channels, and its decay broadcast over K, is the
gated delta rule. That kernel dereferences every index (it has no
PAD_SLOT_ID) and, with one index per sequence, stores row r through
`idx[b + r]`, so the wrapper refuses cases with a -1 index and decode cases
of more than one row (refusals are counted, not failed).

Exit status 1 unless every case passes. Run on a CUDA GPU with torch and
fla-core installed:
    python3 python/examples/fla_gated_delta_rule.py
"""

import sys

import torch

import kernel_oracle as ko


def fla_rule(q, k, v, alpha, beta_raw, a_log, dt_bias, state, o, final_state):
    from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule

    dev = "cuda"
    t = lambda x: torch.from_numpy(x).to(dev)  # noqa: E731
    y, ht = fused_recurrent_gated_delta_rule(
        t(q), t(k), t(v), g=t(alpha), beta=t(beta_raw), scale=128 ** -0.5,
        initial_state=t(state), output_final_state=True,
        use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
        A_log=t(a_log), dt_bias=t(dt_bias), use_beta_sigmoid_in_kernel=True)
    torch.cuda.synchronize()
    o[...] = y.reshape(o.shape).cpu().numpy()
    final_state[...] = ht.cpu().numpy()


def fla_gdn2_pool(q, k, v, alpha, beta_raw, a_log, dt_bias, state_pool, ssm_state_indices, *rest):
    from fla.ops.gdn2.fused_recurrent import fused_recurrent_gdn2_fwd

    o, final_pool = rest[-2], rest[-1]
    spec = ssm_state_indices.ndim == 2
    if (ssm_state_indices < 0).any():
        raise ko.Refused("fla's GDN-2 kernel dereferences every index: no PAD_SLOT_ID")
    if not spec and q.shape[1] > 1:
        raise ko.Refused("one index per sequence: the kernel stores row r through idx[b + r], so decode is t = 1")
    dev = "cuda"
    t = lambda x: torch.from_numpy(x).to(dev)  # noqa: E731
    nb, nt, _, kd = q.shape
    nv = v.shape[2]
    beta = torch.sigmoid(t(beta_raw))[..., None]
    gates = beta.expand(nb, nt, nv, kd).contiguous()
    pool = t(state_pool).clone()
    y, _ = fused_recurrent_gdn2_fwd(
        t(q), t(k), t(v), g=t(alpha)[..., None].expand(nb, nt, nv, kd).contiguous(),
        b=gates, w=beta.expand(nb, nt, nv, v.shape[3]).contiguous(),
        A_log=t(a_log), dt_bias=t(dt_bias)[:, None].expand(nv, kd).reshape(-1).contiguous(),
        initial_state=pool, scale=128 ** -0.5, inplace_final_state=True,
        ssm_state_indices=t(ssm_state_indices),
        num_accepted_tokens=t(rest[0]) if spec else None,
        use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True)
    torch.cuda.synchronize()
    o[...] = y.reshape(o.shape).cpu().numpy()
    final_pool[...] = pool.cpu().numpy()


def main():
    # The default shapes (GQA ratios 1, 2 and 4, up to 8 rows and 3
    # sequences, Qwen3-Next's 16/32 heads) and 4 sequences of one step.
    shapes = list(ko.GDN_SHAPES) + [(16, 32, 1, 4)]
    report = ko.check_gated_delta_rule(fla_rule, shapes=shapes, trials=3)
    ok = report.ok
    try:
        import fla.ops.gdn2.fused_recurrent  # noqa: F401
    except ImportError as e:
        print(f"fla's GDN-2 kernel not importable ({e}): the pool part is not run")
        return 0 if ok else 1
    for mode in ("decode", "spec"):
        r = ko.check_gated_delta_rule(fla_gdn2_pool, shapes=shapes, trials=6, pool=mode, name="fla_gdn2_pool")
        print(f"=== fla GDN-2 on a state pool ({mode}): {r.passed} passed, {r.failed} failed, {r.refused} refused")
        ok = ok and r.ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
