// tile_binning.cu: orders the (Gaussian, touched tile) pairs by (tile, depth, index), then finds
// each tile's range in the sorted list. Twin of cpu::binning.
//
// Two sorts instead of one 64-bit sort over every pair: the Gaussians are first sorted by
// depth (depth_keys → 32-bit radix sort over N), their pairs are emitted in that order
// (gather_counts → exclusive scan → emit_keys), and the pairs are then sorted stably by tile
// id alone (ceil(log2 tiles) bits over M pairs). Stability keeps depth order inside a tile, and
// the depth sort is stable over indices, so ties keep index order: exactly the CPU's
// (tile, depth, index) rule, with 4 radix passes over N and 2 over M (1080p) instead of 6
// over M.
//
// Keys are u32 in both sorts: the IEEE bits of the camera depth (kept depths are
// > GS_NEAR_PLANE > 0 and finite, and positive finite floats order like their bit patterns),
// then the tile id alone (row-major ty·tiles_x + tx), since the pairs already come in depth
// order. Half the bytes a (tile | depth) u64 key would move through every pass.
#include "common.cuh"

// One key per Gaussian for the depth sort: its depth bits (0 for a culled Gaussian, which
// touches no tile), and its index as the value.
extern "C" __global__ void depth_keys(
    u32 n,
    const float* __restrict__ depths,  // [N]
    const u32* __restrict__ radii,     // [N]
    u32* __restrict__ keys,            // [N] out
    u32* __restrict__ ids)             // [N] out
{
    const u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    keys[i] = radii[i] ? __float_as_uint(depths[i]) : 0u;
    ids[i] = i;
}

// counts[k] = tiles touched by the k-th Gaussian in depth order; counts[n] = 0 (the exclusive
// scan turns it into the total).
extern "C" __global__ void gather_counts(
    u32 n,
    const u32* __restrict__ order,          // [N] Gaussian indices in depth order
    const u64* __restrict__ tiles_touched,  // [N] by Gaussian index
    u64* __restrict__ counts)               // [N + 1] out
{
    const u32 k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k == 0) counts[n] = 0;
    if (k >= n) return;
    counts[k] = tiles_touched[order[k]];
}

// Thread k emits the pairs of the k-th Gaussian in depth order, at offsets[k]: the tiles
// project_fwd counted, from the same stored floats through the same Reach. The writes stop at
// offsets[k + 1] all the same, so no disagreement could ever write out of its range.
extern "C" __global__ void emit_keys(
    u32 n,
    const u32* __restrict__ order,        // [N] Gaussian indices in depth order
    const float* __restrict__ means2d,    // [N, 2]
    const float* __restrict__ conics,     // [N, 3]
    const float* __restrict__ opacities,  // [N]
    const u32* __restrict__ radii,        // [N]
    const u64* __restrict__ offsets,      // [N + 1] exclusive scan of counts (depth order)
    u32 tiles_x, u32 tiles_y,
    u32* __restrict__ keys,               // [M] out, M = offsets[N]: tile ids
    u32* __restrict__ ids)                // [M] out
{
    const u32 k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= n) return;
    u64 off = offsets[k];
    const u64 end = offsets[k + 1];
    // No tiles: culled (radius 0), or too faint to reach any pixel.
    if (off == end) return;
    const u32 i = order[k];
    const float conic[3] = {conics[3 * i], conics[3 * i + 1], conics[3 * i + 2]};
    Reach r;
    if (!reach_of(means2d[2 * i], means2d[2 * i + 1], conic, opacities[i], (float)radii[i],
                  tiles_x, tiles_y, r))
        return;
    for (u32 ty = r.y0; ty < r.y1; ++ty) {
        u32 lo, hi;
        reach_row(r, ty, lo, hi);
        for (u32 tx = lo; tx < hi && off < end; ++tx) {
            keys[off] = ty * tiles_x + tx;
            ids[off] = i;
            ++off;
        }
    }
}

// ranges must be zeroed by the host first: tiles with no intersection keep [0, 0).
extern "C" __global__ void tile_ranges(
    u64 m,
    const u32* __restrict__ keys,  // [M] sorted tile ids
    u32* __restrict__ ranges)      // [T, 2] out: [start, end) per tile
{
    const u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= m) return;
    const u32 tile = keys[i];
    if (i == 0 || keys[i - 1] != tile) ranges[2 * tile] = (u32)i;
    if (i == m - 1 || keys[i + 1] != tile) ranges[2 * tile + 1] = (u32)(i + 1);
}
