// sh.cuh: real spherical harmonics up to degree 3 (3DGS order and signs), the twin of
// src/scene/sh.rs. Constants come from that file through -D flags (GS_SH_C*), so both
// backends use bit-identical values. Directions passed in are normalised by the caller.
#ifndef GS_SH_CUH
#define GS_SH_CUH

#if !defined(GS_SH_C0) || !defined(GS_SH_C1) || !defined(GS_SH_C2_0) || !defined(GS_SH_C3_6)
#error "ramsplat kernels need the GS_SH_C* constants built by src/render/cuda/kernels.rs"
#endif

#define SH_MAX_BASIS 16

// Basis functions of degrees 0..=degree at unit direction (x, y, z); entries above
// (degree+1)² are left untouched (callers only read the active ones).
__device__ __forceinline__ void sh_basis(float x, float y, float z, u32 degree,
                                         float b[SH_MAX_BASIS]) {
    b[0] = (float)GS_SH_C0;
    if (degree == 0) return;
    const float c1 = (float)GS_SH_C1;
    b[1] = -c1 * y;
    b[2] = c1 * z;
    b[3] = -c1 * x;
    if (degree == 1) return;
    const float xx = x * x, yy = y * y, zz = z * z;
    const float xy = x * y, yz = y * z, xz = x * z;
    b[4] = (float)GS_SH_C2_0 * xy;
    b[5] = (float)GS_SH_C2_1 * yz;
    b[6] = (float)GS_SH_C2_2 * (2.0f * zz - xx - yy);
    b[7] = (float)GS_SH_C2_3 * xz;
    b[8] = (float)GS_SH_C2_4 * (xx - yy);
    if (degree == 2) return;
    b[9] = (float)GS_SH_C3_0 * y * (3.0f * xx - yy);
    b[10] = (float)GS_SH_C3_1 * xy * z;
    b[11] = (float)GS_SH_C3_2 * y * (4.0f * zz - xx - yy);
    b[12] = (float)GS_SH_C3_3 * z * (2.0f * zz - 3.0f * xx - 3.0f * yy);
    b[13] = (float)GS_SH_C3_4 * x * (4.0f * zz - xx - yy);
    b[14] = (float)GS_SH_C3_5 * z * (xx - yy);
    b[15] = (float)GS_SH_C3_6 * x * (xx - 3.0f * yy);
}

// ∂basis_k/∂(x, y, z) of the basis polynomials (chain through the normalisation separately).
__device__ __forceinline__ void sh_basis_grad(float x, float y, float z, u32 degree,
                                              float g[SH_MAX_BASIS][3]) {
    g[0][0] = g[0][1] = g[0][2] = 0.0f;
    if (degree == 0) return;
    const float c1 = (float)GS_SH_C1;
    g[1][0] = 0.0f; g[1][1] = -c1; g[1][2] = 0.0f;
    g[2][0] = 0.0f; g[2][1] = 0.0f; g[2][2] = c1;
    g[3][0] = -c1; g[3][1] = 0.0f; g[3][2] = 0.0f;
    if (degree == 1) return;
    const float xx = x * x, yy = y * y, zz = z * z;
    const float a0 = (float)GS_SH_C2_0, a1 = (float)GS_SH_C2_1, a2 = (float)GS_SH_C2_2,
                a3 = (float)GS_SH_C2_3, a4 = (float)GS_SH_C2_4;
    g[4][0] = a0 * y; g[4][1] = a0 * x; g[4][2] = 0.0f;
    g[5][0] = 0.0f; g[5][1] = a1 * z; g[5][2] = a1 * y;
    g[6][0] = -2.0f * a2 * x; g[6][1] = -2.0f * a2 * y; g[6][2] = 4.0f * a2 * z;
    g[7][0] = a3 * z; g[7][1] = 0.0f; g[7][2] = a3 * x;
    g[8][0] = 2.0f * a4 * x; g[8][1] = -2.0f * a4 * y; g[8][2] = 0.0f;
    if (degree == 2) return;
    const float k0 = (float)GS_SH_C3_0, k1 = (float)GS_SH_C3_1, k2 = (float)GS_SH_C3_2,
                k3 = (float)GS_SH_C3_3, k4 = (float)GS_SH_C3_4, k5 = (float)GS_SH_C3_5,
                k6 = (float)GS_SH_C3_6;
    g[9][0] = 6.0f * k0 * x * y; g[9][1] = k0 * (3.0f * xx - 3.0f * yy); g[9][2] = 0.0f;
    g[10][0] = k1 * y * z; g[10][1] = k1 * x * z; g[10][2] = k1 * x * y;
    g[11][0] = -2.0f * k2 * x * y; g[11][1] = k2 * (4.0f * zz - xx - 3.0f * yy);
    g[11][2] = 8.0f * k2 * y * z;
    g[12][0] = -6.0f * k3 * x * z; g[12][1] = -6.0f * k3 * y * z;
    g[12][2] = k3 * (6.0f * zz - 3.0f * xx - 3.0f * yy);
    g[13][0] = k4 * (4.0f * zz - 3.0f * xx - yy); g[13][1] = -2.0f * k4 * x * y;
    g[13][2] = 8.0f * k4 * x * z;
    g[14][0] = 2.0f * k5 * x * z; g[14][1] = -2.0f * k5 * y * z; g[14][2] = k5 * (xx - yy);
    g[15][0] = k6 * (3.0f * xx - 3.0f * yy); g[15][1] = -6.0f * k6 * x * y; g[15][2] = 0.0f;
}

#endif // GS_SH_CUH
