// sort.cu: stable least-significant-digit radix sort of u32 keys with u32 values.
//
// One pass per GS_RADIX_BITS-bit digit; the host (src/render/cuda/sort.rs) runs only the passes
// that cover the key's significant bits (32 for depths, ceil(log2(tiles)) for tile ids). Each
// block owns a tile of GS_SORT_TILE consecutive elements, GS_SORT_ITEMS per thread, visited in
// rounds of GS_SORT_BLOCK (round r, thread t: element r·GS_SORT_BLOCK + t, so loads coalesce
// and the rounds walk the tile in element order). Per pass:
//   radix_histogram counts each tile's digits into hist[digit · blocks + block] (digit-major,
//   so one exclusive scan yields every (digit, block) output base);
//   radix_scatter ranks every element among the tile's elements of its digit, in element order
//   (warp-major, lane-minor within a round, rounds in order), which makes every pass, and so
//   the whole sort, stable. It then reorders the tile by digit in shared memory and writes it
//   out in that order: a digit's elements leave as one run of consecutive addresses, so a
//   warp's stores land on a few runs instead of 32 scattered words.
// Tiles of several rounds also make the histogram (one counter per digit and tile) a fraction
// GS_RADIX / GS_SORT_TILE of the elements, which the scan between the two kernels walks.
#include "common.cuh"

#define GS_RADIX (1u << GS_RADIX_BITS)
#define GS_RADIX_MASK (GS_RADIX - 1u)
#define GS_SORT_WARPS (GS_SORT_BLOCK / 32)
#define GS_SORT_TILE (GS_SORT_BLOCK * GS_SORT_ITEMS)
#define GS_RADIX_PER_LANE (GS_RADIX / 32)

#if GS_SORT_BLOCK % 32 != 0 || GS_RADIX > GS_SORT_BLOCK || GS_RADIX % 32 != 0
#error "GS_SORT_BLOCK must be a multiple of 32 and at least the radix, a multiple of 32"
#endif

// The digit of an element, or GS_RADIX (a digit no key has) for a slot past the end, so that
// such lanes only ever match each other.
__device__ __forceinline__ u32 radix_digit(bool valid, u32 key, u32 shift) {
    return valid ? ((key >> shift) & GS_RADIX_MASK) : GS_RADIX;
}

extern "C" __global__ void radix_histogram(
    u64 m,
    const u32* __restrict__ keys,  // [M]
    u32 shift,                     // bit offset of this pass's digit (< 32)
    u32* __restrict__ hist)        // [GS_RADIX, blocks] out, blocks = ceil(M / GS_SORT_TILE)
{
    __shared__ u32 h[GS_RADIX];
    const u32 lane = threadIdx.x % 32;
    for (u32 d = threadIdx.x; d < GS_RADIX; d += GS_SORT_BLOCK) h[d] = 0;
    __syncthreads();
    const u64 base = (u64)blockIdx.x * GS_SORT_TILE;
#pragma unroll
    for (u32 r = 0; r < GS_SORT_ITEMS; ++r) {
        const u64 i = base + (u64)r * GS_SORT_BLOCK + threadIdx.x;
        const bool valid = i < m;
        const u32 digit = radix_digit(valid, valid ? keys[i] : 0u, shift);
        // One shared atomic per distinct digit in the warp: the pairs of one splat share
        // their high tile digits, so lanes often agree.
        const u32 peers = __match_any_sync(0xffffffffu, digit);
        if (valid && (peers & ((1u << lane) - 1u)) == 0) atomicAdd(&h[digit], (u32)__popc(peers));
    }
    __syncthreads();
    for (u32 d = threadIdx.x; d < GS_RADIX; d += GS_SORT_BLOCK)
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
    __shared__ u32 s_keys[GS_SORT_TILE];          // the tile, reordered by digit
    __shared__ u32 s_vals[GS_SORT_TILE];
    __shared__ u32 cnt[GS_SORT_WARPS][GS_RADIX];  // this round's count per (warp, digit); 0 between rounds
    __shared__ u32 off[GS_SORT_WARPS][GS_RADIX];  // tile elements of the digit before the warp's
    __shared__ u32 seen[GS_RADIX];                // tile elements of the digit in earlier rounds
    __shared__ u32 start[GS_RADIX];               // the digit's first slot in the reordered tile
    __shared__ u32 out_base[GS_RADIX];            // the digit's first output position of the tile
    const u32 tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const u64 base = (u64)blockIdx.x * GS_SORT_TILE;
    const u32 len = (u32)(m - base < (u64)GS_SORT_TILE ? m - base : (u64)GS_SORT_TILE);
    for (u32 k = tid; k < GS_SORT_WARPS * GS_RADIX; k += GS_SORT_BLOCK) (&cnt[0][0])[k] = 0;
    for (u32 d = tid; d < GS_RADIX; d += GS_SORT_BLOCK) {
        seen[d] = 0;
        out_base[d] = hist[(u64)d * gridDim.x + blockIdx.x];
    }
    __syncthreads();

    // 1. Each element's rank among the tile's elements of its digit that precede it.
    u32 key[GS_SORT_ITEMS], rank[GS_SORT_ITEMS];
#pragma unroll
    for (u32 r = 0; r < GS_SORT_ITEMS; ++r) {
        const u32 e = r * GS_SORT_BLOCK + tid;
        const bool valid = e < len;
        key[r] = valid ? keys_in[base + e] : 0u;
        const u32 digit = radix_digit(valid, key[r], shift);
        const u32 peers = __match_any_sync(0xffffffffu, digit);
        const u32 below = __popc(peers & ((1u << lane) - 1u));
        if (valid && below == 0) cnt[warp][digit] = __popc(peers);
        __syncthreads();
        // Exclusive prefix over warps, one thread per digit, continuing from the earlier
        // rounds; it also clears cnt for the next round (whose writes follow the barrier
        // below). off is rewritten only after the next round's first barrier, by which time
        // every thread has read this round's value.
        if (tid < GS_RADIX) {
            u32 run = seen[tid];
            for (u32 w = 0; w < GS_SORT_WARPS; ++w) {
                const u32 c = cnt[w][tid];
                cnt[w][tid] = 0;
                off[w][tid] = run;
                run += c;
            }
            seen[tid] = run;
        }
        __syncthreads();
        rank[r] = valid ? off[warp][digit] + below : 0u;
    }

    // 2. The digits' starts in the reordered tile: an exclusive scan of the tile's counts, by
    // warp 0, GS_RADIX_PER_LANE consecutive digits per lane.
    if (warp == 0) {
        u32 c[GS_RADIX_PER_LANE];
        u32 sum = 0;
#pragma unroll
        for (u32 j = 0; j < GS_RADIX_PER_LANE; ++j) {
            c[j] = seen[lane * GS_RADIX_PER_LANE + j];
            sum += c[j];
        }
        u32 incl = sum;  // inclusive scan of the lanes' sums
#pragma unroll
        for (u32 d = 1; d < 32; d <<= 1) {
            const u32 up = __shfl_up_sync(0xffffffffu, incl, d);
            if (lane >= d) incl += up;
        }
        u32 run = incl - sum;
#pragma unroll
        for (u32 j = 0; j < GS_RADIX_PER_LANE; ++j) {
            start[lane * GS_RADIX_PER_LANE + j] = run;
            run += c[j];
        }
    }
    __syncthreads();  // start is written

    // 3. The tile, reordered by digit (stable: ranks follow element order).
#pragma unroll
    for (u32 r = 0; r < GS_SORT_ITEMS; ++r) {
        const u32 e = r * GS_SORT_BLOCK + tid;
        if (e < len) {
            const u32 slot = start[(key[r] >> shift) & GS_RADIX_MASK] + rank[r];
            s_keys[slot] = key[r];
            s_vals[slot] = vals_in[base + e];
        }
    }
    __syncthreads();  // the reordered tile is complete

    // 4. Out in reordered order: slot j of digit d goes to d's base for this tile plus
    // j − start[d] (its rank), so consecutive slots of a digit are consecutive addresses.
#pragma unroll
    for (u32 r = 0; r < GS_SORT_ITEMS; ++r) {
        const u32 j = r * GS_SORT_BLOCK + tid;
        if (j < len) {
            const u32 k = s_keys[j];
            const u32 d = (k >> shift) & GS_RADIX_MASK;
            const u64 pos = (u64)out_base[d] + (j - start[d]);
            keys_out[pos] = k;
            vals_out[pos] = s_vals[j];
        }
    }
}
