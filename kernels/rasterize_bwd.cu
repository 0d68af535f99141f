// rasterize_bwd.cu: one block per tile, one thread per pixel, back to front from each pixel's
// last contributor using the stored final transmittance (T before a splat = T after / (1−α)).
// Twin of cpu::rasterize::rasterize_bwd. Per-splat gradients are summed over the 32 pixels of
// a warp with shuffles, then one lane adds them to global memory atomically (float atomics:
// the summation order, hence the last bits, vary run to run — parity tolerances allow it).
// The gradient outputs must be zeroed by the host before launch (they are accumulators).
// With absgrad != 0 it also sums |per-pixel ∂L/∂mean2d| componentwise into v_means2d_abs
// (AbsGS's statistic, gsplat's absgrad); absgrad is uniform over the launch, so every lane
// takes the same branch around the shuffles. With with_depth != 0 (uniform too) the
// inverse-depth plane is a fourth channel (value 1/z per splat, background 0): its ∂L/∂D
// joins ∂L/∂α and each splat's ∂L/∂(1/z) is summed into v_inv_depths (twin of the CPU's).
#include "common.cuh"
#include "raster.cuh"

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    return v;
}

extern "C" __global__ void rasterize_bwd(
    const u32* __restrict__ ranges,       // [T, 2]
    const u32* __restrict__ ids,          // [M]
    const float* __restrict__ means2d,    // [N, 2]
    const float* __restrict__ conics,     // [N, 3]
    const float* __restrict__ opacities,  // [N]
    const float* __restrict__ colors,     // [N, 3]
    u32 width, u32 height, u32 tiles_x,
    float bg_r, float bg_g, float bg_b,
    const float* __restrict__ final_t,    // [H, W] from rasterize_fwd
    const u32* __restrict__ last,         // [H, W] from rasterize_fwd
    const float* __restrict__ d_image,    // [H, W, 3]
    float* __restrict__ v_means2d,        // [N, 2] accumulated
    float* __restrict__ v_conics,         // [N, 3] accumulated
    float* __restrict__ v_colors,         // [N, 3] accumulated
    float* __restrict__ v_opacities,      // [N] accumulated
    u32 absgrad,                          // 1: also accumulate v_means2d_abs
    float* __restrict__ v_means2d_abs,    // [N, 2] accumulated (read only when absgrad)
    u32 with_depth,                       // 1: the inverse-depth plane's gradient too
    const float* __restrict__ depths,     // [N] camera-space z
    const float* __restrict__ d_inv_depth,  // [H, W] ∂L/∂D
    float* __restrict__ v_inv_depths)     // [N] accumulated ∂L/∂(1/z)
{
    __shared__ Packed batch[GS_BLOCK_PIXELS];
    __shared__ u32 batch_ids[GS_BLOCK_PIXELS];
    __shared__ u32 max_last;
    const u32 tile = blockIdx.y * tiles_x + blockIdx.x;
    const u32 px = blockIdx.x * GS_TILE_SIZE + threadIdx.x;
    const u32 py = blockIdx.y * GS_TILE_SIZE + threadIdx.y;
    const u32 tid = threadIdx.y * GS_TILE_SIZE + threadIdx.x;
    const bool inside = px < width && py < height;
    const float fx = (float)px + 0.5f, fy = (float)py + 0.5f;
    const u32 start = ranges[2 * tile], end = ranges[2 * tile + 1];
    const u32 p = inside ? py * width + px : 0;
    const u32 n_last = inside ? last[p] : 0;
    if (tid == 0) max_last = 0;
    __syncthreads();
    atomicMax(&max_last, n_last);
    __syncthreads();
    const u32 todo = max_last;  // no pixel of this tile reads entries at or beyond it

    const float t_final = inside ? final_t[p] : 1.0f;
    float dpix[3] = {0.0f, 0.0f, 0.0f};
    if (inside) {
        dpix[0] = d_image[3 * p];
        dpix[1] = d_image[3 * p + 1];
        dpix[2] = d_image[3 * p + 2];
    }
    const float d_bg = bg_r * dpix[0] + bg_g * dpix[1] + bg_b * dpix[2];
    const float ddep = (with_depth != 0u && inside) ? d_inv_depth[p] : 0.0f;
    float acc_dep = 0.0f;
    float last_inv_z = 0.0f;
    float t = t_final;
    float acc[3] = {0.0f, 0.0f, 0.0f};
    float last_alpha = 0.0f;
    float last_color[3] = {0.0f, 0.0f, 0.0f};

    // Batches cover list positions [hi − GS_BLOCK_PIXELS, hi), walking hi down from `todo`.
    for (u32 hi = todo; hi > 0;) {
        const u32 lo = hi > GS_BLOCK_PIXELS ? hi - GS_BLOCK_PIXELS : 0;
        __syncthreads();  // the previous batch is no longer read
        if (lo + tid < hi) {
            const u32 g = ids[start + lo + tid];
            batch_ids[tid] = g;
            batch[tid] = load_packed(g, means2d, conics, opacities, colors);
            if (with_depth != 0u) batch[tid].inv_z = 1.0f / depths[g];
        }
        __syncthreads();
        for (u32 k = hi; k-- > lo;) {
            const Packed& s = batch[k - lo];
            float g_m0 = 0.0f, g_m1 = 0.0f, g_c0 = 0.0f, g_c1 = 0.0f, g_c2 = 0.0f;
            float g_a0 = 0.0f, g_a1 = 0.0f;
            float g_col[3] = {0.0f, 0.0f, 0.0f};
            float g_o = 0.0f;
            float g_dep = 0.0f;
            bool contributes = false;
            float dx, dy, gauss, alpha;
            if (k < n_last && splat_alpha(s, fx, fy, dx, dy, gauss, alpha)) {
                contributes = true;
                const float one_minus = 1.0f - alpha;
                t /= one_minus;
                const float w = alpha * t;
                float d_alpha = 0.0f;
#pragma unroll
                for (int ch = 0; ch < 3; ++ch) {
                    acc[ch] = last_alpha * last_color[ch] + (1.0f - last_alpha) * acc[ch];
                    d_alpha += (s.color[ch] - acc[ch]) * dpix[ch];
                    g_col[ch] = w * dpix[ch];
                }
                if (with_depth != 0u) {
                    acc_dep = last_alpha * last_inv_z + (1.0f - last_alpha) * acc_dep;
                    d_alpha += (s.inv_z - acc_dep) * ddep;
                    g_dep = w * ddep;
                    last_inv_z = s.inv_z;
                }
#pragma unroll
                for (int ch = 0; ch < 3; ++ch) last_color[ch] = s.color[ch];
                last_alpha = alpha;
                d_alpha *= t;
                d_alpha += -(t_final / one_minus) * d_bg;
                const float d_sigma = -s.o * gauss * d_alpha;
                g_m0 = d_sigma * (s.a * dx + s.b * dy);
                g_m1 = d_sigma * (s.c * dy + s.b * dx);
                g_a0 = fabsf(g_m0);
                g_a1 = fabsf(g_m1);
                g_c0 = d_sigma * 0.5f * dx * dx;
                g_c1 = d_sigma * dx * dy;
                g_c2 = d_sigma * 0.5f * dy * dy;
                g_o = gauss * d_alpha;
            }
            // All 32 lanes reach this point for every k (the loop bounds are block-uniform).
            if (__any_sync(0xffffffffu, contributes)) {
                g_m0 = warp_sum(g_m0);
                g_m1 = warp_sum(g_m1);
                g_c0 = warp_sum(g_c0);
                g_c1 = warp_sum(g_c1);
                g_c2 = warp_sum(g_c2);
                g_col[0] = warp_sum(g_col[0]);
                g_col[1] = warp_sum(g_col[1]);
                g_col[2] = warp_sum(g_col[2]);
                g_o = warp_sum(g_o);
                if (absgrad != 0u) {
                    g_a0 = warp_sum(g_a0);
                    g_a1 = warp_sum(g_a1);
                }
                if (with_depth != 0u) g_dep = warp_sum(g_dep);
                if ((tid & 31u) == 0) {
                    const u32 g = batch_ids[k - lo];
                    atomicAdd(&v_means2d[2 * g], g_m0);
                    atomicAdd(&v_means2d[2 * g + 1], g_m1);
                    atomicAdd(&v_conics[3 * g], g_c0);
                    atomicAdd(&v_conics[3 * g + 1], g_c1);
                    atomicAdd(&v_conics[3 * g + 2], g_c2);
                    atomicAdd(&v_colors[3 * g], g_col[0]);
                    atomicAdd(&v_colors[3 * g + 1], g_col[1]);
                    atomicAdd(&v_colors[3 * g + 2], g_col[2]);
                    atomicAdd(&v_opacities[g], g_o);
                    if (absgrad != 0u) {
                        atomicAdd(&v_means2d_abs[2 * g], g_a0);
                        atomicAdd(&v_means2d_abs[2 * g + 1], g_a1);
                    }
                    if (with_depth != 0u) atomicAdd(&v_inv_depths[g], g_dep);
                }
            }
        }
        hi = lo;
    }
}
