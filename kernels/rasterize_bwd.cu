// rasterize_bwd.cu: one block per tile, one thread per pixel, back to front from each pixel's
// last contributor using the stored final transmittance (T before a splat = T after / (1−α)).
// Twin of cpu::rasterize::rasterize_bwd. A splat's gradient values (up to 12) are summed over
// the 32 pixels of a warp together, in 16 shuffles (warp_reduce_scatter), and the totals are
// added to global memory by one atomic instruction, each value by its own lane (float atomics:
// the summation order, hence the last bits, vary run to run — parity tolerances allow it).
// The gradient outputs must be zeroed by the host before launch (they are accumulators).
// With absgrad != 0 it also sums |per-pixel ∂L/∂mean2d| componentwise into v_means2d_abs
// (AbsGS's statistic, gsplat's absgrad); absgrad is uniform over the launch, so every lane
// takes the same branch around the shuffles. With with_depth != 0 (uniform too) the
// inverse-depth plane is a fourth channel (value 1/z per splat, background 0): its ∂L/∂D
// joins ∂L/∂α and each splat's ∂L/∂(1/z) is summed into v_inv_depths (twin of the CPU's).
#include "common.cuh"
#include "raster.cuh"

// Slots of a splat's gradient values in warp_reduce_scatter's array.
#define SLOT_MEAN 0      // 2: ∂L/∂mean2d
#define SLOT_CONIC 2     // 3: ∂L/∂(a, b, c)
#define SLOT_COLOR 5     // 3: ∂L/∂rgb
#define SLOT_OPACITY 8   // 1
#define SLOT_ABS 9       // 2: |per-pixel ∂L/∂mean2d| summed (absgrad)
#define SLOT_INV_Z 11    // 1: ∂L/∂(1/z) (with_depth)
#define SLOTS 16         // a power of two; 12..15 stay 0

// One halving of warp_reduce_scatter: lanes `2·HALF` apart exchange halves; each keeps slots
// [0, HALF) or [HALF, 2·HALF) of its array (by that lane bit), adds its partner's values of
// them, and stores the sums in [0, HALF). A template, so that every index is a constant and
// the array stays in registers.
template <int HALF>
__device__ __forceinline__ void reduce_half(float (&v)[SLOTS], u32 lane) {
    const bool upper = (lane & (u32)(2 * HALF)) != 0u;
#pragma unroll
    for (int i = 0; i < HALF; ++i) {
        const float send = upper ? v[i] : v[i + HALF];
        const float keep = upper ? v[i + HALF] : v[i];
        v[i] = keep + __shfl_xor_sync(0xffffffffu, send, 2 * HALF);
    }
}

// Sums each of the SLOTS values over the warp's 32 lanes: a reduce-scatter. Four halvings
// (8 + 4 + 2 + 1 shuffles) leave lane l with slot l >> 1 summed over the 16 lanes of l's
// parity, and lanes 2j and 2j+1 then add theirs: 16 shuffles where one sum per slot would take
// 5 each. Returns the total of slot `lane >> 1`, the same bits in both lanes of a pair
// (a + b = b + a). Every lane of the warp must call it.
__device__ __forceinline__ float warp_reduce_scatter(float (&v)[SLOTS], u32 lane) {
    static_assert(SLOTS == 16, "four halvings for 32 lanes");
    reduce_half<8>(v, lane);
    reduce_half<4>(v, lane);
    reduce_half<2>(v, lane);
    reduce_half<1>(v, lane);
    return v[0] + __shfl_xor_sync(0xffffffffu, v[0], 1);
}

// Five blocks per SM: ptxas then keeps the kernel at 48 registers (65,536 / (5 · 256) = 51),
// the occupancy it had with one warp sum per value; unbounded, the 16-slot array took 56 (four
// blocks). ptxas spills nothing at 48 (tests/nvrtc_compile.rs prints it).
extern "C" __global__ void __launch_bounds__(GS_BLOCK_PIXELS, 5) rasterize_bwd(
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
            float v[SLOTS];
#pragma unroll
            for (int i = 0; i < SLOTS; ++i) v[i] = 0.0f;
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
                    v[SLOT_COLOR + ch] = w * dpix[ch];
                }
                if (with_depth != 0u) {
                    acc_dep = last_alpha * last_inv_z + (1.0f - last_alpha) * acc_dep;
                    d_alpha += (s.inv_z - acc_dep) * ddep;
                    v[SLOT_INV_Z] = w * ddep;
                    last_inv_z = s.inv_z;
                }
#pragma unroll
                for (int ch = 0; ch < 3; ++ch) last_color[ch] = s.color[ch];
                last_alpha = alpha;
                d_alpha *= t;
                d_alpha += -(t_final / one_minus) * d_bg;
                const float d_sigma = -s.o * gauss * d_alpha;
                v[SLOT_MEAN] = d_sigma * (s.a * dx + s.b * dy);
                v[SLOT_MEAN + 1] = d_sigma * (s.c * dy + s.b * dx);
                if (absgrad != 0u) {
                    v[SLOT_ABS] = fabsf(v[SLOT_MEAN]);
                    v[SLOT_ABS + 1] = fabsf(v[SLOT_MEAN + 1]);
                }
                v[SLOT_CONIC] = d_sigma * 0.5f * dx * dx;
                v[SLOT_CONIC + 1] = d_sigma * dx * dy;
                v[SLOT_CONIC + 2] = d_sigma * 0.5f * dy * dy;
                v[SLOT_OPACITY] = gauss * d_alpha;
            }
            // All 32 lanes reach this point for every k (the loop bounds are block-uniform).
            if (__any_sync(0xffffffffu, contributes)) {
                const u32 lane = tid & 31u;
                const float total = warp_reduce_scatter(v, lane);
                const u32 slot = lane >> 1;
                const u32 g = batch_ids[k - lo];
                // Slots without an output (absgrad's and the depth's when off, 12..15) are 0.
                float* dst = nullptr;
                if (slot < SLOT_CONIC) dst = &v_means2d[2 * g + slot];
                else if (slot < SLOT_COLOR) dst = &v_conics[3 * g + (slot - SLOT_CONIC)];
                else if (slot < SLOT_OPACITY) dst = &v_colors[3 * g + (slot - SLOT_COLOR)];
                else if (slot == SLOT_OPACITY) dst = &v_opacities[g];
                else if (slot < SLOT_INV_Z && absgrad != 0u)
                    dst = &v_means2d_abs[2 * g + (slot - SLOT_ABS)];
                else if (slot == SLOT_INV_Z && with_depth != 0u) dst = &v_inv_depths[g];
                if ((lane & 1u) == 0u && dst != nullptr) atomicAdd(dst, total);
            }
        }
        hi = lo;
    }
}
