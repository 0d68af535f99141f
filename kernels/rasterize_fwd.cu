// rasterize_fwd.cu: one block per 16×16 tile, one thread per pixel, front to back. Twin of
// cpu::rasterize::rasterize_fwd (its module doc has the rules: skip σ < 0 and α < 1/255, α ≤ 0.999, stop
// before T would fall below 1e-4). The tile's depth-sorted list is staged through shared
// memory in batches of GS_BLOCK_PIXELS splats, each thread loading one; the block stops early
// once every pixel is done. Every pixel of the image is written exactly once.
// With with_depth != 0 it also composites the inverse-depth plane Σ wᵢ/zᵢ (the colour's
// weights, background 0; depths are the splats' camera-space z) into inv_depth: a fourth
// channel, the colour arithmetic unchanged. with_depth is uniform over the launch.
#include "common.cuh"
#include "raster.cuh"

extern "C" __global__ void rasterize_fwd(
    const u32* __restrict__ ranges,      // [T, 2] per-tile [start, end) into ids
    const u32* __restrict__ ids,         // [M] Gaussian index per sorted intersection
    const float* __restrict__ means2d,   // [N, 2]
    const float* __restrict__ conics,    // [N, 3]
    const float* __restrict__ opacities, // [N]
    const float* __restrict__ colors,    // [N, 3]
    u32 width, u32 height, u32 tiles_x,
    float bg_r, float bg_g, float bg_b,
    float* __restrict__ image,           // [H, W, 3] out
    float* __restrict__ final_t,         // [H, W] out
    u32* __restrict__ last,              // [H, W] out: list entries up to the last contributor
    u32 with_depth,                      // 1: depths is read and inv_depth written
    const float* __restrict__ depths,    // [N] camera-space z
    float* __restrict__ inv_depth)       // [H, W] out
{
    __shared__ Packed batch[GS_BLOCK_PIXELS];
    const u32 tile = blockIdx.y * tiles_x + blockIdx.x;
    const u32 px = blockIdx.x * GS_TILE_SIZE + threadIdx.x;
    const u32 py = blockIdx.y * GS_TILE_SIZE + threadIdx.y;
    const u32 tid = threadIdx.y * GS_TILE_SIZE + threadIdx.x;
    const bool inside = px < width && py < height;
    const float fx = (float)px + 0.5f, fy = (float)py + 0.5f;
    const u32 start = ranges[2 * tile], end = ranges[2 * tile + 1];

    bool done = !inside;
    float t = 1.0f;
    float col[3] = {0.0f, 0.0f, 0.0f};
    float dep = 0.0f;
    u32 last_k = 0;
    for (u32 b0 = start; b0 < end; b0 += GS_BLOCK_PIXELS) {
        // Every thread reaches this barrier each round, so the early exit is block-uniform.
        if (__syncthreads_count(done) == GS_BLOCK_PIXELS) break;
        if (b0 + tid < end) {
            const u32 g = ids[b0 + tid];
            batch[tid] = load_packed(g, means2d, conics, opacities, colors);
            if (with_depth != 0u) batch[tid].inv_z = 1.0f / depths[g];
        }
        __syncthreads();
        const u32 cnt = min((u32)GS_BLOCK_PIXELS, end - b0);
        for (u32 j = 0; j < cnt && !done; ++j) {
            const Packed& s = batch[j];
            float dx, dy, gauss, alpha;
            if (!splat_alpha(s, fx, fy, dx, dy, gauss, alpha)) continue;
            const float next_t = t * (1.0f - alpha);
            if (next_t < (float)GS_T_MIN) { done = true; break; }
            const float w = alpha * t;
#pragma unroll
            for (int ch = 0; ch < 3; ++ch) col[ch] += s.color[ch] * w;
            dep += s.inv_z * w;
            t = next_t;
            last_k = b0 - start + j + 1;
        }
    }
    if (!inside) return;
    const u32 p = py * width + px;
    image[3 * p] = col[0] + t * bg_r;
    image[3 * p + 1] = col[1] + t * bg_g;
    image[3 * p + 2] = col[2] + t * bg_b;
    final_t[p] = t;
    last[p] = last_k;
    if (with_depth != 0u) inv_depth[p] = dep;
}
