// raster.cuh: the per-splat record the rasterizers stage in shared memory, and its loader.
#ifndef GS_RASTER_CUH
#define GS_RASTER_CUH

struct Packed {
    float mx, my;        // mean2d
    float a, b, c;       // conic
    float o;             // opacity
    float sigma_cut;     // ln(255·o) + slack: the CPU's cheap pre-test, mirrored exactly
    float color[3];
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
    return p;
}

#endif // GS_RASTER_CUH
