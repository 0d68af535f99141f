//! Host side of the GPU radix sort (`kernels/sort.cu`): a stable LSD sort of u32 keys with u32
//! values, running only the digit passes that cover the key's significant bits.

use crate::device::DeviceBuffer;

use super::kernels::{RADIX_BITS, SORT_TILE};
use super::launch::Kernels;
use super::CudaError;

/// Buckets per digit.
pub const RADIX: usize = 1 << RADIX_BITS;

/// Histogram counters for `m` sorted elements: RADIX per block's tile of SORT_TILE elements.
pub fn hist_len(m: u64) -> usize {
    m.div_ceil(SORT_TILE as u64) as usize * RADIX
}

/// Significant bits of a tile id in a render with `num_tiles` tiles: enough for the largest
/// (`num_tiles − 1`); 0 for one tile, which needs no sort.
pub fn tile_bits(num_tiles: usize) -> u32 {
    let max_tile = num_tiles.saturating_sub(1) as u32;
    32 - max_tile.leading_zeros()
}

/// Sorts `keys[0][..m]` / `vals[0][..m]` stably by key bits `begin_bit..end_bit` (the other
/// bits must not matter to the order the caller wants). Returns which of the two buffers holds
/// the result (0 or 1).
#[allow(clippy::too_many_arguments)]
pub fn sort_pairs(
    k: &Kernels,
    m: u64,
    begin_bit: u32,
    end_bit: u32,
    keys: &mut [DeviceBuffer<u32>; 2],
    vals: &mut [DeviceBuffer<u32>; 2],
    hist: &mut DeviceBuffer<u32>,
    scan_tmp: &mut Vec<DeviceBuffer<u32>>,
) -> Result<usize, CudaError> {
    let mut cur = 0usize;
    if m <= 1 {
        return Ok(cur);
    }
    let passes = end_bit.saturating_sub(begin_bit).div_ceil(RADIX_BITS);
    for pass in 0..passes {
        let shift = begin_bit + pass * RADIX_BITS;
        let (k0, k1) = keys.split_at_mut(1);
        let (v0, v1) = vals.split_at_mut(1);
        let (kin, kout, vin, vout) = if cur == 0 {
            (&k0[0], &mut k1[0], &v0[0], &mut v1[0])
        } else {
            (&k1[0], &mut k0[0], &v1[0], &mut v0[0])
        };
        k.radix_histogram(m, kin, shift, hist)?;
        k.scan_u32(hist, hist_len(m) as u64, scan_tmp)?;
        k.radix_scatter(m, kin, vin, shift, hist, kout, vout)?;
        cur = 1 - cur;
    }
    Ok(cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tile_bits_cover_the_largest_tile() {
        assert_eq!(tile_bits(1), 0);
        assert_eq!(tile_bits(2), 1);
        assert_eq!(tile_bits(3), 2);
        // 1080p with 16-pixel tiles: 120 × 68 = 8160 tiles → 13 bits.
        assert_eq!(tile_bits(120 * 68), 13);
        assert_eq!(tile_bits(8192), 13);
        assert_eq!(tile_bits(8193), 14);
        assert_eq!(hist_len(1), RADIX);
        assert_eq!(hist_len(SORT_TILE as u64), RADIX);
        assert_eq!(hist_len(SORT_TILE as u64 + 1), 2 * RADIX);
    }
}
