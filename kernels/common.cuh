// common.cuh: constants, camera layout and small math shared by every ramsplat kernel.
//
// Host constants arrive as -D flags built by src/render/cuda/kernels.rs from the same Rust
// constants the CPU reference uses (src/render/cpu/{project,rasterize}.rs), so the two
// backends cannot drift apart; a missing flag is a compile error, never a silent default.
// NVRTC has no include path for these embedded headers: the Rust side splices them into each
// .cu in place of its `#include "..."` line, so every header carries an include guard.
#ifndef GS_COMMON_CUH
#define GS_COMMON_CUH

#if !defined(GS_TILE_SIZE) || !defined(GS_NEAR_PLANE) || !defined(GS_DILATION) ||            \
    !defined(GS_ALPHA_MAX) || !defined(GS_ALPHA_MIN) || !defined(GS_T_MIN) ||                \
    !defined(GS_SIGMA_CUT_SLACK) || !defined(GS_SUPPORT_PAD_REL) ||                          \
    !defined(GS_SUPPORT_PAD_PX) || !defined(GS_SCAN_BLOCK) || !defined(GS_SCAN_ITEMS) ||      \
    !defined(GS_SORT_BLOCK) || !defined(GS_RADIX_BITS) || !defined(GS_CAM_LEN) ||             \
    !defined(GS_ELEMENT_BLOCK)
#error "ramsplat kernels need the -D constants built by src/render/cuda/kernels.rs"
#endif

typedef unsigned int u32;
typedef unsigned long long u64;

// One tile is one thread block in the rasterizer: GS_TILE_SIZE² threads. One-thread-per-element
// kernels (projection, key emission) run blocks of GS_ELEMENT_BLOCK threads.
#define GS_BLOCK_PIXELS (GS_TILE_SIZE * GS_TILE_SIZE)

// Camera buffer layout (GS_CAM_LEN floats), written by src/render/cuda/mod.rs::camera_buffer
// from the CPU reference's CameraF<f32> so limits are rounded identically.
#define CAM_ROT 0        // [3, 3] row-major world-to-camera rotation W
#define CAM_TRANS 9      // [3] translation
#define CAM_CENTRE 12    // [3] camera centre in world coordinates
#define CAM_FX 15
#define CAM_FY 16
#define CAM_CX 17
#define CAM_CY 18
#define CAM_LIM_X_NEG 19
#define CAM_LIM_X_POS 20
#define CAM_LIM_Y_NEG 21
#define CAM_LIM_Y_POS 22

struct Cam {
    float rot[3][3];
    float trans[3];
    float centre[3];
    float fx, fy, cx, cy;
    float lim_x_neg, lim_x_pos, lim_y_neg, lim_y_pos;
};

__device__ __forceinline__ Cam load_cam(const float* __restrict__ c /* [GS_CAM_LEN] */) {
    Cam k;
#pragma unroll
    for (int r = 0; r < 3; ++r)
#pragma unroll
        for (int q = 0; q < 3; ++q) k.rot[r][q] = c[CAM_ROT + 3 * r + q];
#pragma unroll
    for (int a = 0; a < 3; ++a) {
        k.trans[a] = c[CAM_TRANS + a];
        k.centre[a] = c[CAM_CENTRE + a];
    }
    k.fx = c[CAM_FX];
    k.fy = c[CAM_FY];
    k.cx = c[CAM_CX];
    k.cy = c[CAM_CY];
    k.lim_x_neg = c[CAM_LIM_X_NEG];
    k.lim_x_pos = c[CAM_LIM_X_POS];
    k.lim_y_neg = c[CAM_LIM_Y_NEG];
    k.lim_y_pos = c[CAM_LIM_Y_POS];
    return k;
}

// Half-open tile range [x0, x1) × [y0, y1) touched by the box mean ± (rx, ry); identical to
// cpu::project::tile_rect (floor((m − r)/T), floor((m + r)/T) + 1, clamped to the grid). No
// multiply feeds an add here, so no FMA contraction: the same floats give the same range in
// every kernel (project_fwd counts the tiles, emit_keys writes them).
__device__ __forceinline__ void tile_rect(float mx, float my, float rx, float ry, u32 tiles_x,
                                          u32 tiles_y, u32& x0, u32& x1, u32& y0, u32& y1) {
    const float ts = (float)GS_TILE_SIZE;
    const float fx = (float)tiles_x, fy = (float)tiles_y;
    x0 = (u32)fminf(fmaxf(floorf((mx - rx) / ts), 0.0f), fx);
    x1 = (u32)fminf(fmaxf(floorf((mx + rx) / ts) + 1.0f, 0.0f), fx);
    y0 = (u32)fminf(fmaxf(floorf((my - ry) / ts), 0.0f), fy);
    y1 = (u32)fminf(fmaxf(floorf((my + ry) / ts) + 1.0f, 0.0f), fy);
}

// Half-widths (rx, ry) of the box a visible splat is binned into, twin of
// cpu::binning::tile_box: per axis the smaller of its 3σ radius and the padded half-width of
// the ellipse σ ≤ ln(255·o) + slack outside which α < 1/255 (Σ2d_xx = c/det, Σ2d_yy = a/det
// of the conic). Every pixel of a tile this box misses fails the rasterizers' exact α test,
// so binning by it changes no result; the padding (≫ the few-ulp error of logf and of the
// conic) keeps that true in f32. Returns false when no pixel can reach α ≥ 1/255. A support
// half-width that overflows (NaN or ∞) leaves the radius: fminf ignores a NaN.
__device__ __forceinline__ bool tile_box(const float conic[3], float opacity, float radius,
                                         float& rx, float& ry) {
    const float cut = logf(255.0f * opacity) + (float)GS_SIGMA_CUT_SLACK;
    if (cut < 0.0f) return false;
    const float a = conic[0], b = conic[1], c = conic[2];
    const float det = a * c - b * b;
    const float two_s = 2.0f * cut / det;
    const float pad_rel = (float)(1.0 + GS_SUPPORT_PAD_REL);
    const float pad = (float)GS_SUPPORT_PAD_PX;
    rx = fminf(radius, sqrtf(two_s * c) * pad_rel + pad);
    ry = fminf(radius, sqrtf(two_s * a) * pad_rel + pad);
    return true;
}

// Block-wide double sum of `v` over a block of BLOCK threads (blockDim.x == BLOCK, a power of
// two), in a fixed tree, so the result does not depend on scheduling; thread 0 gets the sum.
// Every thread of the block must call it (it holds barriers). The shared buffer is one per
// BLOCK in a module: a kernel that sums again puts a __syncthreads() between the calls, since
// the next call's writes would race a slow thread's read of this result.
template <u32 BLOCK>
__device__ __forceinline__ double block_sum(double v) {
    __shared__ double part[BLOCK];
    part[threadIdx.x] = v;
    __syncthreads();
    for (u32 off = BLOCK / 2; off > 0; off >>= 1) {
        if (threadIdx.x < off) part[threadIdx.x] += part[threadIdx.x + off];
        __syncthreads();
    }
    return part[0];
}

#endif // GS_COMMON_CUH
