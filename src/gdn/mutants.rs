//! Planted bugs in `cu/gdn.cu`, one textual change each, so the gate and
//! the fuzzer can be shown to catch a wrong kernel.
//!
//! `kernel-oracle mutant gdn NAME -o FILE` writes one; point
//! `KERNEL_ORACLE_GDN_CU` at the file and run `kernel-oracle check gdn` or
//! the `gdn_packed` fuzzer. A test checks that every anchor occurs exactly
//! once in the builtin source and that every mutant compiles.

/// One planted bug; `caught_by` lists the gates (1: packed against
/// chained, 2: kernels against the oracle) expected to fail with it (as the
/// H200 showed). A bug in code the per-row and the packed kernels share is
/// invisible to gate 1; a bug in the three-launch packed twins alone is
/// invisible to gate 2, which runs the fused step (gate 1 compares the
/// twins with the chained rows, which gate 2 compares with the oracle).
pub type Mutant = crate::mutate::Mutant<u8>;

/// The planted bugs.
pub const MUTANTS: [Mutant; 19] = [
    Mutant {
        name: "decay-after-delta",
        what: "the scan computes kv and the rank-1 update against the undecayed state and decays afterwards (rule DECAY-FIRST broken), in both scan kernels",
        find: "#pragma unroll
    for (i32 i = 0; i < GDN_D; ++i) col[i] = __fmul_rn(col[i], d);
    f32 kv = 0.0f;
#pragma unroll
    for (i32 i = 0; i < GDN_D; ++i) kv = __fadd_rn(kv, __fmul_rn(col[i], ks[i]));
    const f32 delta = __fmul_rn(__fsub_rn(v_j, kv), beta);
#pragma unroll
    for (i32 i = 0; i < GDN_D; ++i) col[i] = __fadd_rn(col[i], __fmul_rn(ks[i], delta));
",
        replace: "    f32 kv = 0.0f;
#pragma unroll
    for (i32 i = 0; i < GDN_D; ++i) kv = __fadd_rn(kv, __fmul_rn(col[i], ks[i]));
    const f32 delta = __fmul_rn(__fsub_rn(v_j, kv), beta);
#pragma unroll
    for (i32 i = 0; i < GDN_D; ++i) col[i] = __fadd_rn(col[i], __fmul_rn(ks[i], delta));
#pragma unroll
    for (i32 i = 0; i < GDN_D; ++i) col[i] = __fmul_rn(col[i], d);
",
        caught_by: &[2],
    },
    Mutant {
        name: "state-store-past-end",
        what: "the per-row scan stores each column's last element once more, one state past the end, for the last v-head: every value stays right, so of the gate's checks only the guard check of the state buffers (written through the pointer table) sees it",
        find: "    for (i32 i = 0; i < GDN_D; ++i) dst[base + (u64)i * GDN_D] = col[i];
}
",
        replace: "    for (i32 i = 0; i < GDN_D; ++i) dst[base + (u64)i * GDN_D] = col[i];
    if (h == num_v - 1) dst[base + (u64)GDN_D * GDN_D] = col[GDN_D - 1];
}
",
        caught_by: &[1, 2],
    },
    Mutant {
        name: "twin-scan-beta-read-ahead",
        what: "the packed scan adds zero times the next row's beta to each row's beta (a read-ahead gone one row too far): the last row reads num_v floats past the heads' beta, and every value stays right while what lies there is finite, as the output sentinel 0xA5A5A5A5 (-2.9e-16) is; the heads are intermediates in NaN bands, so the twins' o and state turn NaN",
        find: "o[hv + j] = gdn_scan_column(col, qs, ks, v[hv + j], beta[(u64)r * num_v + h], d, scale);",
        replace: "o[hv + j] = gdn_scan_column(col, qs, ks, v[hv + j], __fadd_rn(beta[(u64)r * num_v + h], __fmul_rn(0.0f, beta[(u64)(r + 1) * num_v + h])), d, scale);",
        caught_by: &[1],
    },
    Mutant {
        name: "eps-outside-sqrt",
        what: "the L2 norm adds eps after the square root, sqrt(ss) + eps, instead of sqrt(ss + eps), in prep (both prep kernels)",
        find: "        const f32 d = __fadd_rn(ss, eps);
        const f32 s = __fsqrt_rn(d);
",
        replace: "        const f32 s = __fadd_rn(__fsqrt_rn(ss), eps);
",
        caught_by: &[2],
    },
    Mutant {
        name: "packed-parity-swapped",
        what: "the packed scan writes the final state to canonical for odd t and to alt for even t (rule PARITY reversed)",
        find: "f32 *fin = (t & 1) ? alt : canonical;",
        replace: "f32 *fin = (t & 1) ? canonical : alt;",
        caught_by: &[1],
    },
    Mutant {
        name: "conv-window-reversed",
        what: "the causal conv reads its window newest-first (tap i times hist[P-1-i] instead of hist[i]): the taps meet the wrong history rows, in the code the per-row and packed conv share",
        find: "const f32 win = i < p ? hist[i] : xc;",
        replace: "const f32 win = i < p ? hist[p - 1 - i] : xc;",
        caught_by: &[2],
    },
    Mutant {
        name: "conv-snapshot-stride",
        what: "the packed conv's snapshot rows are conv_dim apart instead of conv_dim * (d_conv - 1): the leading dimension drops the window length, so row r's snapshot overwrites part of row r - 1's",
        find: "const u64 rl = (u64)conv_dim * p;",
        replace: "const u64 rl = (u64)conv_dim;",
        caught_by: &[1],
    },
    Mutant {
        name: "fused-seq-row-slip",
        what: "the fused step finds sequence b's qkv rows at b * C instead of b * t * C (the batch stride forgets t): every sequence but the first reads another's rows when t > 1",
        find: "const f32 *xb = x + b * (u64)t * cd;",
        replace: "const f32 *xb = x + b * cd;",
        caught_by: &[2],
    },
    Mutant {
        name: "fused-seq-state-slip",
        what: "the fused step writes sequence b's final state into the block of sequence b - 1 of the other pool (a sequence index slip; sequence 0 keeps its own)",
        find: "f32 *const fin = (t & 1) ? alt : canonical; /* rule PARITY */",
        replace: "f32 *const fin = ((t & 1) ? (f32 *)tab[2] : (f32 *)tab[1]) + (b > 0 ? b - 1 : 0) * n;",
        caught_by: &[2],
    },
    Mutant {
        name: "fused-seq-alpha-slip",
        what: "the batched entries find sequence b's alpha rows at b * num_v instead of b * t * num_v (the batch stride forgets t, in gdn_seq, which every batched entry shares): every sequence but the first decays with another row's gate when t > 1; every entry reads the same wrong rows, so comparing the entries with one another cannot see it (the host emulator compared them so until it checked each sequence against the sequence run alone)",
        find: "s.alb = alpha + b * (u64)t * num_v;",
        replace: "s.alb = alpha + b * (u64)num_v;",
        caught_by: &[2],
    },
    Mutant {
        name: "fused-persistent-next-seq",
        what: "the persistent entry prefetches the next item's inputs and state from the current item's sequence (the next item's q/k head, but sequence b again): a CTA that runs items of two sequences scans another sequence's state",
        find: "const u64 nb = c0 + bd < cpc ? b : (u64)(nxt / num_k);",
        replace: "const u64 nb = b;",
        caught_by: &[2],
    },
    Mutant {
        name: "persistent-qk-reuse-stage",
        what: "with one row, the persistent entry's later chunks of an item read the normalised q and k from their own stage (written two chunks before, by another item, or never) instead of the stage the item's first chunk wrote",
        find: "const GdnFusedSmem &qs = reuse ? smp[kf & 1] : sm;",
        replace: "const GdnFusedSmem &qs = sm;",
        caught_by: &[2],
    },
    Mutant {
        name: "split-parity-swapped",
        what: "the split form of the fused step (one sequence, num_v = 2 num_k) writes the final state to canonical for odd t and to alt for even t (rule PARITY reversed)",
        find: "f32 *const fin = (t & 1) ? sq.alt : sq.canonical; /* rule PARITY */",
        replace: "f32 *const fin = (t & 1) ? sq.canonical : sq.alt; /* rule PARITY */",
        caught_by: &[2],
    },
    Mutant {
        name: "split-kv-handoff",
        what: "in the split form of the fused step every quarter continues the kv sum from quarter 0's partial instead of the one before its own: elements 32..63 are left out of quarter 3's kv",
        find: "f32 kv = qw == 0 ? 0.0f : sm.part[0][qw - 1][l];",
        replace: "f32 kv = qw == 0 ? 0.0f : sm.part[0][0][l];",
        caught_by: &[2],
    },
    Mutant {
        name: "split-delta-column",
        what: "in the split form of the fused step every column's lanes read column 0's delta (the CTA's first column) instead of their own: the rank-1 update of columns 1..31 uses another column's delta",
        find: "const f32 delta = sm.dl[p][l];",
        replace: "const f32 delta = sm.dl[p][0];",
        caught_by: &[2],
    },
    Mutant {
        name: "split-t1-parity",
        what: "the split form's one-row path (t = 1) stores the final state to canonical, not alt (rule PARITY: odd t ends in alt)",
        find: "for (i32 e = 0; e < 32; ++e) sq.alt[base + (u64)e * GDN_D] = c[e];",
        replace: "for (i32 e = 0; e < 32; ++e) sq.canonical[base + (u64)e * GDN_D] = c[e];",
        caught_by: &[2],
    },
    Mutant {
        name: "split-t1-o-stale-term",
        what: "the split form's one-row path (t = 1) forms every fourth term of the o sum from the decayed state before the delta-rule update (c_i' q_i, not (c_i' + k_i delta) q_i)",
        find: "tr[r] = __fmul_rn(cu, __fmul_rn(qr[r], iq));",
        replace: "tr[r] = __fmul_rn(r == 3 ? c[e] : cu, __fmul_rn(qr[r], iq));",
        caught_by: &[2],
    },
    Mutant {
        name: "split-t1-vring-low-ranks",
        what: "the split form's one-row path (t = 1) writes the v channels' conv ring back on ranks 0-3 of each cluster only: the second v head of every q/k head keeps its old ring (its o, state and conv outputs are right)",
        find: "for (i32 i = 0; i < P; ++i) sq.ring[vch * P + i] = hv[i];",
        replace: "for (i32 i = 0; i < P && rank < 4; ++i) sq.ring[vch * P + i] = hv[i];",
        caught_by: &[2],
    },
    Mutant {
        name: "split-t1-sum-seeded",
        what: "the split form's one-row path (t = 1) seeds its kv and o sums with their first term instead of +0 (acc = t_0 + t_1 + ..., not ((+0 + t_0) + t_1) + ...): equal unless every term is -0, as with a zero q/k head over an all-negative state, where o is -0 instead of +0 (rule READ-AFTER); only the gate's negative-state edge case and the fuzzer's negative states reach it",
        find: "        acc = __fadd_rn(acc, v.x);",
        replace: "        acc = q == 0 ? v.x : __fadd_rn(acc, v.x);",
        caught_by: &[2],
    },
];

/// The mutant called `name`.
pub fn by_name(name: &str) -> Option<&'static Mutant> {
    MUTANTS.iter().find(|m| m.name == name)
}

/// `source` with `mutant` planted.
///
/// # Errors
/// A message if the anchor does not occur exactly once in `source`.
pub fn apply(mutant: &Mutant, source: &str) -> Result<String, String> {
    crate::mutate::apply_once(mutant.name, mutant.find, mutant.replace, source)
}
