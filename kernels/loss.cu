// loss.cu: the training loss on the device, twin of src/train/loss.rs and the SSIM of
// src/metrics.rs (same window, same zero padding, same operation order, so the emulation is
// bit-identical to the CPU and a GPU differs only in the order of the final double sums).
//
//   loss = (1 − λ)·L1 + λ·(1 − SSIM),  ∂loss/∂x = (1 − λ)/N·sign(x − y) − λ·∂SSIM/∂x
//
// with N = 3·W·H values. SSIM uses the 11-tap Gaussian window (σ = 1.5) applied separably,
// in two tiled kernels (one block per GS_LOSS_TILE² pixels, the tile and its halo staged in
// shared memory):
//   ssim_fwd     the window statistics x, y, x², y², xy, the per-pixel SSIM and its
//                coefficient maps ∂S/∂μx, ∂S/∂Pxx, ∂S/∂Pxy (9 planes), per-tile sums of S
//   loss_grad    the window pass of the 9 coefficient planes fused with ∂loss/∂x and per-tile
//                sums of |x − y| and (x − y)²
//   loss_finish  one block: the double sums of the partials → [loss, L1, SSIM, MSE]
// Images are interleaved RGB f32 [H, W, 3]; planes are [9, H·W] (plane p = channel·3 + map).
// Reductions are in double, over fixed block sizes in a fixed tree: deterministic.

// block_sum (the fixed-tree double reduction) comes from common.cuh, shared with project_bwd.cu.
#include "common.cuh"

#if !defined(GS_SSIM_W0) || !defined(GS_SSIM_W10) || !defined(GS_SSIM_C1) || \
    !defined(GS_SSIM_C2) || !defined(GS_LOSS_BLOCK)
#error "loss.cu needs the -D constants built by src/train/device_loss.rs"
#endif

typedef unsigned char u8;

#define SSIM_RADIUS 5

__device__ __forceinline__ float ssim_w(int k) {
    switch (k) {
        case 0: return GS_SSIM_W0;
        case 1: return GS_SSIM_W1;
        case 2: return GS_SSIM_W2;
        case 3: return GS_SSIM_W3;
        case 4: return GS_SSIM_W4;
        case 5: return GS_SSIM_W5;
        case 6: return GS_SSIM_W6;
        case 7: return GS_SSIM_W7;
        case 8: return GS_SSIM_W8;
        case 9: return GS_SSIM_W9;
        default: return GS_SSIM_W10;
    }
}

// out[i] = in[i] / 255 as the CPU trainer converts a view (v · (1/255) in f32).
extern "C" __global__ void rgb8_to_f32(
    u64 n,
    const u8* __restrict__ in,   // [n]
    float* __restrict__ out)     // [n] out
{
    const u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = (float)in[i] * (1.0f / 255.0f);
}

// Both SSIM kernels work on a tile of GS_LOSS_TILE² pixels per block (one thread per pixel):
// the tile's inputs and an SSIM_RADIUS-wide halo are staged in shared memory, the horizontal
// pass runs over the tile's columns for every row of the halo, the vertical pass over the
// tile's pixels. Each sum still runs over the same taps in the same order as the CPU's full
// planes (a tap outside the image is skipped, never added as zero), so the results are the
// CPU's bit for bit. Only the 9 coefficient planes go through global memory.
#define SSIM_TILE GS_LOSS_TILE
#define SSIM_SPAN (SSIM_TILE + 2 * SSIM_RADIUS)  // rows (and columns) staged per tile
#if SSIM_TILE * SSIM_TILE != GS_LOSS_BLOCK
#error "an SSIM tile is one block: GS_LOSS_TILE² must equal GS_LOSS_BLOCK"
#endif

// Where the block's tile starts, in pixels.
__device__ __forceinline__ void ssim_tile_origin(u32 tiles_x, int* x0, int* y0) {
    *x0 = (int)(blockIdx.x % tiles_x) * SSIM_TILE;
    *y0 = (int)(blockIdx.x / tiles_x) * SSIM_TILE;
}

// Per tile: the five window statistics of each channel, the per-pixel SSIM, its coefficient
// maps ∂S/∂μx, ∂S/∂Pxx, ∂S/∂Pxy (9 planes) and the tile's Σ S over pixels and channels.
extern "C" __global__ void ssim_fwd(
    u32 width, u32 height,
    u32 tiles_x,                       // ⌈W / SSIM_TILE⌉; the grid has one block per tile
    const float* __restrict__ img,     // [H, W, 3]
    const float* __restrict__ target,  // [H, W, 3]
    float* __restrict__ coef,          // [9, H·W] out: per channel ∂S/∂μx, ∂S/∂Pxx, ∂S/∂Pxy
    double* __restrict__ s_part)       // [tiles] out
{
    // The tile and its halo, all three channels (a value outside the image is never read).
    __shared__ float sx[3][SSIM_SPAN][SSIM_SPAN];
    __shared__ float sy[3][SSIM_SPAN][SSIM_SPAN];
    // The horizontal pass of one channel: 5 statistics for every staged row, tile columns.
    __shared__ float sh[5][SSIM_SPAN][SSIM_TILE];
    int x0, y0;
    ssim_tile_origin(tiles_x, &x0, &y0);
    const int t = (int)threadIdx.x;
    // Row by row, a staged row's 3·SSIM_SPAN values are contiguous in the image: coalesced.
    for (int e = t; e < SSIM_SPAN * SSIM_SPAN * 3; e += GS_LOSS_BLOCK) {
        const int r = e / (SSIM_SPAN * 3), rest = e % (SSIM_SPAN * 3);
        const int col = rest / 3, ch = rest % 3;
        const int gr = y0 - SSIM_RADIUS + r, gc = x0 - SSIM_RADIUS + col;
        float xv = 0.0f, yv = 0.0f;
        if (gr >= 0 && gr < (int)height && gc >= 0 && gc < (int)width) {
            const u32 at = ((u32)gr * width + (u32)gc) * 3 + (u32)ch;
            xv = img[at];
            yv = target[at];
        }
        sx[ch][r][col] = xv;
        sy[ch][r][col] = yv;
    }
    __syncthreads();  // the staged tile is complete

    const int px = t % SSIM_TILE, py = t / SSIM_TILE;
    const int gx = x0 + px, gy = y0 + py;
    const bool inside = gx < (int)width && gy < (int)height;
    const u32 npix = width * height;
    double sum = 0.0;
    const float c1 = GS_SSIM_C1, c2 = GS_SSIM_C2, two = 2.0f;
    for (int c = 0; c < 3; ++c) {
        for (int e = t; e < SSIM_SPAN * SSIM_TILE; e += GS_LOSS_BLOCK) {
            const int r = e / SSIM_TILE, col = e % SSIM_TILE;
            const int gr = y0 - SSIM_RADIUS + r, i = x0 + col;
            if (gr < 0 || gr >= (int)height || i >= (int)width) continue;  // never read
            float s[5] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
            for (int k = 0; k < 2 * SSIM_RADIUS + 1; ++k) {
                const int q = i + k - SSIM_RADIUS;
                if (q < 0 || q >= (int)width) continue;  // zero padding
                const float x = sx[c][r][col + k], y = sy[c][r][col + k], w = ssim_w(k);
                s[0] += w * x;
                s[1] += w * y;
                s[2] += w * (x * x);
                s[3] += w * (y * y);
                s[4] += w * (x * y);
            }
            for (int m = 0; m < 5; ++m) sh[m][r][col] = s[m];
        }
        __syncthreads();  // the horizontal pass is complete
        if (inside) {
            float st[5] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
            for (int k = 0; k < 2 * SSIM_RADIUS + 1; ++k) {
                const int q = gy + k - SSIM_RADIUS;
                if (q < 0 || q >= (int)height) continue;
                const float w = ssim_w(k);
                for (int m = 0; m < 5; ++m) st[m] += w * sh[m][py + k][px];
            }
            const float m_x = st[0], m_y = st[1];
            const float sxx = st[2] - m_x * m_x;
            const float syy = st[3] - m_y * m_y;
            const float sxy = st[4] - m_x * m_y;
            const float a1 = two * m_x * m_y + c1;
            const float a2 = two * sxy + c2;
            const float b1 = m_x * m_x + m_y * m_y + c1;
            const float b2 = sxx + syy + c2;
            const float d = b1 * b2;
            const float sv = a1 * a2 / d;
            const u32 p = (u32)gy * width + (u32)gx;
            coef[(u64)(c * 3 + 0) * npix + p] = (two * m_y * (a2 - a1) - two * m_x * sv * (b2 - b1)) / d;
            coef[(u64)(c * 3 + 1) * npix + p] = 0.0f - sv / b2;
            coef[(u64)(c * 3 + 2) * npix + p] = two * a1 / d;
            sum += (double)sv;
        }
        __syncthreads();  // the next channel's horizontal pass overwrites sh
    }
    const double total = block_sum<GS_LOSS_BLOCK>(sum);
    if (threadIdx.x == 0) s_part[blockIdx.x] = total;
}

// Per tile: the window pass (horizontal, then vertical) of the coefficient planes, fused with
// ∂loss/∂x and the tile's sums of |x − y| and (x − y)². Bounded to four blocks per SM: unbounded,
// ptxas gives it 66 registers on sm_80, three blocks.
extern "C" __global__ void __launch_bounds__(GS_LOSS_BLOCK, 4) loss_grad(
    u32 width, u32 height,
    u32 tiles_x,                       // as ssim_fwd
    const float* __restrict__ coef,    // [9, H·W] from ssim_fwd
    const float* __restrict__ img,     // [H, W, 3]
    const float* __restrict__ target,  // [H, W, 3]
    float w1,                          // (1 − λ) / N
    float ws,                          // λ
    float inv_n,                       // 1 / N
    float* __restrict__ d_image,       // [H, W, 3] out
    double* __restrict__ l1_part,      // [tiles] out: Σ |x − y| over the tile's values
    double* __restrict__ sq_part)      // [tiles] out: Σ (x − y)² in double (for the PSNR)
{
    // One channel's three coefficient planes over the tile and its halo, then their
    // horizontal pass (a channel at a time keeps a block's shared memory at 13 KiB).
    __shared__ float sc[3][SSIM_SPAN][SSIM_SPAN];
    __shared__ float sh[3][SSIM_SPAN][SSIM_TILE];
    int x0, y0;
    ssim_tile_origin(tiles_x, &x0, &y0);
    const int t = (int)threadIdx.x;
    const int px = t % SSIM_TILE, py = t / SSIM_TILE;
    const int gx = x0 + px, gy = y0 + py;
    const bool inside = gx < (int)width && gy < (int)height;
    const u32 npix = width * height;
    const u32 p = (u32)gy * width + (u32)gx;
    const float two = 2.0f;
    double sum = 0.0, sq = 0.0;
    for (int c = 0; c < 3; ++c) {
        for (int e = t; e < 3 * SSIM_SPAN * SSIM_SPAN; e += GS_LOSS_BLOCK) {
            const int m = e / (SSIM_SPAN * SSIM_SPAN), rest = e % (SSIM_SPAN * SSIM_SPAN);
            const int r = rest / SSIM_SPAN, col = rest % SSIM_SPAN;
            const int gr = y0 - SSIM_RADIUS + r, gc = x0 - SSIM_RADIUS + col;
            float v = 0.0f;
            if (gr >= 0 && gr < (int)height && gc >= 0 && gc < (int)width)
                v = coef[(u64)(c * 3 + m) * npix + (u32)gr * width + (u32)gc];
            sc[m][r][col] = v;
        }
        __syncthreads();  // the staged planes are complete
        for (int e = t; e < SSIM_SPAN * SSIM_TILE; e += GS_LOSS_BLOCK) {
            const int r = e / SSIM_TILE, col = e % SSIM_TILE;
            const int gr = y0 - SSIM_RADIUS + r, i = x0 + col;
            if (gr < 0 || gr >= (int)height || i >= (int)width) continue;  // never read
            for (int m = 0; m < 3; ++m) {
                float acc = 0.0f;
                for (int k = 0; k < 2 * SSIM_RADIUS + 1; ++k) {
                    const int q = i + k - SSIM_RADIUS;
                    if (q < 0 || q >= (int)width) continue;
                    acc += ssim_w(k) * sc[m][r][col + k];
                }
                sh[m][r][col] = acc;
            }
        }
        __syncthreads();  // the horizontal pass is complete
        if (inside) {
            float g[3] = {0.0f, 0.0f, 0.0f};
            for (int k = 0; k < 2 * SSIM_RADIUS + 1; ++k) {
                const int q = gy + k - SSIM_RADIUS;
                if (q < 0 || q >= (int)height) continue;
                const float w = ssim_w(k);
                for (int m = 0; m < 3; ++m) g[m] += w * sh[m][py + k][px];
            }
            const float x = img[3 * p + c], y = target[3 * p + c];
            const float gs = inv_n * (g[0] + two * x * g[1] + y * g[2]);
            const float diff = x - y;
            const float sign = diff > 0.0f ? 1.0f : (diff < 0.0f ? -1.0f : 0.0f);
            d_image[3 * p + c] = w1 * sign - ws * gs;
            sum += (double)fabsf(diff);
            const double dd = (double)x - (double)y;
            sq += dd * dd;
        }
        // No barrier here: the next channel's staging overwrites sc, which every thread
        // finished reading before the barrier above, and its horizontal pass overwrites sh
        // only after the staging's barrier, which every thread reaches after its reads here.
    }
    const double total = block_sum<GS_LOSS_BLOCK>(sum);
    if (threadIdx.x == 0) l1_part[blockIdx.x] = total;
    __syncthreads();  // block_sum's shared buffer is reused by the second sum
    const double total_sq = block_sum<GS_LOSS_BLOCK>(sq);
    if (threadIdx.x == 0) sq_part[blockIdx.x] = total_sq;
}

// The loss mask of a masked view (twin of `train::loss::apply_mask`): every pixel whose mask
// byte is 0 gets zero in all three channels of `plane`, so it adds nothing to the loss (render
// and target both zero) and passes no gradient (the same call on ∂L/∂image). The mask is the
// staged view's bytes from `mask_offset` on: the colour bytes, then one byte per pixel.
extern "C" __global__ void apply_mask(
    u64 n_pixels,
    const u8* __restrict__ frame,  // [mask_offset + n_pixels]
    u64 mask_offset,
    float* __restrict__ plane)     // [n_pixels, 3] in/out
{
    const u64 p = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= n_pixels) return;
    if (frame[mask_offset + p] == 0) {
        plane[3 * p] = 0.0f;
        plane[3 * p + 1] = 0.0f;
        plane[3 * p + 2] = 0.0f;
    }
}

// One block of GS_LOSS_BLOCK threads: out = [loss, L1, SSIM, MSE] in double.
extern "C" __global__ void loss_finish(
    u32 blocks,
    const double* __restrict__ s_part,   // [blocks]
    const double* __restrict__ l1_part,  // [blocks]
    const double* __restrict__ sq_part,  // [blocks]
    u64 n_values,                        // N = 3·W·H
    double lambda,
    double* __restrict__ out)            // [4] out
{
    double s = 0.0, l = 0.0, q = 0.0;
    for (u32 b = threadIdx.x; b < blocks; b += blockDim.x) {
        s += s_part[b];
        l += l1_part[b];
        q += sq_part[b];
    }
    const double ssim_sum = block_sum<GS_LOSS_BLOCK>(s);
    __syncthreads();  // block_sum's shared buffer is reused by the next sum
    const double l1_sum = block_sum<GS_LOSS_BLOCK>(l);
    __syncthreads();
    const double sq_sum = block_sum<GS_LOSS_BLOCK>(q);
    if (threadIdx.x == 0) {
        const double l1 = l1_sum / (double)n_values;
        const double ssim = ssim_sum / (double)n_values;
        out[0] = (1.0 - lambda) * l1 + lambda * (1.0 - ssim);
        out[1] = l1;
        out[2] = ssim;
        out[3] = sq_sum / (double)n_values;
    }
}

// Per-view exposure compensation (twin of src/train/exposure.rs): the loss sees
//   y_j = x_0·E[0][j] + x_1·E[1][j] + x_2·E[2][j] + E[j][3]
// for a render pixel x, with E row-major 3×4 in `e` (12 floats on the device). Same operation
// order as the CPU (no contraction), so the emulation is bit-identical to it.
extern "C" __global__ void exposure_apply(
    u64 n_pixels,
    const float* __restrict__ img,  // [n_pixels, 3]
    const float* __restrict__ e,    // [12]
    float* __restrict__ out)        // [n_pixels, 3] out
{
    const u64 p = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= n_pixels) return;
    const float x0 = img[3 * p], x1 = img[3 * p + 1], x2 = img[3 * p + 2];
    for (int j = 0; j < 3; ++j) {
        out[3 * p + j] = x0 * e[j] + x1 * e[4 + j] + x2 * e[8 + j] + e[4 * j + 3];
    }
}

// The adjoint: `d` holds ∂L/∂y and becomes ∂L/∂x in place (each thread owns its pixel);
// per block, the double sums of ∂L/∂E (x_i·∂L/∂y_j at E[i][j], ∂L/∂y_j at E[j][3]) into
// part[k·gridDim.x + block], reduced by exposure_finish.
extern "C" __global__ void exposure_bwd(
    u64 n_pixels,
    const float* __restrict__ img,  // [n_pixels, 3] the render the forward read
    const float* __restrict__ e,    // [12]
    float* __restrict__ d,          // [n_pixels, 3] in/out
    double* __restrict__ part)      // [12, gridDim.x] out
{
    const u64 p = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    double g[12];
    for (int k = 0; k < 12; ++k) g[k] = 0.0;
    if (p < n_pixels) {
        const float dy[3] = {d[3 * p], d[3 * p + 1], d[3 * p + 2]};
        const float x[3] = {img[3 * p], img[3 * p + 1], img[3 * p + 2]};
        for (int j = 0; j < 3; ++j) {
            const double dj = (double)dy[j];
            g[j] = (double)x[0] * dj;
            g[4 + j] = (double)x[1] * dj;
            g[8 + j] = (double)x[2] * dj;
            g[4 * j + 3] = dj;
        }
        for (int i = 0; i < 3; ++i) {
            d[3 * p + i] = e[4 * i] * dy[0] + e[4 * i + 1] * dy[1] + e[4 * i + 2] * dy[2];
        }
    }
    for (int k = 0; k < 12; ++k) {
        const double s = block_sum<GS_LOSS_BLOCK>(g[k]);
        if (threadIdx.x == 0) part[(u64)k * gridDim.x + blockIdx.x] = s;
        __syncthreads();  // block_sum's shared buffer is reused by the next sum
    }
}

// One block: out[offset + k] = Σ_b part[k·blocks + b], in a fixed order (deterministic). The
// trainer puts the 12 sums after the loss scalars, so one read per step brings both.
extern "C" __global__ void exposure_finish(
    u32 blocks,
    const double* __restrict__ part,  // [12, blocks]
    u64 offset,
    double* __restrict__ out)         // [offset + 12] out
{
    for (int k = 0; k < 12; ++k) {
        double s = 0.0;
        for (u32 b = threadIdx.x; b < blocks; b += blockDim.x) s += part[(u64)k * blocks + b];
        const double t = block_sum<GS_LOSS_BLOCK>(s);
        if (threadIdx.x == 0) out[offset + k] = t;
        __syncthreads();
    }
}

// Depth regularization (twin of src/train/depth.rs): per pixel of the inverse-depth plane,
// d_out = step·sign(D − T) (0 where D = T, on pixels a mask excludes and where the view has no
// depth), and per block the double sum of |D − T| over the used pixels into part[blockIdx.x].
// The target T comes from the staged view's stored plane (a little-endian u16 per pixel from
// `depth_offset` on; 0 = no depth) as DepthScale::target computes it on the host,
// raw·2⁻¹⁶·scale + offset in f32 (no contraction: --fmad=false), so no converted copy of the
// plane is made or uploaded. `masked` is uniform; the mask is the staged view's bytes from
// `mask_offset` on, as for apply_mask. With `normalized` (SfM points) the compared value is
// D/A, A = 1 − final_t the pixel's accumulated opacity held constant (so the gradient is
// step·sign/A), and pixels with A below min_cover are left out.
extern "C" __global__ void depth_l1(
    u64 n_pixels,
    const float* __restrict__ render,  // [n_pixels] D
    const float* __restrict__ final_t, // [n_pixels] final transmittance (read when normalized)
    u32 normalized,
    float min_cover,
    const u8* __restrict__ frame,      // the staged view: mask and depth plane at their offsets
    u32 masked,
    u64 mask_offset,
    u64 depth_offset,
    float scale,
    float offset,
    float step,                        // weight / divisor
    float* __restrict__ d_out,         // [n_pixels] out
    double* __restrict__ part)         // [gridDim.x] out
{
    const u64 p = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    double v = 0.0;
    if (p < n_pixels) {
        const u32 raw = (u32)frame[depth_offset + 2 * p] | ((u32)frame[depth_offset + 2 * p + 1] << 8);
        const float t = (float)raw * (1.0f / 65536.0f) * scale + offset;
        const float a = normalized != 0u ? 1.0f - final_t[p] : 1.0f;
        // t != t: NaN, which a finite scale never makes; skipped as the host skips it.
        if (raw == 0u || (masked != 0u && frame[mask_offset + p] == 0) || t != t || a < min_cover) {
            d_out[p] = 0.0f;
        } else {
            const float value = normalized != 0u ? render[p] / a : render[p];
            const float s = normalized != 0u ? step / a : step;
            const float diff = value - t;
            v = (double)fabsf(diff);
            d_out[p] = diff > 0.0f ? s : (diff < 0.0f ? -s : 0.0f);
        }
    }
    const double total = block_sum<GS_LOSS_BLOCK>(v);
    if (threadIdx.x == 0) part[blockIdx.x] = total;
}

// One block: out[offset] = (Σ_b part[b]) / n_pixels in a fixed order (deterministic), the
// unweighted depth L1 next to the other loss scalars.
extern "C" __global__ void depth_finish(
    u32 blocks,
    const double* __restrict__ part,  // [blocks]
    u64 n_pixels,
    u64 offset,
    double* __restrict__ out)         // [offset + 1] out
{
    double s = 0.0;
    for (u32 b = threadIdx.x; b < blocks; b += blockDim.x) s += part[b];
    const double t = block_sum<GS_LOSS_BLOCK>(s);
    if (threadIdx.x == 0) out[offset] = t / (double)n_pixels;
}

// Bilateral grids (twin of src/train/bilagrid.rs): a grid of nl·ny·nx cells (x fastest), each
// a row-major 3×4 affine colour matrix (12 floats, cell-major). Pixel (px, py) of a
// width×height render with colour x samples it trilinearly at
//   gx = (px + ½)/width·(nx − 1), gy = (py + ½)/height·(ny − 1), gz = clamp(γ, 0, 1)·(nl − 1),
// γ = 0.299·r + 0.587·g + 0.114·b, and the loss sees y_j = Σ_i M[j][i]·x_i + M[j][3]. The
// helpers below repeat the CPU's operations in its order (no contraction), so on the
// emulation the image and ∂L/∂x are bit-identical to it; the grid gradient is summed per cell
// in another fixed order (so it differs from the CPU's by rounding).

struct BgCorners {
    u32 off[8];   // float offset of each corner's cell
    float w[8];   // trilinear weight
    float dw[8];  // ∂w/∂gz
    bool inside;  // γ strictly inside the grid: the gradient passes through gz
};

__device__ __forceinline__ void bg_axis(u32 p, u32 n, u32 cells, u32* lo, u32* hi, float* t) {
    const float g = ((float)p + 0.5f) / (float)n * (float)(cells - 1u);
    u32 l = (u32)floorf(g);
    if (l > cells - 1u) l = cells - 1u;
    *lo = l;
    *hi = l + 1u < cells ? l + 1u : cells - 1u;
    *t = g - (float)l;
}

__device__ __forceinline__ BgCorners bg_corners(
    u32 px, u32 py, u32 width, u32 height, u32 nx, u32 ny, u32 nl,
    float r, float g, float b)
{
    BgCorners c;
    u32 x0, x1, y0, y1;
    float tx, ty;
    bg_axis(px, width, nx, &x0, &x1, &tx);
    bg_axis(py, height, ny, &y0, &y1, &ty);
    const float top = (float)(nl - 1u);
    float gz = (0.299f * r + 0.587f * g + 0.114f * b) * top;
    c.inside = gz > 0.0f && gz < top;
    if (!c.inside) gz = gz >= top ? top : 0.0f;
    u32 z0 = (u32)floorf(gz);
    if (z0 > nl - 1u) z0 = nl - 1u;
    const u32 z1 = z0 + 1u < nl ? z0 + 1u : nl - 1u;
    const float tz = gz - (float)z0;
    const u32 zs[2] = {z0, z1};
    const float wzs[2] = {1.0f - tz, tz};
    const float dzs[2] = {-1.0f, 1.0f};
    const u32 ys[2] = {y0, y1};
    const float wys[2] = {1.0f - ty, ty};
    const u32 xs[2] = {x0, x1};
    const float wxs[2] = {1.0f - tx, tx};
    int i = 0;
    for (int zi = 0; zi < 2; ++zi) {
        for (int yi = 0; yi < 2; ++yi) {
            for (int xi = 0; xi < 2; ++xi) {
                c.off[i] = ((zs[zi] * ny + ys[yi]) * nx + xs[xi]) * 12u;
                c.w[i] = wxs[xi] * wys[yi] * wzs[zi];
                c.dw[i] = wxs[xi] * wys[yi] * dzs[zi];
                ++i;
            }
        }
    }
    return c;
}

__device__ __forceinline__ void bg_sample(const float* __restrict__ grid, const BgCorners& c, float a[12]) {
    for (int k = 0; k < 12; ++k) a[k] = 0.0f;
    for (int i = 0; i < 8; ++i) {
        for (int k = 0; k < 12; ++k) a[k] += c.w[i] * grid[c.off[i] + k];
    }
}

// out = img through the grid, one thread per pixel (img and out [n_pixels, 3], row-major).
extern "C" __global__ void bilagrid_apply(
    u32 width, u32 height, u32 nx, u32 ny, u32 nl,
    const float* __restrict__ img,
    const float* __restrict__ grid,  // [nl·ny·nx·12]
    float* __restrict__ out)
{
    const u64 p = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= (u64)width * height) return;
    const u32 px = (u32)(p % width), py = (u32)(p / width);
    const float x0 = img[3 * p], x1 = img[3 * p + 1], x2 = img[3 * p + 2];
    const BgCorners c = bg_corners(px, py, width, height, nx, ny, nl, x0, x1, x2);
    float a[12];
    bg_sample(grid, c, a);
    for (int j = 0; j < 3; ++j) {
        out[3 * p + j] = a[4 * j] * x0 + a[4 * j + 1] * x1 + a[4 * j + 2] * x2 + a[4 * j + 3];
    }
}

// ∂L/∂grid from d = ∂L/∂y (read before bilagrid_dx overwrites it): one block per cell
// (blockIdx.x = (cz·ny + cy)·nx + cx); its threads stride over the pixels whose sample can
// touch the cell (its neighbours' span along x and y) and add w·∂L/∂M of each corner that is
// the cell, in f64; a fixed tree then sums the threads. Every cell is written (no zeroing).
extern "C" __global__ void bilagrid_grad(
    u32 width, u32 height, u32 nx, u32 ny, u32 nl,
    const float* __restrict__ img,
    const float* __restrict__ d,
    double* __restrict__ grad)       // [nl·ny·nx·12] out
{
    const u32 cell = blockIdx.x;
    const u32 cx = cell % nx, cy = (cell / nx) % ny;
    const u32 own = cell * 12u;
    // Pixels whose coordinate lies within one cell of this one (conservative by a pixel; the
    // corner test below is exact).
    u32 xlo = 0, xhi = width, ylo = 0, yhi = height;
    if (nx > 1u) {
        const float s = (float)width / (float)(nx - 1u);
        const float lo = ((float)cx - 1.0f) * s - 1.0f, hi = ((float)cx + 1.0f) * s + 1.0f;
        xlo = lo > 0.0f ? (u32)lo : 0u;
        xhi = hi < (float)width ? (u32)hi + 1u : width;
    }
    if (ny > 1u) {
        const float s = (float)height / (float)(ny - 1u);
        const float lo = ((float)cy - 1.0f) * s - 1.0f, hi = ((float)cy + 1.0f) * s + 1.0f;
        ylo = lo > 0.0f ? (u32)lo : 0u;
        yhi = hi < (float)height ? (u32)hi + 1u : height;
    }
    if (xhi > width) xhi = width;
    if (yhi > height) yhi = height;
    const u64 span = xhi > xlo ? (u64)(xhi - xlo) : 0u;
    const u64 count = yhi > ylo ? span * (u64)(yhi - ylo) : 0u;
    double acc[12];
    for (int k = 0; k < 12; ++k) acc[k] = 0.0;
    for (u64 q = threadIdx.x; q < count; q += blockDim.x) {
        const u32 px = xlo + (u32)(q % span), py = ylo + (u32)(q / span);
        const u64 p = (u64)py * width + px;
        const float x[3] = {img[3 * p], img[3 * p + 1], img[3 * p + 2]};
        const BgCorners c = bg_corners(px, py, width, height, nx, ny, nl, x[0], x[1], x[2]);
        float da[12];
        for (int j = 0; j < 3; ++j) {
            const float dy = d[3 * p + j];
            da[4 * j] = dy * x[0];
            da[4 * j + 1] = dy * x[1];
            da[4 * j + 2] = dy * x[2];
            da[4 * j + 3] = dy;
        }
        for (int i = 0; i < 8; ++i) {
            if (c.off[i] != own) continue;
            for (int k = 0; k < 12; ++k) acc[k] += (double)(c.w[i] * da[k]);
        }
    }
    for (int k = 0; k < 12; ++k) {
        const double s = block_sum<GS_LOSS_BLOCK>(acc[k]);
        if (threadIdx.x == 0) grad[own + k] = s;
        __syncthreads();  // block_sum's shared buffer is reused by the next sum
    }
}

// The render's gradient: d holds ∂L/∂y and becomes ∂L/∂x in place (through the sampled
// matrix, and through gz where γ is inside the grid). One thread per pixel.
extern "C" __global__ void bilagrid_dx(
    u32 width, u32 height, u32 nx, u32 ny, u32 nl,
    const float* __restrict__ img,
    const float* __restrict__ grid,
    float* __restrict__ d)
{
    const u64 p = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= (u64)width * height) return;
    const u32 px = (u32)(p % width), py = (u32)(p / width);
    const float x[3] = {img[3 * p], img[3 * p + 1], img[3 * p + 2]};
    const float dy[3] = {d[3 * p], d[3 * p + 1], d[3 * p + 2]};
    const BgCorners c = bg_corners(px, py, width, height, nx, ny, nl, x[0], x[1], x[2]);
    float a[12];
    bg_sample(grid, c, a);
    float da[12];
    for (int j = 0; j < 3; ++j) {
        da[4 * j] = dy[j] * x[0];
        da[4 * j + 1] = dy[j] * x[1];
        da[4 * j + 2] = dy[j] * x[2];
        da[4 * j + 3] = dy[j];
    }
    float dgz = 0.0f;
    for (int i = 0; i < 8; ++i) {
        for (int k = 0; k < 12; ++k) dgz += c.dw[i] * grid[c.off[i] + k] * da[k];
    }
    const float dz = c.inside ? dgz * (float)(nl - 1u) : 0.0f;
    const float luma[3] = {0.299f, 0.587f, 0.114f};
    for (int i = 0; i < 3; ++i) {
        d[3 * p + i] = a[i] * dy[0] + a[4 + i] * dy[1] + a[8 + i] * dy[2] + dz * luma[i];
    }
}

// One optimizer step of every view's grid (twin of BilateralGrids::step): per grid float, the
// total variation's gradient (c = weight / views; per axis w = c / (12 · cells with a
// neighbour along it); the pair below the cell first, then the pair above, axes x, y, l: the
// CPU's order), plus slot_grad on view `slot`, then Adam (no contraction: the CPU's bits).
// Reads `values`, writes `next` (a neighbour's old value is still needed by its own thread);
// per block, the double sum of w·d² over the pairs starting at each float into part.
extern "C" __global__ void bilagrid_adam(
    u64 n_floats,                        // views · nl·ny·nx·12
    u32 nx, u32 ny, u32 nl,
    const float* __restrict__ values,
    float* __restrict__ next,
    float* __restrict__ m,
    float* __restrict__ v,
    u32 slot,                            // the view with a loss gradient (0xFFFFFFFF: none)
    const double* __restrict__ slot_grad,
    double c,
    float b1, float b2, float step_size, float bias2_sqrt, float eps,
    double* __restrict__ part)
{
    const u64 e = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    double tv = 0.0;
    if (e < n_floats) {
        const u64 per_grid = (u64)nl * ny * nx * 12u;
        const u64 view = e / per_grid;
        const u64 within = e % per_grid;
        const u32 cell = (u32)(within / 12u);
        const u32 x = cell % nx, y = (cell / nx) % ny, l = cell / (nx * ny);
        const u32 pos[3] = {x, y, l};
        const u32 len[3] = {nx, ny, nl};
        const u64 stride[3] = {12u, (u64)nx * 12u, (u64)nx * ny * 12u};
        const u64 count[3] = {
            (u64)(nx - 1u) * ny * nl, (u64)nx * (ny - 1u) * nl, (u64)nx * ny * (nl - 1u)};
        double g = 0.0;
        const double here = (double)values[e];
        for (int a = 0; a < 3; ++a) {
            if (len[a] < 2u) continue;
            u64 n = 12u * count[a];
            if (n < 1u) n = 1u;
            const double w = c / (double)n;
            if (pos[a] > 0u) {
                const double d = here - (double)values[e - stride[a]];
                g += 2.0 * w * d;
            }
            if (pos[a] + 1u < len[a]) {
                const double d = (double)values[e + stride[a]] - here;
                g -= 2.0 * w * d;
                tv += w * (d * d);
            }
        }
        if (view == (u64)slot) g += slot_grad[within];
        const float gf = (float)g;
        float mm = m[e], vv = v[e], p = values[e];
        mm = b1 * mm + (1.0f - b1) * gf;
        vv = b2 * vv + (1.0f - b2) * gf * gf;
        const float denom = sqrtf(vv) / bias2_sqrt + eps;
        p -= step_size * (mm / denom);
        m[e] = mm;
        v[e] = vv;
        next[e] = p;
    }
    const double s = block_sum<GS_LOSS_BLOCK>(tv);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}
