//! `cu/gdn.cu` run on the host, without a GPU, against the core oracle
//! (`oracle::gdn`), bit for bit.
//!
//! The kernel source (the builtin, or the candidate named by
//! `KERNEL_ORACLE_GDN_CU`) is compiled with the host C++ compiler (`g++
//! -std=c++20 -ffp-contract=off`, no fast math, AddressSanitizer and
//! UndefinedBehaviorSanitizer, any report fatal: an index past a state
//! column's 128 registers or past a buffer fails the run) inside a small
//! emulator:
//! every CUDA thread of a CTA is a host thread, `__syncthreads` a
//! `std::barrier`, `__shared__` a static, and `__fadd_rn`, `__fmul_rn`, ...
//! the host's IEEE binary32 operations (SSE on x86-64: round to nearest
//! even, subnormals kept). This checks the kernels' arithmetic order,
//! indexing, pointer tables, snapshots and parity; what it cannot check is
//! the GPU itself (NVRTC's code generation, real concurrency, memory
//! faults): `gdn_gpu.rs` does, on a device. A barrier wait that is never
//! released fails the run after 30 s, naming the barrier (a deadlock,
//! not a hang), and a CTA that ends with an mbarrier part-way through a
//! phase (more or fewer arrivals than its count) fails. The arrival that
//! completes an mbarrier's phase pauses its thread 200 us, so that a store
//! posted after its arrival is seen missing by the waiters (the one-row
//! path with delta stored after its hand-off failed 3 runs of 3, 2 of 3
//! before). Asynchronous copies (`cp.async`) are poisoned at issue and
//! filled at the issuing thread's wait, in PTX's commit groups (a
//! `wait_group N` completes every group but the newest `N`), so that a
//! read before its copy's wait, or a wait that leaves its copy's group
//! pending, is seen. Cluster barriers are checked thread by thread: a
//! `barrier.cluster.wait` without the thread's own arrival before it, or a
//! second arrival before the wait, fails the run (the CTAs of a cluster
//! run one after another, so a wait cannot block on another CTA here; on
//! an H100, a fused step that skipped every arrival still passed the
//! device gate). The batched entries are checked sequence by sequence
//! against each sequence run alone. A warp's convergence and the memory
//! model's orderings are beyond it.
//!
//! They need `g++` with C++20 `<barrier>` (GCC 11 or later; Debian's `g++`
//! package): without it they fail, saying so, rather than pass unrun.

use device::cuda::KernelSource;
use oracle::gdn::rows::{decode_rows, PackedOutputs, RowInputs};
use oracle::gdn::scan::{StatePair, StateSlot};
use oracle::gdn::transcendental::{exp, sigmoid, silu, softplus};
use oracle::gdn::{default_scale, GdnParams, GdnShape};
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// One of the contract's transcendentals, by name.
type Named = (&'static str, fn(f32) -> f32);

/// The emulator: the CUDA spellings as host C++, `gdn.cu` included, and a
/// `main` that reads the inputs from stdin and writes the outputs to
/// stdout (raw little-endian f32).
const HARNESS: &str = r#"#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cmath>
#include <thread>
#include <chrono>
#include <barrier>
#include <vector>
#include <functional>
#include <mutex>
#include <condition_variable>
#include <algorithm>
#include <map>
#include <memory>
/* AddressSanitizer's leak check is off: the emulator checks accesses, not
 * its own teardown, and LeakSanitizer fails outright where ptrace is
 * restricted. */
extern "C" const char *__asan_default_options() { return "detect_leaks=0"; }
struct dim3 { unsigned x, y, z; };
thread_local dim3 threadIdx, blockIdx;
dim3 blockDim, gridDim;
static std::barrier<> *g_bar;
/* Run a grid's CTAs in decreasing blockIdx.x: rank 0 of each cluster of the
 * fused step last, after every other rank has read the ring (what the
 * device's cluster barrier guarantees). */
static bool g_reverse = false;
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)
#define __trap() std::abort()
#define __align__(n) __attribute__((aligned(n)))
struct float4 { float x, y, z, w; };
inline void __syncthreads() { g_bar->arrive_and_wait(); }
/* Named barriers (bar.sync id, n): the waiting threads go on when the
 * n-th arrives. A CTA that ends with a barrier part-way is an error
 * (launch below). */
struct HostNamedBar { std::mutex mu; std::condition_variable cv; int count = 0; unsigned long gen = 0; };
static HostNamedBar g_nbar[16];
/* mbarriers: a phase completes at its count-th arrival; a wait on parity
 * p returns once the current phase's parity differs from p. An mbarrier
 * takes the device's 8 bytes (so that what follows one in shared memory
 * lies where it lies on the device), its state kept beside it by address. */
struct alignas(8) gdn_mbar_t { unsigned long long word; };
struct HostMbar { std::mutex mu; std::condition_variable cv; int count = 0, pending = 0; unsigned phase = 0; };
static std::mutex g_mbars_mu;
static std::map<const void *, std::unique_ptr<HostMbar>> g_mbars;
inline HostMbar &host_mbar(const gdn_mbar_t *b) {
    std::lock_guard<std::mutex> lk(g_mbars_mu);
    auto &m = g_mbars[b];
    if (!m) m = std::make_unique<HostMbar>();
    return *m;
}
inline void gdn_host_aligned(const void *p, unsigned long a);
inline void gdn_mbar_init(gdn_mbar_t *b, int count) {
    gdn_host_aligned(b, 8);
    HostMbar &m = host_mbar(b);
    std::lock_guard<std::mutex> lk(m.mu); m.count = count; m.pending = count; m.phase = 0;
}
/* The arrival that completes a phase pauses its thread briefly, so that
 * the waiters run first: a store the kernel makes after its arrival (a
 * hand-off posted too early) is then seen missing. */
inline void gdn_mbar_arrive(gdn_mbar_t *b) {
    HostMbar &m = host_mbar(b);
    bool completed = false;
    {
        std::lock_guard<std::mutex> lk(m.mu);
        if (--m.pending == 0) { m.pending = m.count; ++m.phase; m.cv.notify_all(); completed = true; }
    }
    if (completed) std::this_thread::sleep_for(std::chrono::microseconds(200));
}
/* A wait that the kernel's other threads never release (a count above
 * the arrivals, a role no thread takes) fails the run with the barrier's
 * state, rather than hanging it. */
static const auto g_wait_limit = std::chrono::seconds(30);
inline void gdn_mbar_wait(gdn_mbar_t *b, int parity) {
    HostMbar &m = host_mbar(b);
    std::unique_lock<std::mutex> lk(m.mu);
    if (!m.cv.wait_for(lk, g_wait_limit, [&] { return (int)(m.phase & 1u) != parity; })) {
        fprintf(stderr, "CTA %u thread %u: mbarrier %p (count %d) never completed the phase of parity %d (%d arrivals missing): a deadlock\n",
                blockIdx.x, threadIdx.x, (const void *)b, m.count, parity, m.pending);
        std::exit(4);
    }
}
inline void gdn_host_wait();
inline void gdn_host_wait_prior(int n);
inline void gdn_cp_commit();
template <int N> inline void gdn_cp_wait_prior() { gdn_host_wait_prior(N); }
inline void gdn_bar_sync(int id, int n) {
    HostNamedBar &b = g_nbar[id]; std::unique_lock<std::mutex> lk(b.mu);
    const unsigned long g = b.gen;
    if (++b.count < n) {
        if (!b.cv.wait_for(lk, g_wait_limit, [&] { return b.gen != g; })) {
            fprintf(stderr, "CTA %u thread %u: named barrier %d waited for %d threads, %d came: a deadlock\n",
                    blockIdx.x, threadIdx.x, id, n, b.count);
            std::exit(4);
        }
        return;
    }
    b.count = 0; ++b.gen; b.cv.notify_all();
}
inline float __fadd_rn(float a, float b) { volatile float r = a + b; return r; }
inline float __fsub_rn(float a, float b) { volatile float r = a - b; return r; }
inline float __fmul_rn(float a, float b) { volatile float r = a * b; return r; }
inline float __fdiv_rn(float a, float b) { volatile float r = a / b; return r; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline float __uint_as_float(unsigned i) { float f; std::memcpy(&f, &i, 4); return f; }
/* The persistent entry's dynamic shared memory. */
#define GDN_DYNAMIC_SMEM(name) static float name[128 * 128] __attribute__((aligned(16)))
/* Asynchronous copies (cp.async) as the device may complete them: the
 * source read when issued, the destination poisoned then and written at
 * the issuing thread's wait; a thread that ends with copies pending is an
 * error. Commit groups as PTX's: a copy belongs to the group the thread's
 * next commit closes; wait_group N (gdn_cp_wait_prior<N>) completes the
 * copies of every group but the newest N committed (not those of the
 * newest N, nor copies not yet committed); wait_all (gdn_cp_wait) every
 * copy. */
#define GDN_HOST_ASYNC 1
struct HostCopy { float *dst; float v[4]; int n; long group; };
thread_local std::vector<HostCopy> g_pending;
thread_local long g_groups = 0; /* the groups this thread has committed */
static const unsigned HOST_POISON = 0x7F80BEEFu; /* a signalling NaN */
/* What the device requires of a 16-byte access or an mbarrier's 8 bytes
 * (the host would not fault). */
inline void gdn_host_aligned(const void *p, unsigned long a) {
    if ((unsigned long)p % a) { fprintf(stderr, "%p is not %lu-byte aligned\n", p, a); fflush(stderr); std::_Exit(3); }
}
inline void gdn_host_cp(float *dst, const float *src, int n) {
    if (n == 4) { gdn_host_aligned(dst, 16); gdn_host_aligned(src, 16); }
    HostCopy c{dst, {}, n, g_groups};
    float pz; std::memcpy(&pz, &HOST_POISON, 4);
    for (int i = 0; i < n; ++i) { c.v[i] = src[i]; dst[i] = pz; }
    g_pending.push_back(c);
}
inline void gdn_host_wait() {
    for (auto &c : g_pending) for (int i = 0; i < c.n; ++i) c.dst[i] = c.v[i];
    g_pending.clear();
}
inline void gdn_cp_commit() { ++g_groups; }
inline void gdn_host_wait_prior(int n) {
    std::vector<HostCopy> keep;
    for (auto &c : g_pending) {
        if (c.group < g_groups - n) { for (int i = 0; i < c.n; ++i) c.dst[i] = c.v[i]; }
        else keep.push_back(c);
    }
    g_pending.swap(keep);
}
/* Cluster barriers (barrier.cluster.arrive, then barrier.cluster.wait):
 * the CTAs of a cluster run one after another here, so a wait is the
 * CTA's own barrier, and what the emulator checks is each thread's side
 * of the protocol (PTX ISA, "barrier.cluster": a thread arrives, then
 * waits, once each phase). A wait with no arrival of its own before it
 * (on the device the cluster's waits hang, or pass with this CTA still
 * reading) and a second arrival before the wait fail the run. */
thread_local bool g_cluster_arrived = false;
inline void gdn_host_cluster_arrive() {
    if (g_cluster_arrived) { fprintf(stderr, "CTA %u thread %u: a second barrier.cluster.arrive before its barrier.cluster.wait\n", blockIdx.x, threadIdx.x); std::exit(3); }
    g_cluster_arrived = true;
}
inline void gdn_host_cluster_wait() {
    if (!g_cluster_arrived) { fprintf(stderr, "CTA %u thread %u: barrier.cluster.wait without its barrier.cluster.arrive (the device's cluster barrier would never complete, or complete without this thread)\n", blockIdx.x, threadIdx.x); std::exit(3); }
    g_cluster_arrived = false;
}
#include "gdn.cu"

static void launch(unsigned gx, unsigned gy, unsigned threads, std::function<void()> f) {
    gridDim = {gx, gy, 1}; blockDim = {threads, 1, 1};
    for (unsigned by = 0; by < gy; ++by) for (unsigned i = 0; i < gx; ++i) {
        const unsigned bx = g_reverse ? gx - 1 - i : i;
        std::barrier<> bar(threads); g_bar = &bar;
        std::vector<std::thread> ts;
        for (unsigned t = 0; t < threads; ++t) ts.emplace_back([&, t] {
            threadIdx = {t, 0, 0}; blockIdx = {bx, by, 0}; f();
            if (!g_pending.empty()) { fprintf(stderr, "CTA %u thread %u ends with %zu copies pending\n", bx, t, g_pending.size()); std::exit(3); }
        });
        for (auto &th : ts) th.join();
        for (int id = 0; id < 16; ++id) if (g_nbar[id].count) { fprintf(stderr, "CTA %u ends with %d arrivals at named barrier %d\n", bx, g_nbar[id].count, id); std::exit(3); }
        /* Every mbarrier the CTA used ends on a phase boundary: an arrival
         * more or fewer than its count a phase is a bug the waits may not
         * show. Forgotten, so the next CTA's init starts afresh. */
        for (auto &[addr, m] : g_mbars) if (m->pending != m->count) { fprintf(stderr, "CTA %u ends with mbarrier %p part-way through a phase (%d of %d arrivals)\n", bx, addr, m->count - m->pending, m->count); std::exit(3); }
        g_mbars.clear();
    }
}

extern "C" float emu_fn(int which, float x) {
    switch (which) { case 0: return gdn_exp(x); case 1: return gdn_softplus(x); case 2: return gdn_sigmoid(x); case 3: return gdn_silu(x); default: return gdn_silu_bf(x); }
}

/* packed == 1: the twins; 0: chained per-row kernels; 2: the fused step with the shim's
 * threads for one sequence; 3: the fused step with the threads of a batch (min(cpc, 128));
 * 4, 5: as 2, 3 through gdn_step_fused_c2 (clusters of 2); 6: gdn_step_fused_persistent,
 * one CTA per item (128 threads); 7: gdn_step_fused_persistent, one CTA running every item.
 * Outputs as the oracle's decode_rows; state_out gets the final state. */
extern "C" void emu_rows(int packed, int nk, int nv, int dc, int t,
    const float *conv_w, const float *dt_bias, const float *a_log, float eps, float scale,
    const float *qkv, const float *beta_raw, const float *alpha,
    float *ring, const float *state0,
    float *conv_out, float *o, float *snap_conv, float *snap_state, float *state_out)
{
    const int C = 128 * (2 * nk + nv), V = 128 * nv, P = dc - 1;
    const size_t N = (size_t)nv * 128 * 128, RL = (size_t)C * P;
    std::vector<float> can(state0, state0 + N), alt(N, 0.0f);
    unsigned long long tab[6] = {(unsigned long long)ring, (unsigned long long)can.data(), (unsigned long long)alt.data(),
        (unsigned long long)ring, (unsigned long long)alt.data(), (unsigned long long)can.data()};
    const unsigned cg = (C + 255) / 256;
    if (packed >= 6) {
        launch(packed == 6 ? nk : 1, 1, 128, [&] { gdn_step_fused_persistent(qkv, beta_raw, alpha, tab, conv_w, dt_bias, a_log, conv_out, o, t > 1 ? snap_conv : nullptr, t > 1 ? snap_state : nullptr, nk, nv, dc, t, eps, scale, 1); });
    } else if (packed >= 2) {
        const bool c2 = packed >= 4;
        const int cs = c2 ? 2 : GDN_CS;
        const int cpc = (nv / nk) * 128 / cs;
        const int threads = (packed % 2 == 0 && cpc % 32 == 0 && cpc < 128) ? 128 : (cpc < 128 ? cpc : 128);
        auto fused = c2 ? gdn_step_fused_c2 : gdn_step_fused;
        g_reverse = true;
        bool split = false;
#if GDN_CS == 8
        /* One sequence at num_v = 2 num_k: the split entry, as the shim. */
        split = !c2 && packed % 2 == 0 && nv == 2 * nk;
        if (split) launch(nk * 8, 1, 256, [&] { gdn_step_fused_split(qkv, beta_raw, alpha, tab, conv_w, dt_bias, a_log, conv_out, o, t > 1 ? snap_conv : nullptr, t > 1 ? snap_state : nullptr, nk, nv, dc, t, eps, scale); });
#endif
        if (!split) launch(nk * cs, 1, threads, [&] { fused(qkv, beta_raw, alpha, tab, conv_w, dt_bias, a_log, conv_out, o, t > 1 ? snap_conv : nullptr, t > 1 ? snap_state : nullptr, nk, nv, dc, t, eps, scale); });
        g_reverse = false;
    } else if (packed) {
        std::vector<float> q(t * V), k(t * V), v(t * V), b(t * nv), g(t * nv);
        launch(cg, 1, 256, [&] { gdn_conv1d_decode_tloop(qkv, tab, conv_w, conv_out, t > 1 ? snap_conv : nullptr, C, dc, t); });
        launch(nv, t, 128, [&] { gdn_prep_decode_rows(conv_out, beta_raw, alpha, dt_bias, a_log, q.data(), k.data(), v.data(), b.data(), g.data(), nk, nv, eps, t); });
        launch(nv, 1, 128, [&] { gdn_scan_s128_tsnap(q.data(), k.data(), v.data(), g.data(), b.data(), tab + 1, o, t > 1 ? snap_state : nullptr, nv, t, scale); });
    } else {
        std::vector<float> q(V), k(V), v(V), b(nv), g(nv);
        for (int r = 0; r < t; ++r) {
            const int off = r % 2 ? 3 : 0;
            launch(cg, 1, 256, [&] { gdn_conv1d_decode(qkv + (size_t)r * C, tab + off, conv_w, conv_out + (size_t)r * C, C, dc); });
            launch(nv, 1, 128, [&] { gdn_prep_decode(conv_out + (size_t)r * C, beta_raw + r * nv, alpha + r * nv, dt_bias, a_log, q.data(), k.data(), v.data(), b.data(), g.data(), nk, nv, eps, 1); });
            launch(nv, 1, 128, [&] { gdn_scan_s128(q.data(), k.data(), v.data(), g.data(), b.data(), tab + off + 1, o + (size_t)r * V, nv, scale); });
            if (r + 1 < t) {
                std::memcpy(snap_conv + r * RL, ring, RL * 4);
                std::memcpy(snap_state + r * N, (r % 2 == 0 ? alt : can).data(), N * 4);
            }
        }
    }
    std::memcpy(state_out, (t % 2 ? alt : can).data(), N * 4);
}

/* batch: B sequences of one layer (inputs from a xorshift seeded by seed)
 * through gdn_step_fused (one CTA per q/k head and sequence, the threads
 * of a batch), gdn_step_fused_c2 (clusters of 2, likewise) and
 * gdn_step_fused_persistent on G CTAs, each against every sequence run
 * alone through the chained per-row kernels (emu_rows mode 0, which the
 * rows tests check against the oracle): conv outputs, o, both snapshots,
 * the ring and the final state (the parity slot) of every sequence, and
 * nothing written past the snapshots' end; exit 0 when every word is
 * bit-identical, else 1. */
static uint64_t g_rs;
static float rnd() { g_rs ^= g_rs << 13; g_rs ^= g_rs >> 7; g_rs ^= g_rs << 17; return (float)((g_rs >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f; }
static int emu_batch(int nk, int nv, int dc, int t, int B, int G, uint64_t seed) {
    g_rs = seed | 1;
    const size_t C = 128 * (2 * nk + nv), V = 128 * nv, N = (size_t)nv * 128 * 128, RL = C * (dc - 1);
    std::vector<float> w(C * dc), dt(nv), al(nv), qkv(B * t * C), br(B * t * nv), alpha(B * t * nv), ring0(B * RL), s0(B * N);
    for (auto &x : w) x = rnd() * 0.5f;
    for (auto &x : dt) x = rnd();
    for (auto &x : al) x = rnd();
    for (auto &x : qkv) x = rnd() * 2;
    for (auto &x : br) x = rnd() * 3;
    for (auto &x : alpha) x = rnd() * 3;
    for (auto &x : ring0) x = rnd();
    for (auto &x : s0) x = rnd() * 0.1f;
    const float eps = 1e-6f, scale = 1.0f / std::sqrt(128.0f);
    /* fin: the final state's pool (alt for odd t, rule PARITY). */
    struct Out { std::vector<float> ring, can, alt, co, o, sc, ss; const std::vector<float> &fin(int t) const { return t % 2 ? alt : can; } };
    auto fresh = [&] {
        return Out{ring0, s0, std::vector<float>(B * N, 0.0f), std::vector<float>(B * t * C, -1), std::vector<float>(B * t * V, -1),
                   std::vector<float>(B * (t - 1) * RL + 1, -1), std::vector<float>(B * (t - 1) * N + 1, -1)};
    };
    /* entry 0: gdn_step_fused, 1: gdn_step_fused_c2, 2: gdn_step_fused_persistent. */
    auto go = [&](int entry) {
        Out r = fresh();
        unsigned long long tab[3] = {(unsigned long long)r.ring.data(), (unsigned long long)r.can.data(), (unsigned long long)r.alt.data()};
        float *sc = t > 1 ? r.sc.data() : nullptr, *ss = t > 1 ? r.ss.data() : nullptr;
        if (entry == 2) {
            launch(G, 1, 128, [&] { gdn_step_fused_persistent(qkv.data(), br.data(), alpha.data(), tab, w.data(), dt.data(), al.data(), r.co.data(), r.o.data(), sc, ss, nk, nv, dc, t, eps, scale, B); });
        } else {
            const int cs = entry ? 2 : GDN_CS, cpc = (nv / nk) * 128 / cs;
            auto fused = entry ? gdn_step_fused_c2 : gdn_step_fused;
            g_reverse = true;
            launch(nk * cs, B, cpc < 128 ? cpc : 128, [&] { fused(qkv.data(), br.data(), alpha.data(), tab, w.data(), dt.data(), al.data(), r.co.data(), r.o.data(), sc, ss, nk, nv, dc, t, eps, scale); });
            g_reverse = false;
        }
        return r;
    };
    /* The reference: each sequence alone through the chained per-row kernels. */
    Out ref = fresh();
    for (int b = 0; b < B; ++b) {
        std::vector<float> fin(N);
        emu_rows(0, nk, nv, dc, t, w.data(), dt.data(), al.data(), eps, scale, qkv.data() + b * t * C, br.data() + b * t * nv,
                 alpha.data() + b * t * nv, ref.ring.data() + b * RL, s0.data() + b * N, ref.co.data() + b * t * C,
                 ref.o.data() + b * t * V, ref.sc.data() + b * (t - 1) * RL, ref.ss.data() + b * (t - 1) * N, fin.data());
        std::copy(fin.begin(), fin.end(), (t % 2 ? ref.alt : ref.can).begin() + b * N);
    }
    int bad = 0;
    const char *names[3] = {"gdn_step_fused", "gdn_step_fused_c2", "gdn_step_fused_persistent"};
    for (int entry = 0; entry < 3; ++entry) {
        const Out a = go(entry);
        int ebad = 0;
        auto cmp = [&](const char *name, const std::vector<float> &x, const std::vector<float> &y, size_t per) {
            size_t nd = 0, first = 0;
            for (size_t i = 0; i < x.size(); ++i) if (std::memcmp(&x[i], &y[i], 4)) { if (!nd) first = i; ++nd; }
            if (nd) { ++ebad; fprintf(stderr, "  %s: %s: %zu words differ, first at %zu (sequence %zu)\n", names[entry], name, nd, first, per ? first / per : 0); }
        };
        cmp("ring", a.ring, ref.ring, RL); cmp("final state", a.fin(t), ref.fin(t), N);
        cmp("conv_out", a.co, ref.co, t * C); cmp("o", a.o, ref.o, t * V);
        cmp("snap_conv", a.sc, ref.sc, (t - 1) * RL); cmp("snap_state", a.ss, ref.ss, (t - 1) * N);
        printf("batch nk %d nv %d dc %d t %d B %d G %d, %s: %s\n", nk, nv, dc, t, B, G, names[entry], ebad ? "DIFF" : "ok");
        bad += ebad;
    }
    return bad ? 1 : 0;
}

static std::vector<float> rd(size_t n) { std::vector<float> v(n); if (n && fread(v.data(), 4, n, stdin) != n) { fprintf(stderr, "short input\n"); exit(2); } return v; }
static void wr(const float *p, size_t n) { if (n) fwrite(p, 4, n, stdout); }
int main(int argc, char **argv) {
    if (argc == 3 && argv[1][0] == 'f') {
        size_t n = strtoull(argv[2], 0, 10);
        std::vector<float> xs = rd(n), out(5 * n);
        for (size_t i = 0; i < n; ++i) for (int k = 0; k < 5; ++k) out[5 * i + k] = emu_fn(k, xs[i]);
        wr(out.data(), out.size());
        return 0;
    }
    if (argc == 2 && argv[1][0] == 'x') {
        /* Every f32: gdn_silu_bf against gdn_silu, bit for bit (NaN: both). */
        const unsigned nt = std::max(1u, std::thread::hardware_concurrency());
        std::vector<unsigned long long> bad(nt, 0); std::vector<unsigned> first(nt, 0);
        std::vector<std::thread> ts;
        for (unsigned k = 0; k < nt; ++k) ts.emplace_back([&, k] {
            for (unsigned long long b = k; b <= 0xFFFFFFFFull; b += nt) {
                const float x = __uint_as_float((unsigned)b), a = gdn_silu_bf(x), c = gdn_silu(x);
                if (std::memcmp(&a, &c, 4) && !(a != a && c != c)) { if (!bad[k]++) first[k] = (unsigned)b; }
            }
        });
        for (auto &t : ts) t.join();
        unsigned long long n = 0; for (auto v : bad) n += v;
        printf("%llu", n); for (unsigned k = 0; k < nt; ++k) if (bad[k]) printf(" first 0x%08x", first[k]);
        printf("\n");
        return 0;
    }
    if (argc == 9 && argv[1][0] == 'b')
        return emu_batch(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), atoi(argv[5]), atoi(argv[6]), atoi(argv[7]), strtoull(argv[8], 0, 0));
    if (argc != 7) { fprintf(stderr, "usage: emu rows packed nk nv dc t | emu f n | emu batch nk nv dc t B G seed\n"); return 2; }
    int packed = atoi(argv[2]), nk = atoi(argv[3]), nv = atoi(argv[4]), dc = atoi(argv[5]), t = atoi(argv[6]);
    size_t C = 128 * (2 * nk + nv), V = 128 * nv, N = (size_t)nv * 128 * 128, RL = C * (dc - 1);
    std::vector<float> es = rd(2), w = rd(C * dc), dt = rd(nv), al = rd(nv), qkv = rd(t * C), br = rd(t * nv),
        alpha = rd(t * nv), ring = rd(RL), s0 = rd(N);
    std::vector<float> co(t * C), o(t * V), sc((t - 1) * RL), ss((t - 1) * N), fin(N);
    emu_rows(packed, nk, nv, dc, t, w.data(), dt.data(), al.data(), es[0], es[1], qkv.data(), br.data(), alpha.data(),
             ring.data(), s0.data(), co.data(), o.data(), sc.data(), ss.data(), fin.data());
    wr(co.data(), co.size()); wr(o.data(), o.size()); wr(sc.data(), sc.size()); wr(ss.data(), ss.size());
    wr(ring.data(), ring.size()); wr(fin.data(), fin.size());
    return 0;
}
"#;

/// Builds the emulator around the kernel source under test, in a folder of
/// its own per test (tests run in parallel); `None` (with a
/// note on stderr) when no usable host compiler is found.
fn emulator(test: &str) -> PathBuf {
    emulator_with(test, &[])
}

/// [`emulator`] with extra compiler arguments (`-DGDN_CS=8`: the fused
/// step's cluster split of sm_90, its CTAs run one after another).
fn emulator_with(test: &str, extra: &[&str]) -> PathBuf {
    let source = KernelSource::gdn_from_env().unwrap_or_else(|e| panic!("{e}"));
    let dir = std::env::temp_dir().join(format!("gdn-host-emu-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("gdn.cu"), source.text()).unwrap();
    std::fs::write(dir.join("emu.cpp"), HARNESS).unwrap();
    let bin = dir.join("emu");
    let out = Command::new("g++")
        .args([
            "-std=c++20",
            "-O2",
            "-ffp-contract=off",
            "-fno-fast-math",
            "-w",
            "-pthread",
            "-fsanitize=address,undefined",
            "-fno-sanitize-recover=all",
            "-fno-omit-frame-pointer",
        ])
        .args(extra)
        .arg(dir.join("emu.cpp"))
        .arg("-o")
        .arg(&bin)
        .output();
    match out {
        Ok(o) if o.status.success() => {
            eprintln!("host emulator of {} built", source.describe());
            bin
        }
        Ok(o) => panic!(
            "g++ could not build the host emulator of {}:\n{}",
            source.describe(),
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => panic!(
            "no g++ ({e}): the host emulation of cu/gdn.cu needs g++ >= 11 (apt-get install g++)"
        ),
    }
}

fn run(bin: &PathBuf, args: &[String], input: &[f32]) -> Vec<f32> {
    let mut child = Command::new(bin)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let bytes: Vec<u8> = input.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(&bytes));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(out.status.success(), "emulator failed: {:?}", out.status);
    out.stdout
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[path = "common/gdn_data.rs"]
mod gdn_data;
use gdn_data::{varied, with_specials, SPECIALS};

fn assert_bits(what: &str, got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(i) = (0..got.len()).find(|&i| got[i].to_bits() != want[i].to_bits()) {
        panic!(
            "{what}: first difference at {i}: kernel {:e} ({:#010x}), oracle {:e} ({:#010x})",
            got[i],
            got[i].to_bits(),
            want[i],
            want[i].to_bits()
        );
    }
}

/// exp, softplus, sigmoid and SiLU of the kernel source on every 4099th
/// binary32 (about a million inputs, every sign and exponent) and on the
/// specials, bit for bit (NaN results: any NaN).
#[test]
fn host_emulated_transcendentals_match_the_oracle() {
    let bin = emulator("fn");
    let mut xs: Vec<f32> = (0..=u32::MAX).step_by(4099).map(f32::from_bits).collect();
    xs.extend(SPECIALS);
    let out = run(&bin, &["f".into(), xs.len().to_string()], &xs);
    assert_eq!(out.len(), 5 * xs.len());
    let fs: [Named; 5] = [
        ("exp", exp),
        ("softplus", softplus),
        ("sigmoid", sigmoid),
        ("silu", silu),
        ("silu (branch-free form)", silu),
    ];
    for (i, &x) in xs.iter().enumerate() {
        for (k, (name, f)) in fs.iter().enumerate() {
            let (a, b) = (out[5 * i + k], f(x));
            assert!(
                a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                "{name}({x:e} = {:#010x}): kernel {a:e}, oracle {b:e}",
                x.to_bits()
            );
        }
    }
    remove(&bin);
}

/// The branch-free SiLU of the split fused step (`gdn_silu_bf`) equals
/// `gdn_silu` on every one of the 2^32 inputs, bit for bit (NaN for NaN).
#[test]
#[ignore = "exhaustive: every f32, about 3 minutes on two cores"]
fn branch_free_silu_matches_on_every_f32() {
    let bin = emulator("silu-x");
    let out = Command::new(&bin)
        .arg("x")
        .output()
        .expect("run the emulator");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        text.split_whitespace().next(),
        Some("0"),
        "mismatches: {text}"
    );
    remove(&bin);
}

/// Removes the emulator's folder (left behind when a test fails, for a look).
fn remove(bin: &std::path::Path) {
    if let Some(dir) = bin.parent() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

fn rows_case(bin: &PathBuf, num_k: usize, num_v: usize, d_conv: usize, t: usize) {
    rows_case_modes(bin, num_k, num_v, d_conv, t, &[0, 1]);
}

/// A rows case's inputs, in the order the emulator reads them after
/// `eps` and `scale`.
struct RowsInputs {
    w: Vec<f32>,
    dt: Vec<f32>,
    al: Vec<f32>,
    qkv: Vec<f32>,
    beta_raw: Vec<f32>,
    alpha: Vec<f32>,
    ring0: Vec<f32>,
    state0: Vec<f32>,
}

/// The inputs of `rows_case_modes` at this shape (reproducible, specials
/// mixed in; state 0.3).
fn rows_inputs(num_k: usize, num_v: usize, d_conv: usize, t: usize) -> RowsInputs {
    let s = GdnShape::new(num_k, num_v, 128, d_conv, t).unwrap();
    let seed = 100 * t as u64 + num_v as u64 + d_conv as u64;
    RowsInputs {
        w: varied(s.conv_w_len(), seed + 1, 0.5),
        dt: varied(num_v, seed + 2, 0.5),
        al: varied(num_v, seed + 3, 1.0),
        ring0: with_specials(s.ring_len(), seed + 10, 1.0),
        state0: varied(s.state_len(), seed + 20, 0.3),
        qkv: with_specials(t * s.conv_dim(), seed + 30, 1.0),
        beta_raw: with_specials(t * num_v, seed + 40, 2.0),
        alpha: with_specials(t * num_v, seed + 50, 2.0),
    }
}

fn rows_case_modes(
    bin: &PathBuf,
    num_k: usize,
    num_v: usize,
    d_conv: usize,
    t: usize,
    modes: &[usize],
) {
    let x = rows_inputs(num_k, num_v, d_conv, t);
    rows_check(bin, (num_k, num_v, d_conv, t), &x, modes);
}

/// Runs `x` through the emulator in each of `modes` and compares all six
/// outputs with the oracle's `decode_rows`, bit for bit; returns the
/// oracle's outputs (conv_out, o, snap_conv, snap_state, ring, final
/// state, concatenated).
fn rows_check(
    bin: &PathBuf,
    (num_k, num_v, d_conv, t): (usize, usize, usize, usize),
    x: &RowsInputs,
    modes: &[usize],
) -> Vec<f32> {
    let s = GdnShape::new(num_k, num_v, 128, d_conv, t).unwrap();
    let RowsInputs {
        w,
        dt,
        al,
        qkv,
        beta_raw,
        alpha,
        ring0,
        state0,
    } = x;
    let (eps, scale) = (1e-6f32, default_scale());
    let params = GdnParams {
        conv_w: w,
        dt_bias: dt,
        a_log: al,
        eps,
        scale,
    };
    let (n, rl, c, vd) = (s.state_len(), s.ring_len(), s.conv_dim(), s.value_dim());
    let mut ring = ring0.clone();
    let mut canonical = state0.clone();
    let mut alt = vec![0f32; n];
    let mut want = vec![0f32; t * c + t * vd + (t - 1) * rl + (t - 1) * n];
    let (co, rest) = want.split_at_mut(t * c);
    let (o, rest) = rest.split_at_mut(t * vd);
    let (sc, ss) = rest.split_at_mut((t - 1) * rl);
    let mut scratch = vec![0f32; s.scratch_len()];
    let input = RowInputs {
        qkv,
        beta_raw,
        alpha,
    };
    let states = StatePair {
        canonical: &mut canonical,
        alt: &mut alt,
    };
    let out = PackedOutputs {
        conv_out: co,
        o,
        snap_conv: sc,
        snap_state: ss,
    };
    let slot = decode_rows(&s, &params, &input, &mut ring, states, out, &mut scratch).unwrap();
    want.extend(&ring);
    want.extend(if slot == StateSlot::Alt {
        &alt
    } else {
        &canonical
    });
    let mut input = vec![eps, scale];
    for v in [w, dt, al, qkv, beta_raw, alpha, ring0, state0] {
        input.extend(v.iter());
    }
    for &packed in modes {
        let args: Vec<String> = ["rows".to_string(), packed.to_string()]
            .into_iter()
            .chain([num_k, num_v, d_conv, t].iter().map(|v| v.to_string()))
            .collect();
        let got = run(bin, &args, &input);
        let what = format!(
            "(num_k, num_v, d_conv, t) = ({num_k}, {num_v}, {d_conv}, {t}), {} \
             (outputs: conv_out, o, snap_conv, snap_state, ring, final state, concatenated)",
            [
                "chained per-row kernels",
                "packed twins",
                "fused step (one sequence's threads)",
                "fused step (a batch's threads)",
                "fused step, clusters of 2 (one sequence's threads)",
                "fused step, clusters of 2 (a batch's threads)",
                "fused step, persistent (one CTA per item)",
                "fused step, persistent (one CTA running every item)"
            ][packed]
        );
        assert_bits(&what, &got, &want);
    }
    want
}

/// The per-row trio chained and the packed twins, each equal to the
/// oracle's `decode_rows` on all six outputs.
#[test]
fn host_emulated_kernels_match_the_oracle_rows() {
    let bin = emulator("rows");
    for d_conv in 2..=4 {
        for t in [1, 2, 3, 8] {
            rows_case(&bin, 2, 4, d_conv, t);
        }
    }
    rows_case(&bin, 16, 32, 4, 3);
    rows_case(&bin, 1, 3, 3, 5);
    remove(&bin);
}

/// The fused step (both thread layouts) equal to the oracle's
/// `decode_rows` on all six outputs: with one CTA per q/k head (below
/// sm_90) and with sm_90's clusters of 8 CTAs splitting the state columns
/// (16, 32, 48, 64, 256 and 384 columns per CTA; whole q/k warps beside the
/// column warps, or every thread doing both), and over 32 rows (the table of
/// the heads' gates is refilled); the second entry (clusters of 2) and the
/// persistent entry (one CTA per item, and one CTA running every item and
/// every chunk: the prefetch of the next chunk's inputs and state) in the
/// same cases.
#[test]
fn host_emulated_fused_step_matches_the_oracle_rows() {
    // The clusters-of-2 and persistent entries (modes 4-7) do not depend
    // on GDN_CS: run them in the first binary only.
    for (name, extra, modes) in [
        ("fused1", &[][..], &[2, 3, 4, 5, 6, 7][..]),
        ("fused8", &["-DGDN_CS=8"][..], &[2, 3][..]),
    ] {
        let bin = emulator_with(name, extra);
        for d_conv in 2..=4 {
            for t in [1, 2, 3, 8] {
                rows_case_modes(&bin, 2, 4, d_conv, t, modes);
            }
        }
        rows_case_modes(&bin, 16, 32, 4, 3, modes);
        rows_case_modes(&bin, 1, 3, 3, 5, modes);
        rows_case_modes(&bin, 1, 1, 4, 2, modes);
        rows_case_modes(&bin, 1, 4, 4, 3, modes);
        rows_case_modes(&bin, 1, 16, 2, 2, modes);
        rows_case_modes(&bin, 1, 24, 4, 2, modes);
        rows_case_modes(&bin, 1, 2, 4, 34, modes);
        remove(&bin);
    }
}

/// A zero q/k head over an initial state negative in every element, at
/// (num_k, num_v) = (1, 2), t = 1 and 3, eps = 1e-6, every mode (the split
/// entry, and its one-row path at t = 1, in the clusters-of-8 binary). The
/// head's conv weights are zero, so q = k = +0 after the norm; the update
/// adds `k_i delta = +0`, the decay keeps the sign, so every state stays
/// negative and every term `c''_i q_i` of every o sum is `-0`. The
/// contract sums from `+0` (rule `READ-AFTER`): o is `+0`, where a sum
/// seeded with its first term gives `-0` (planted as
/// `split-t1-sum-seeded`). The inputs elsewhere are `rows_case_modes`'.
#[test]
fn host_emulated_zero_head_over_a_negative_state_sums_from_plus_zero() {
    let (num_k, num_v, d_conv) = (1, 2, 4);
    for (name, extra, modes) in [
        ("negzero1", &[][..], &[0, 1, 2, 3, 4, 5, 6, 7][..]),
        ("negzero8", &["-DGDN_CS=8"][..], &[2, 3][..]),
    ] {
        let bin = emulator_with(name, extra);
        for t in [1, 3] {
            let mut x = rows_inputs(num_k, num_v, d_conv, t);
            // q head 0 (channels 0..127) and k head 0 (128..255), every tap.
            x.w[..2 * 128 * d_conv].fill(0.0);
            for v in &mut x.state0 {
                *v = -v.abs();
            }
            let want = rows_check(&bin, (num_k, num_v, d_conv, t), &x, modes);
            // The case reaches the gap: o is +0, every state after every
            // row (snapshots, final) negative in every element.
            let s = GdnShape::new(num_k, num_v, 128, d_conv, t).unwrap();
            let (c, vd, rl, n) = (s.conv_dim(), s.value_dim(), s.ring_len(), s.state_len());
            let o = &want[t * c..t * c + t * vd];
            assert!(o.iter().all(|x| x.to_bits() == 0), "t = {t}: o is +0");
            let snap_state = &want[t * c + t * vd + (t - 1) * rl..][..(t - 1) * n];
            let fin = &want[want.len() - n..];
            assert!(
                snap_state.iter().chain(fin).all(|x| x.is_sign_negative()),
                "t = {t}: every state negative"
            );
        }
        remove(&bin);
    }
}

/// The batched entries over batches (several sequences, items of two or
/// more sequences on one CTA of the persistent entry, several chunks per
/// item at ratio 2 and more, 1 to 4 CTAs, one more CTA than items):
/// `gdn_step_fused`, `gdn_step_fused_c2` and `gdn_step_fused_persistent`
/// each bit-identical, sequence by sequence, to every sequence run alone
/// through the chained per-row kernels (themselves checked against the
/// oracle above): conv outputs, o, both snapshots, the ring and the final
/// state, and nothing written past the snapshots. A sequence offset the
/// entries share (`gdn_seq`, the body's output blocks) is wrong in all of
/// them alike, so the entries are not compared with one another. Run in
/// both binaries (`gdn_step_fused` with one CTA per q/k head, and with
/// sm_90's clusters of 8), with the emulator's asynchronous copies: a read
/// of a stage before its wait, or a prefetch into memory still being read,
/// differs.
#[test]
fn host_emulated_batches_match_each_sequence_alone() {
    let mut cases = 0;
    for (name, extra) in [("batch1", &[][..]), ("batch8", &["-DGDN_CS=8"][..])] {
        let bin = emulator_with(name, extra);
        for &(nk, nv, dc, t, b, g) in &[
            (2, 4, 4, 1, 3, 1),
            (2, 4, 4, 1, 3, 2),
            (2, 4, 4, 3, 3, 2),
            (2, 4, 3, 2, 2, 4),
            (1, 3, 3, 2, 3, 2),
            (1, 1, 2, 4, 3, 2),
            (1, 4, 4, 5, 2, 1),
            (1, 4, 3, 1, 3, 2),
            (1, 3, 3, 1, 3, 2),
            (4, 4, 4, 1, 2, 3),
            (2, 2, 2, 3, 4, 3),
            (2, 8, 3, 2, 2, 3),
            (1, 2, 4, 1, 2, 3),
        ] {
            let args: Vec<String> = ["batch".to_string()]
                .into_iter()
                .chain([nk, nv, dc, t, b, g].iter().map(|v| v.to_string()))
                .chain(["0x5a17".to_string()])
                .collect();
            let out = Command::new(&bin).args(&args).output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && text.matches(": ok").count() == 3,
                "{name}: batch {args:?}: {:?}\n{text}{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
            cases += 1;
        }
        remove(&bin);
    }
    assert_eq!(cases, 26);
}
