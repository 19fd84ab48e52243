"""fla's `fused_recurrent_gated_delta_rule` (Triton) against the Gated
DeltaNet decode contract (seed 003, `kernel_oracle.gdn_decode_rows`).

What runs: for each shape (num_k, num_v heads, t rows, B sequences) and
seed, random layer parameters, conv ring, state and rows. The oracle
computes every row (conv + SiLU, L2 norm, gates, the delta-rule scan). fla
is handed the oracle's conv output (fla's kernel has no conv: deployments
run `causal_conv1d_update` first) split into q, k, v, the raw gate inputs
with the gates fused in its kernel (`use_gate_in_kernel=True`: g = -exp(A_log)
softplus(alpha + dt_bias); `use_beta_sigmoid_in_kernel=True`;
`use_qk_l2norm_in_kernel=True`), the same scale and the initial state
`[B, HV, K, V]` (the contract's `S[h][key][value]`, `state_v_first=False`).

fla is not bit-exact (different summation order, fused multiply-adds,
Triton's approximate exp, sqrt and division), so this example reports, for
the outputs `o [t, V]` and the final state:

- ulps: the distance of fla's f32 from the oracle's f32 in units in the
  last place (0 = bit-identical), maximum and median, and the share of
  bit-identical elements;
- against a written bound: `|fla - oracle| <= 2 B` elementwise, where `B`
  is a first-order forward-error bound of one f32 evaluation of the
  contract's formula from the same inputs (computed here in float64):
  u = 2^-24 per basic operation, gamma_n = n u / (1 - n u) for each
  128-term dot product (any order, with or without FMA), and 8 u for each
  of exp, softplus, sigmoid, sqrt and division (Triton's approximate
  forms), plus |x| 2 u for exp(x) (the argument's own rounding). The state
  error is carried from row to row (row r's bound starts from row r-1's).
  Each implementation is within `B` of the exact value of the formula, so
  two correct ones are within `2 B` of each other: a ratio above 1 means
  one of them is not computing the contract (or the bound's model of the
  transcendental error is wrong: the report says which element).

Exit status 1 if any element breaks the bound or fla refuses a shape the
contract takes. Run on a CUDA GPU with torch and fla-core installed:
    python3 python/examples/fla_gated_delta_rule.py
"""

import sys

import numpy as np
import torch

import kernel_oracle as ko

D = 128
U = 2.0**-24


def gamma(n):
    return n * U / (1 - n * U)


def ulps(a, b):
    """|a - b| in ulps of f32, through the ordered integer view."""
    def ordered(x):
        i = np.ascontiguousarray(x, np.float32).view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)
    return np.abs(ordered(a) - ordered(b))


def inputs(rng, num_k, num_v, t, d_conv=4):
    kd, vd = num_k * D, num_v * D
    c = 2 * kd + vd
    return dict(
        qkv=rng.standard_normal((t, c)).astype(np.float32),
        beta_raw=rng.standard_normal((t, num_v)).astype(np.float32),
        alpha=rng.standard_normal((t, num_v)).astype(np.float32),
        conv_w=(0.5 * rng.standard_normal((c, d_conv))).astype(np.float32),
        dt_bias=rng.uniform(-1, 1, num_v).astype(np.float32),
        a_log=rng.uniform(-2, 1, num_v).astype(np.float32),
        ring=rng.standard_normal((c, d_conv - 1)).astype(np.float32),
        state=(0.1 * rng.standard_normal((num_v, D, D))).astype(np.float32),
        num_k=num_k,
    )


def bound(x, conv_out, scale, eps=1e-6):
    """Per-element bounds B for o [t, V] and the final state [num_v, D, D]
    (float64), from the oracle's conv output and the layer (see the module
    docstring)."""
    num_k, num_v = x["num_k"], x["a_log"].shape[0]
    ratio, kd = num_v // num_k, num_k * D
    t = conv_out.shape[0]
    S = x["state"].astype(np.float64)
    dS = np.zeros_like(S)
    g_n, t8 = gamma(D), 8 * U
    bo = np.zeros((t, num_v * D))
    for r in range(t):
        co = conv_out[r].astype(np.float64)
        for h in range(num_v):
            hk = h // ratio
            qr, kr = co[hk * D:(hk + 1) * D], co[kd + hk * D:kd + (hk + 1) * D]
            v = co[2 * kd + h * D:2 * kd + (h + 1) * D]
            q, k = qr / np.sqrt(qr @ qr + eps), kr / np.sqrt(kr @ kr + eps)
            rel_n = g_n + 3 * t8  # sum of squares, sqrt, division (and the 1/sqrt)
            dq, dk = rel_n * np.abs(q), rel_n * np.abs(k)
            beta = 1 / (1 + np.exp(-x["beta_raw"][r, h]))
            sp_in = float(x["alpha"][r, h]) + float(x["dt_bias"][h])
            sp = np.log1p(np.exp(sp_in)) if sp_in < 20 else sp_in
            g = -np.exp(float(x["a_log"][h])) * sp
            a = np.exp(g)
            # exp(a_log), softplus, the product, exp(g) with its argument's error.
            da = a * (3 * t8 + 2 * U * abs(g) + 2 * U)
            S1 = a * S[h]
            dS1 = a * dS[h] + da * np.abs(S[h]) + U * np.abs(S1)
            kv = k @ S1
            dkv = g_n * (np.abs(k) @ np.abs(S1)) + dk @ np.abs(S1) + np.abs(k) @ dS1
            delta = beta * (v - kv)
            ddelta = beta * (dkv + 2 * U * (np.abs(v) + np.abs(kv))) + t8 * abs(delta)
            S2 = S1 + np.outer(k, delta)
            dS2 = (dS1 + np.outer(dk, np.abs(delta)) + np.outer(np.abs(k), ddelta)
                   + 2 * U * (np.abs(S1) + np.abs(np.outer(k, delta))))
            o = scale * (q @ S2)
            do = scale * (g_n * (np.abs(q) @ np.abs(S2)) + dq @ np.abs(S2) + np.abs(q) @ dS2) + 2 * U * abs(o).max()
            bo[r, h * D:(h + 1) * D] = do
            S[h], dS[h] = S2, dS2
    return bo, dS


def fla_rows(xs, conv_outs, scale):
    """fla on B sequences at once: q, k [B, t, num_k, D], v [B, t, num_v, D]."""
    num_k = xs[0]["num_k"]
    kd = num_k * D
    t = conv_outs[0].shape[0]
    co = np.stack(conv_outs)  # [B, t, C]
    dev = "cuda"
    q = torch.from_numpy(co[:, :, :kd].reshape(len(xs), t, num_k, D).copy()).to(dev)
    k = torch.from_numpy(co[:, :, kd:2 * kd].reshape(len(xs), t, num_k, D).copy()).to(dev)
    v = torch.from_numpy(co[:, :, 2 * kd:].reshape(len(xs), t, -1, D).copy()).to(dev)
    alpha = torch.from_numpy(np.stack([x["alpha"] for x in xs])).to(dev)
    beta_raw = torch.from_numpy(np.stack([x["beta_raw"] for x in xs])).to(dev)
    h0 = torch.from_numpy(np.stack([x["state"] for x in xs])).to(dev)
    # fla takes one layer: A_log and dt_bias are the first sequence's (the
    # caller gives every sequence the same layer).
    A_log = torch.from_numpy(xs[0]["a_log"]).to(dev)
    dt_bias = torch.from_numpy(xs[0]["dt_bias"]).to(dev)
    from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule

    o, ht = fused_recurrent_gated_delta_rule(
        q, k, v, g=alpha, beta=beta_raw, scale=scale, initial_state=h0,
        output_final_state=True, use_qk_l2norm_in_kernel=True,
        use_gate_in_kernel=True, A_log=A_log, dt_bias=dt_bias,
        use_beta_sigmoid_in_kernel=True)
    torch.cuda.synchronize()
    return o.reshape(len(xs), t, -1).cpu().numpy(), ht.cpu().numpy()


def main():
    scale = float(np.float32(1 / np.sqrt(np.float32(D))))
    # (num_k, num_v, t, B): Qwen3-Next's 16/32 heads, GQA ratios 1, 2, 4,
    # one decode step, speculative verification rows, batches.
    shapes = [(1, 1, 1, 1), (1, 2, 1, 1), (2, 8, 3, 1), (16, 32, 1, 1),
              (16, 32, 8, 1), (4, 8, 5, 3), (16, 32, 1, 4)]
    bad = 0
    print(f"{'num_k':>5} {'num_v':>5} {'t':>3} {'B':>2} {'seed':>4} | {'o: max ulp':>10} {'median':>6} "
          f"{'identical':>9} {'err/2B':>7} | {'state: max ulp':>14} {'median':>6} {'identical':>9} {'err/2B':>7}")
    worst = (0.0, None)
    for num_k, num_v, t, b in shapes:
        for seed in range(3):
            rng = np.random.default_rng(1000 * seed + 17 * num_v + t)
            layer = inputs(rng, num_k, num_v, t)
            xs = [layer] + [dict(layer, **{n: v for n, v in inputs(rng, num_k, num_v, t).items()
                                           if n in ("qkv", "beta_raw", "alpha", "ring", "state")})
                            for _ in range(b - 1)]
            refs = [ko.gdn_decode_rows(**x) for x in xs]
            try:
                o_fla, s_fla = fla_rows(xs, [r["conv_out"] for r in refs], scale)
            except Exception as e:  # a refusal is a row, not an abort
                print(f"{num_k:>5} {num_v:>5} {t:>3} {b:>2} {seed:>4} | fla refused: {e}")
                bad += 1
                continue
            row = []
            for what in ("o", "state"):
                us, ratios, ident, n = [], [], 0, 0
                for i, (x, ref) in enumerate(zip(xs, refs)):
                    bo, bs = bound(x, ref["conv_out"], scale)
                    got = o_fla[i] if what == "o" else s_fla[i]
                    want = ref[what].reshape(got.shape)
                    lim = 2 * (bo if what == "o" else bs).reshape(got.shape)
                    u = ulps(got, want)
                    r = np.abs(got.astype(np.float64) - want) / np.maximum(lim, 1e-300)
                    us.append(u.ravel()); ratios.append(r.max()); ident += int((u == 0).sum()); n += u.size
                    if r.max() > worst[0]:
                        j = np.unravel_index(np.argmax(r), r.shape)
                        worst = (float(r.max()), f"{what} seq {i} index {tuple(int(z) for z in j)}: fla {got[j]!r} oracle {want[j]!r} 2B {lim[j]:.3e}")
                u = np.concatenate(us)
                row.append((int(u.max()), float(np.median(u)), ident / n, max(ratios)))
            bad += sum(r[3] > 1 for r in row)
            (om, omed, oid, orat), (sm, smed, sid, srat) = row
            print(f"{num_k:>5} {num_v:>5} {t:>3} {b:>2} {seed:>4} | {om:>10} {omed:>6.0f} {oid:>9.1%} {orat:>7.3f} | "
                  f"{sm:>14} {smed:>6.0f} {sid:>9.1%} {srat:>7.3f}")
    print(f"worst ratio to the bound: {worst[0]:.3f} ({worst[1]})")
    print("fla vs the GDN contract:", "WITHIN THE BOUND everywhere" if bad == 0 else f"{bad} rows OUTSIDE THE BOUND or refused")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
