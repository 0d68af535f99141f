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
    !defined(GS_SUPPORT_PAD_PX) || !defined(GS_SIGMA_ROUNDING) ||                            \
    !defined(GS_SIGMA_ROUNDING_MAX) || !defined(GS_SCAN_BLOCK) || !defined(GS_SCAN_ITEMS) ||  \
    !defined(GS_SORT_BLOCK) || !defined(GS_RADIX_BITS) || !defined(GS_CAM_LEN) ||             \
    !defined(GS_ELEMENT_BLOCK) || !defined(GS_EQUIDISTANT_SERIES_BELOW)
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
#define CAM_FISHEYE 23   // 1: the equidistant fisheye projection (projection.cuh), 0: pinhole

struct Cam {
    float rot[3][3];
    float trans[3];
    float centre[3];
    float fx, fy, cx, cy;
    float lim_x_neg, lim_x_pos, lim_y_neg, lim_y_pos;
    bool fisheye;
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
    k.fisheye = c[CAM_FISHEYE] != 0.0f;
    return k;
}

// Half-open tile range [x0, x1) × [y0, y1) touched by the box mean ± (rx, ry); identical to
// cpu::project::tile_rect (floor((m − r)/T), floor((m + r)/T) + 1, clamped to the grid).
__device__ __forceinline__ void tile_rect(float mx, float my, float rx, float ry, u32 tiles_x,
                                          u32 tiles_y, u32& x0, u32& x1, u32& y0, u32& y1) {
    const float ts = (float)GS_TILE_SIZE;
    const float fx = (float)tiles_x, fy = (float)tiles_y;
    x0 = (u32)fminf(fmaxf(floorf((mx - rx) / ts), 0.0f), fx);
    x1 = (u32)fminf(fmaxf(floorf((mx + rx) / ts) + 1.0f, 0.0f), fx);
    y0 = (u32)fminf(fmaxf(floorf((my - ry) / ts), 0.0f), fy);
    y1 = (u32)fminf(fmaxf(floorf((my + ry) / ts) + 1.0f, 0.0f), fy);
}

// The tiles a visible splat is binned into, twin of cpu::binning::Reach (its doc has the
// derivation): the range of its tile box (per axis the smaller of the 3σ radius and the padded
// α-support half-width), and per row of tiles the columns its padded α-support ellipse
// σ ≤ ln(255·o) + slack reaches. Every pixel of a tile it misses fails the rasterizers' α test,
// so binning by it changes no result. Only + − × ÷ √, floor, min and max, with no FMA
// contraction (--fmad=false), so the same floats give the same tiles here, in every kernel that
// asks (project_fwd counts them, emit_keys writes them), and on the CPU (except where logf and
// Rust's ln round the cut-off apart).
struct Reach {
    float mx, my, a, b, det, s2, q, pad_x, pad_y;
    u32 x0, x1, y0, y1;
    // false: no clip trusted (clip_cut), or an intermediate is not finite; every row then
    // keeps the box's columns
    bool exact;
};

// False when the splat reaches no tile (its ellipse is empty, or its box misses the grid).
__device__ __forceinline__ bool reach_of(float mx, float my, const float conic[3], float opacity,
                                         float radius, u32 tiles_x, u32 tiles_y, Reach& r) {
    const float cut0 = logf(255.0f * opacity) + (float)GS_SIGMA_CUT_SLACK;
    if (cut0 < 0.0f) return false;
    const float a = conic[0], b = conic[1], c = conic[2];
    const float det = a * c - b * b;
    // Widened by the rounding bound of σ at a pixel, or no clip trusted: the 3σ box
    // (cpu::rasterize::clip_cut; both comparisons are false for a NaN).
    const float k = (float)GS_SIGMA_ROUNDING * (a * c / det);
    const bool clip = k >= 0.0f && k < (float)GS_SIGMA_ROUNDING_MAX;
    const float cut = clip ? cut0 / (1.0f - k) : cut0;
    const float two_s = 2.0f * cut / det;
    const float hx = sqrtf(two_s * c), hy = sqrtf(two_s * a);
    const float pad_rel = (float)GS_SUPPORT_PAD_REL;
    const float pad = (float)GS_SUPPORT_PAD_PX;
    const float one_pad = (float)(1.0 + GS_SUPPORT_PAD_REL);
    // The support box (cpu::rasterize::support); a half-width that overflows (NaN or ∞)
    // leaves the radius: fminf ignores a NaN.
    const float ex = clip ? fminf(radius, hx * one_pad + pad) : radius;
    const float ey = clip ? fminf(radius, hy * one_pad + pad) : radius;
    tile_rect(mx, my, ex, ey, tiles_x, tiles_y, r.x0, r.x1, r.y0, r.y1);
    if (r.x0 >= r.x1 || r.y0 >= r.y1) return false;
    r.mx = mx;
    r.my = my;
    r.a = a;
    r.b = b;
    r.det = det;
    r.s2 = (float)(2.0 * (1.0 + GS_SUPPORT_PAD_REL)) * a * cut;
    r.q = hx / c;
    r.pad_x = hx * pad_rel + pad;
    r.pad_y = hy * pad_rel + pad;
    r.exact = clip && isfinite(r.s2) && isfinite(r.q) && isfinite(r.pad_x) &&
              isfinite(r.pad_y) && isfinite(det) && det > 0.0f && a > 0.0f && c > 0.0f;
    return true;
}

// Columns [lo, hi) of tile row ty (within the box's rows) that the padded ellipse reaches.
__device__ __forceinline__ void reach_row(const Reach& r, u32 ty, u32& lo, u32& hi) {
    lo = r.x0;
    hi = r.x1;
    if (!r.exact) return;
    const float ts = (float)GS_TILE_SIZE;
    const float band_lo = (float)(ty * GS_TILE_SIZE);
    const float dy_lo = (r.my - (band_lo + ts)) - r.pad_y;
    const float dy_hi = (r.my - band_lo) + r.pad_y;
    const float yc = fminf(fmaxf(0.0f, dy_lo), dy_hi);
    if (r.s2 - r.det * yc * yc < 0.0f) {
        hi = lo;
        return;
    }
    const float bq = r.b * r.q;
    const float y1 = fminf(fmaxf(-bq, dy_lo), dy_hi);
    const float dx_hi = (-r.b * y1 + sqrtf(fmaxf(r.s2 - r.det * y1 * y1, 0.0f))) / r.a;
    const float y2 = fminf(fmaxf(bq, dy_lo), dy_hi);
    const float dx_lo = (-r.b * y2 - sqrtf(fmaxf(r.s2 - r.det * y2 * y2, 0.0f))) / r.a;
    const float px_lo = (r.mx - dx_hi) - r.pad_x;
    const float px_hi = (r.mx - dx_lo) + r.pad_x;
    if (!(px_lo <= px_hi)) return;  // a NaN (an overflow inside) keeps the row
    const float fx0 = (float)r.x0, fx1 = (float)r.x1;
    const float l = fminf(fmaxf(floorf(px_lo / ts), fx0), fx1);
    const float h = fminf(fmaxf(floorf(px_hi / ts) + 1.0f, l), fx1);
    lo = (u32)l;
    hi = (u32)h;
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
