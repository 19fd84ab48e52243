/*
 * cu/bit_diff.cu -- the judge's device-side equality of two runs' outputs:
 * how many 32-bit words of two equal-length arrays differ, and the first
 * that does. Part of the harness, not of a kernel under test: no candidate
 * replaces it. A count of 0 is the whole evidence behind a run judged the
 * same as its reference without a read-back (src/gdn/run.rs, Got::Same: it
 * takes the reference's verdict); a run that differs here is read back and
 * compared on the host, element by element (src/gdn/judge.rs). The judge
 * also reads back every run of one fuzz case in 8, and of every gate and
 * `case` run, and fails a row where this count and the host's disagree.
 *
 * Compiled at run time by NVRTC (device::cuda::bitdiff) for the device's
 * compute capability; no header.
 *
 * extern "C" __global__ void bit_diff_u32(
 *     const unsigned *a, const unsigned *b,  // [n] each
 *     unsigned long long n,
 *     unsigned long long *out)               // [2]: out[0] += the words that
 *                                            // differ; out[1] = min(out[1],
 *                                            // the first index that does)
 *   The caller sets out = { 0, ~0 } before the first launch; several
 *   launches may accumulate into one pair. Launch: any 1-D grid (grid-stride
 *   loop), blockDim.x a multiple of 32.
 */

typedef unsigned long long u64;

extern "C" __global__ void bit_diff_u32(const unsigned *__restrict__ a,
                                        const unsigned *__restrict__ b, u64 n, u64 *out)
{
    u64 count = 0, first = ~0ull;
    const u64 stride = (u64)gridDim.x * blockDim.x;
    /* A thread's indices grow, so its first difference is its smallest. */
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        if (a[i] != b[i]) {
            if (count == 0) first = i;
            ++count;
        }
    }
    for (int off = 16; off > 0; off >>= 1) {
        count += __shfl_down_sync(0xffffffffu, count, off);
        const u64 f = __shfl_down_sync(0xffffffffu, first, off);
        first = f < first ? f : first;
    }
    if ((threadIdx.x & 31) == 0 && count != 0) {
        atomicAdd(out, count);
        atomicMin(out + 1, first);
    }
}
