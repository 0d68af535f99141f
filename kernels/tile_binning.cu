// tile_binning.cu: emits one (tile id | depth) key per (Gaussian, touched tile) pair, and,
// after the sort, finds each tile's range in the sorted list. Twin of cpu::binning.
//
// Key layout (u64): bits 63..32 tile id (row-major ty·tiles_x + tx), bits 31..0 the IEEE bits
// of the camera depth. Kept depths are > GS_NEAR_PLANE > 0 and finite, and positive finite
// floats order like their bit patterns, so sorting keys sorts by (tile, depth). Keys are
// emitted in Gaussian-index order (offsets come from an exclusive scan over indices) and the
// radix sort is stable, so equal depths stay in index order: the CPU's (depth, index) rule.
#include "common.cuh"

extern "C" __global__ void emit_keys(
    u32 n,
    const float* __restrict__ means2d,  // [N, 2]
    const u32* __restrict__ radii,      // [N]
    const float* __restrict__ depths,   // [N]
    const u64* __restrict__ offsets,    // [N + 1] exclusive scan of tiles touched
    u32 tiles_x, u32 tiles_y,
    u64* __restrict__ keys,             // [M] out, M = offsets[N]
    u32* __restrict__ ids)              // [M] out
{
    const u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n || radii[i] == 0) return;
    u32 x0, x1, y0, y1;
    tile_rect(means2d[2 * i], means2d[2 * i + 1], (float)radii[i], tiles_x, tiles_y, x0, x1, y0,
              y1);
    const u64 depth_bits = (u64)__float_as_uint(depths[i]);
    u64 off = offsets[i];
    for (u32 ty = y0; ty < y1; ++ty)
        for (u32 tx = x0; tx < x1; ++tx) {
            keys[off] = ((u64)(ty * tiles_x + tx) << 32) | depth_bits;
            ids[off] = i;
            ++off;
        }
}

// ranges must be zeroed by the host first: tiles with no intersection keep [0, 0).
extern "C" __global__ void tile_ranges(
    u64 m,
    const u64* __restrict__ keys,  // [M] sorted
    u32* __restrict__ ranges)      // [T, 2] out: [start, end) per tile
{
    const u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= m) return;
    const u32 tile = (u32)(keys[i] >> 32);
    if (i == 0 || (u32)(keys[i - 1] >> 32) != tile) ranges[2 * tile] = (u32)i;
    if (i == m - 1 || (u32)(keys[i + 1] >> 32) != tile) ranges[2 * tile + 1] = (u32)(i + 1);
}
