// raster.cuh: the per-splat record the rasterizers stage in shared memory, and its loader.
#ifndef GS_RASTER_CUH
#define GS_RASTER_CUH

// e^x of the contribution rule: CUDA's expf on a GPU; the host emulation defines it as the CPU
// rasterizer's polynomial, so its forward pass is the CPU's bit for bit.
#ifndef GS_RASTER_EXP
#define GS_RASTER_EXP expf
#endif

struct Packed {
    float mx, my;        // mean2d
    float a, b, c;       // conic
    float o;             // opacity
    float sigma_cut;     // ln(255·o) + slack: the CPU's cheap pre-test, mirrored exactly
    float color[3];
    float inv_z;         // 1/z, the splat's value in the inverse-depth plane (0 without it)
};

__device__ __forceinline__ Packed load_packed(u32 g, const float* __restrict__ means2d,
                                              const float* __restrict__ conics,
                                              const float* __restrict__ opacities,
                                              const float* __restrict__ colors) {
    Packed p;
    p.mx = means2d[2 * g];
    p.my = means2d[2 * g + 1];
    p.a = conics[3 * g];
    p.b = conics[3 * g + 1];
    p.c = conics[3 * g + 2];
    p.o = opacities[g];
    p.sigma_cut = logf(255.0f * p.o) + (float)GS_SIGMA_CUT_SLACK;
    p.color[0] = colors[3 * g];
    p.color[1] = colors[3 * g + 1];
    p.color[2] = colors[3 * g + 2];
    p.inv_z = 0.0f;
    return p;
}

// The one contribution rule both rasterizers use (twin of the CPU's): σ of the splat at the
// pixel centre (fx, fy); skipped when σ < 0 or σ exceeds the cheap cut; α = min(o·e^−σ,
// GS_ALPHA_MAX), skipped below GS_ALPHA_MIN. Returns whether the splat contributes, and its
// offset, Gaussian value and α. Forward and backward must decide identically, hence one copy.
__device__ __forceinline__ bool splat_alpha(const Packed& s, float fx, float fy, float& dx,
                                            float& dy, float& gauss, float& alpha) {
    dx = s.mx - fx;
    dy = s.my - fy;
    const float sigma = 0.5f * (s.a * dx * dx + s.c * dy * dy) + s.b * dx * dy;
    if (sigma < 0.0f || sigma > s.sigma_cut) return false;
    gauss = GS_RASTER_EXP(-sigma);
    alpha = fminf(s.o * gauss, (float)GS_ALPHA_MAX);
    return alpha >= (float)GS_ALPHA_MIN;
}

#endif // GS_RASTER_CUH
