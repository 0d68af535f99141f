// scan.cu: exclusive prefix sums, used for per-Gaussian intersection offsets (u64) and for the
// radix sort's digit histograms (u32).
//
// Two-level scheme driven by the host (src/render/cuda/mod.rs::exclusive_scan): scan_block_*
// scans GS_SCAN_BLOCK·GS_SCAN_ITEMS consecutive elements per block in place and writes each
// block's total; the host scans those totals recursively, then scan_add_* adds them back.
// Deterministic: integer sums have one answer regardless of order.
#include "common.cuh"

#define GS_SCAN_TILE (GS_SCAN_BLOCK * GS_SCAN_ITEMS)

template <typename T>
__device__ __forceinline__ void scan_block_impl(T* data, T* block_sums, u64 n) {
    __shared__ T s[GS_SCAN_BLOCK];
    const u32 tid = threadIdx.x;
    const u64 base = (u64)blockIdx.x * GS_SCAN_TILE + (u64)tid * GS_SCAN_ITEMS;
    T v[GS_SCAN_ITEMS];
    T sum = 0;
#pragma unroll
    for (int k = 0; k < GS_SCAN_ITEMS; ++k) {
        const T x = (base + k < n) ? data[base + k] : (T)0;
        v[k] = sum;  // exclusive within the thread
        sum += x;
    }
    s[tid] = sum;
    __syncthreads();
    // Hillis–Steele inclusive scan of the per-thread sums (log2(GS_SCAN_BLOCK) steps).
    for (u32 off = 1; off < GS_SCAN_BLOCK; off <<= 1) {
        const T add = (tid >= off) ? s[tid - off] : (T)0;
        __syncthreads();
        s[tid] += add;
        __syncthreads();
    }
    const T before = (tid > 0) ? s[tid - 1] : (T)0;
#pragma unroll
    for (int k = 0; k < GS_SCAN_ITEMS; ++k)
        if (base + k < n) data[base + k] = before + v[k];
    if (tid == GS_SCAN_BLOCK - 1) block_sums[blockIdx.x] = s[tid];
}

template <typename T>
__device__ __forceinline__ void scan_add_impl(T* data, const T* block_offsets, u64 n) {
    const u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) data[i] += block_offsets[i / GS_SCAN_TILE];
}

extern "C" __global__ void scan_block_u64(
    u64* __restrict__ data,        // [n] in/out
    u64* __restrict__ block_sums,  // [ceil(n / GS_SCAN_TILE)] out
    u64 n) {
    scan_block_impl<u64>(data, block_sums, n);
}

extern "C" __global__ void scan_add_u64(
    u64* __restrict__ data,                 // [n] in/out
    const u64* __restrict__ block_offsets,  // [ceil(n / GS_SCAN_TILE)]
    u64 n) {
    scan_add_impl<u64>(data, block_offsets, n);
}

extern "C" __global__ void scan_block_u32(
    u32* __restrict__ data,        // [n] in/out
    u32* __restrict__ block_sums,  // [ceil(n / GS_SCAN_TILE)] out
    u64 n) {
    scan_block_impl<u32>(data, block_sums, n);
}

extern "C" __global__ void scan_add_u32(
    u32* __restrict__ data,                 // [n] in/out
    const u32* __restrict__ block_offsets,  // [ceil(n / GS_SCAN_TILE)]
    u64 n) {
    scan_add_impl<u32>(data, block_offsets, n);
}
