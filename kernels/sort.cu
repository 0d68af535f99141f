// sort.cu: stable least-significant-digit radix sort of u32 keys with u32 values.
//
// One pass per GS_RADIX_BITS-bit digit; the host (src/render/cuda/sort.rs) runs only the passes
// that cover the key's significant bits (32 for depths, ceil(log2(tiles)) for tile ids).
// Per pass: radix_histogram counts each block's digits into hist[digit · blocks + block]
// (digit-major, so one exclusive scan yields every (digit, block) output base), then
// radix_scatter writes each element to base + its rank among equal digits in its block.
// The rank is computed in element order (warp-major, lane-minor), which makes every pass, and
// so the whole sort, stable.
#include "common.cuh"

#define GS_RADIX (1u << GS_RADIX_BITS)
#define GS_RADIX_MASK (GS_RADIX - 1u)
#define GS_SORT_WARPS (GS_SORT_BLOCK / 32)

#if GS_SORT_BLOCK % 32 != 0 || GS_RADIX > GS_SORT_BLOCK
#error "GS_SORT_BLOCK must be a multiple of 32 and at least the radix"
#endif

extern "C" __global__ void radix_histogram(
    u64 m,
    const u32* __restrict__ keys,  // [M]
    u32 shift,                     // bit offset of this pass's digit (< 32)
    u32* __restrict__ hist)        // [GS_RADIX, blocks] out, blocks = ceil(M / GS_SORT_BLOCK)
{
    __shared__ u32 h[GS_RADIX];
    for (u32 d = threadIdx.x; d < GS_RADIX; d += blockDim.x) h[d] = 0;
    __syncthreads();
    const u64 i = (u64)blockIdx.x * GS_SORT_BLOCK + threadIdx.x;
    if (i < m) atomicAdd(&h[(keys[i] >> shift) & GS_RADIX_MASK], 1u);
    __syncthreads();
    for (u32 d = threadIdx.x; d < GS_RADIX; d += blockDim.x)
        hist[(u64)d * gridDim.x + blockIdx.x] = h[d];
}

extern "C" __global__ void radix_scatter(
    u64 m,
    const u32* __restrict__ keys_in,   // [M]
    const u32* __restrict__ vals_in,   // [M]
    u32 shift,
    const u32* __restrict__ hist,      // [GS_RADIX, blocks] exclusive-scanned
    u32* __restrict__ keys_out,        // [M] out
    u32* __restrict__ vals_out)        // [M] out
{
    __shared__ u32 cnt[GS_SORT_WARPS][GS_RADIX];
    const u32 tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    for (u32 k = tid; k < GS_SORT_WARPS * GS_RADIX; k += blockDim.x) (&cnt[0][0])[k] = 0;
    __syncthreads();
    const u64 i = (u64)blockIdx.x * GS_SORT_BLOCK + tid;
    const bool valid = i < m;
    const u32 key = valid ? keys_in[i] : 0u;
    // Out-of-range lanes get a digit no real key has, so they only match each other.
    const u32 digit = valid ? ((key >> shift) & GS_RADIX_MASK) : GS_RADIX;
    const u32 peers = __match_any_sync(0xffffffffu, digit);
    const u32 rank = __popc(peers & ((1u << lane) - 1u));
    if (valid && rank == 0) cnt[warp][digit] = __popc(peers);
    __syncthreads();
    // Exclusive prefix over warps, one thread per digit.
    if (tid < GS_RADIX) {
        u32 run = 0;
        for (u32 w = 0; w < GS_SORT_WARPS; ++w) {
            const u32 c = cnt[w][tid];
            cnt[w][tid] = run;
            run += c;
        }
    }
    __syncthreads();
    if (!valid) return;
    const u64 pos = (u64)hist[(u64)digit * gridDim.x + blockIdx.x] + cnt[warp][digit] + rank;
    keys_out[pos] = key;
    vals_out[pos] = vals_in[i];
}
