//! Area-filter downscaling of pixel planes: the one set of rules by which a view gets smaller,
//! whether `gs-pack convert` resizes it before packing (`--downscale N`, `--max-width PX`) or
//! the loader resizes a packed view as it is read (`gs-train -r N`, `--data-factor N`).
//!
//! This module owns:
//! - [`Resize`], what a user asks for, and [`target_size`], the size it gives a view;
//! - [`AxisTaps`], the area (box) filter of one axis, and the row kernels on top of it
//!   ([`area_row_u8`] for bytes, [`area_row_u16`] for the packed inverse-depth plane), and
//!   [`point_row_u16`], the rule for a plane of sparse points (SfM depths), which keeps points
//!   instead of averaging them;
//! - the byte rules the pipelines share: alpha premultiplication around a resample
//!   ([`premultiply`], [`unpremultiply`]) and a resampled mask's threshold ([`MASK_USED_MIN`]).
//!
//! Invariants: a resize never enlarges a side and never yields a side of 0; pixel `(i, j)` has
//! its centre at `(i + 0.5, j + 0.5)`, so output pixel `o` covers the source interval
//! `[o·s, (o+1)·s)` with `s = source / output`; for an integer factor the filter is the exact
//! mean of each block, and a factor-1 "resize" is the identity. The kernels are serial: the
//! packer runs them over rows in parallel, a loader worker (one view per thread) runs them
//! row by row, and both therefore produce the same bytes.

use serde::{Deserialize, Serialize};

/// How views are resized (`gs-pack convert --max-width PX / --downscale N`; `gs-train -r N /
/// --data-factor N` on a packed view).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Resize {
    /// Keep the size.
    #[default]
    None,
    /// Scale images wider than this down to exactly this width, keeping the aspect (the
    /// original 3DGS does this with 1600). Narrower images are kept as they are.
    MaxWidth(u32),
    /// Divide both sides by this factor, rounding to nearest (at least 1 pixel). 0 and 1 mean
    /// no resize.
    Downscale(u32),
}

impl Resize {
    /// Whether this keeps every size ([`Resize::None`], or a factor of 0 or 1).
    pub fn is_none(&self) -> bool {
        matches!(self, Resize::None | Resize::Downscale(0 | 1))
    }
}

impl std::fmt::Display for Resize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            r if r.is_none() => write!(f, "the stored size"),
            Resize::MaxWidth(px) => write!(f, "at most {px} px wide"),
            Resize::Downscale(n) => write!(f, "downscaled {n}×"),
            Resize::None => unreachable!("handled above"),
        }
    }
}

/// The size [`Resize`] gives an image of `width × height`. Never larger than the input and never
/// smaller than 1×1.
pub fn target_size(width: u32, height: u32, resize: Resize) -> (u32, u32) {
    // Round-half-up integer division; u64 so `w + n/2` cannot overflow.
    let div_round = |v: u32, n: u64| (((v as u64) + n / 2) / n).max(1) as u32;
    match resize {
        Resize::None => (width, height),
        Resize::Downscale(n) if n <= 1 => (width, height),
        Resize::Downscale(n) => (div_round(width, n as u64), div_round(height, n as u64)),
        Resize::MaxWidth(px) => {
            let px = px.max(1);
            if width <= px {
                (width, height)
            } else {
                // h · px / w, rounded to nearest, in integers (exact for any u32 inputs).
                let h =
                    ((height as u64 * px as u64 * 2 + width as u64) / (2 * width as u64)).max(1);
                (px, h.min(height as u64) as u32)
            }
        }
    }
}

/// A resampled mask pixel (the mean of the 0/255 pixels it covers, rounded) is used only at or
/// above this: only when everything it covers was used, up to the filter's rounding. Excluded
/// regions may grow by a pixel, never shrink.
pub const MASK_USED_MIN: u8 = 254;

/// Colour byte `c` premultiplied by alpha `a` (rounded), before a resample.
#[inline]
pub fn premultiply(c: u8, a: u8) -> u8 {
    ((c as u32 * a as u32 + 127) / 255) as u8
}

/// Premultiplied colour byte `v` back to straight alpha `a` after a resample (0 where fully
/// transparent: no colour is known there).
#[inline]
pub fn unpremultiply(v: u8, a: u8) -> u8 {
    if a == 0 {
        0
    } else {
        ((v as u32 * 255 + a as u32 / 2) / a as u32).min(255) as u8
    }
}

/// Area-filter taps of one axis: for each output index, the first source index and the overlap
/// length of each source pixel with the output pixel's footprint (in source pixels).
pub struct AxisTaps {
    start: Vec<usize>,
    /// `weights[offset[o]..offset[o + 1]]` are output `o`'s taps.
    offset: Vec<usize>,
    weights: Vec<f32>,
    /// Sum of output `o`'s weights (its footprint width, `src/dst` up to rounding).
    pub total: Vec<f32>,
    /// Source pixels of the axis.
    source: usize,
}

impl AxisTaps {
    /// The taps from `src` source pixels to `dst` output pixels (`1 ≤ dst ≤ src`).
    pub fn new(src: u32, dst: u32) -> AxisTaps {
        let scale = src as f64 / dst as f64;
        let mut t = AxisTaps {
            start: Vec::with_capacity(dst as usize),
            offset: Vec::with_capacity(dst as usize + 1),
            // Consecutive footprints share at most their boundary pixel: at most src + dst
            // taps in all (reserved once, so the heap bound below holds).
            weights: Vec::with_capacity(src as usize + dst as usize),
            total: Vec::with_capacity(dst as usize),
            source: src as usize,
        };
        t.offset.push(0);
        for o in 0..dst as usize {
            // Output pixel o covers [o·scale, (o+1)·scale) of the source axis. For an integer
            // factor these bounds and every overlap are small exact integers, so the filter is
            // an exact box mean.
            let a = o as f64 * scale;
            let b = ((o + 1) as f64 * scale).min(src as f64);
            let first = (a.floor() as usize).min(src as usize - 1);
            let last = (b.ceil() as usize).clamp(first + 1, src as usize);
            let mut sum = 0.0f64;
            let mut n = 0;
            for s in first..last {
                let wgt = (b.min(s as f64 + 1.0) - a.max(s as f64)).max(0.0);
                if wgt > 0.0 || n == 0 {
                    t.weights.push(wgt as f32);
                    sum += wgt;
                    n += 1;
                }
            }
            if sum <= 0.0 {
                // Only reachable through rounding at a degenerate footprint; fall back to
                // nearest so the output is never 0/0.
                t.weights[t.offset[o]] = 1.0;
                sum = 1.0;
            }
            t.start.push(first);
            t.offset.push(t.weights.len());
            t.total.push(sum as f32);
        }
        t
    }

    /// Heap bytes of the taps from `src` to `dst` pixels (an upper bound: what
    /// [`AxisTaps::new`] reserves).
    pub fn heap_bytes(src: u32, dst: u32) -> usize {
        let (src, dst) = (src as usize, dst as usize);
        dst * std::mem::size_of::<usize>()
            + (dst + 1) * std::mem::size_of::<usize>()
            + (src + dst) * std::mem::size_of::<f32>()
            + dst * std::mem::size_of::<f32>()
    }

    /// Output `o`'s first source index and its weights (one per source index from there).
    pub fn taps(&self, o: usize) -> (usize, &[f32]) {
        (
            self.start[o],
            &self.weights[self.offset[o]..self.offset[o + 1]],
        )
    }

    /// Output pixels.
    pub fn len(&self) -> usize {
        self.start.len()
    }

    /// Whether there are no output pixels (never, for taps built by [`AxisTaps::new`]).
    pub fn is_empty(&self) -> bool {
        self.start.is_empty()
    }
}

/// Output row `oy` of an area downscale of an interleaved byte image of `C` channels (`src`,
/// rows of `xs`'s source width): every output byte is the overlap-weighted mean of the source
/// bytes it covers, rounded to nearest. `acc` is scratch of at least `row.len()` values.
pub fn area_row_u8<const C: usize>(
    src: &[u8],
    xs: &AxisTaps,
    ys: &AxisTaps,
    oy: usize,
    acc: &mut [f32],
    row: &mut [u8],
) {
    let width = xs.len();
    debug_assert_eq!(row.len(), width * C);
    let src_stride = xs.source * C;
    let acc = &mut acc[..width * C];
    acc.fill(0.0);
    let (sy0, wy) = ys.taps(oy);
    for (k, &wyk) in wy.iter().enumerate() {
        let srow = &src[(sy0 + k) * src_stride..(sy0 + k + 1) * src_stride];
        for ox in 0..width {
            let (sx0, wx) = xs.taps(ox);
            let mut sum = [0f32; C];
            for (m, &wxm) in wx.iter().enumerate() {
                let p = &srow[(sx0 + m) * C..(sx0 + m) * C + C];
                for c in 0..C {
                    sum[c] += wxm * p[c] as f32;
                }
            }
            for c in 0..C {
                acc[ox * C + c] += wyk * sum[c];
            }
        }
    }
    let ty = ys.total[oy];
    for ox in 0..width {
        let area = xs.total[ox] * ty;
        for c in 0..C {
            // Mean of bytes: in [0, 255]; +0.5 and a saturating cast round to nearest.
            row[ox * C + c] = (acc[ox * C + c] / area + 0.5) as u8;
        }
    }
}

/// Output row `oy` of an area downscale of a plane of `u16` values (`src`, little-endian bytes,
/// rows of `xs`'s source width) into `row` (little-endian bytes): each output is the
/// overlap-weighted mean of the values it covers, in f64, rounded to nearest; or 0 when any
/// value it covers is 0, which means "no value here" (the inverse-depth plane's no depth),
/// never a value to average.
pub fn area_row_u16(src: &[u8], xs: &AxisTaps, ys: &AxisTaps, oy: usize, row: &mut [u8]) {
    let src_stride = xs.source * 2;
    let (sy0, wy) = ys.taps(oy);
    let ty = ys.total[oy] as f64;
    for (ox, out) in row.chunks_exact_mut(2).enumerate() {
        let (sx0, wx) = xs.taps(ox);
        let mut sum = 0f64;
        let mut none = false;
        for (k, &wyk) in wy.iter().enumerate() {
            let srow = &src[(sy0 + k) * src_stride..];
            for (m, &wxm) in wx.iter().enumerate() {
                let o = (sx0 + m) * 2;
                let v = u16::from_le_bytes([srow[o], srow[o + 1]]);
                none |= v == 0 && wyk * wxm > 0.0;
                sum += (wyk * wxm) as f64 * v as f64;
            }
        }
        let value = if none {
            0
        } else {
            // A mean of values ≥ 1 rounds to ≥ 1: never mistaken for "no value".
            ((sum / (xs.total[ox] as f64 * ty) + 0.5).min(u16::MAX as f64)) as u16
        };
        out.copy_from_slice(&value.to_le_bytes());
    }
}

/// How a packed inverse-depth plane is downscaled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DepthRule {
    /// A dense map (monocular depth): the area mean of the values ([`area_row_u16`]).
    #[default]
    AreaMean,
    /// Sparse points (SfM depths): the nearest point in each output pixel
    /// ([`point_row_u16`]).
    Points,
}

/// The output pixel along one axis whose footprint holds source pixel `i`'s centre: output `o`
/// covers `[o·s, (o+1)·s)` with `s = source / output`, so `o = ⌊(i + ½)·output / source⌋`,
/// computed in integers (exact for every size).
fn output_of(i: usize, source: usize, output: usize) -> usize {
    ((2 * i + 1) * output) / (2 * source)
}

/// The source pixels of one axis whose centres lie in output pixel `o`'s footprint (see
/// [`output_of`]); each source pixel belongs to exactly one output pixel.
fn sources_of(o: usize, source: usize, output: usize) -> std::ops::Range<usize> {
    let mut start = (o * source / output).min(source);
    while start < source && output_of(start, source, output) < o {
        start += 1;
    }
    let mut end = start;
    while end < source && output_of(end, source, output) == o {
        end += 1;
    }
    start..end
}

/// Output row `oy` of a downscale of a *sparse* plane of `u16` values (`src`, little-endian
/// bytes, `from.0 × from.1`) to `to` pixels into `row` (little-endian bytes): each output holds
/// the largest value among the source pixels whose centres lie in its footprint, or 0 where
/// they are all 0. For a plane of SfM points' inverse depths (the pack's `sfm_depths`, whose
/// scale is positive) that keeps every point that lands alone in an output pixel at its exact
/// stored value and, where several land together, the nearest, as the packer's per-pixel
/// z-buffer does; an area mean would drop nearly every point (any 0 it covers makes it 0, see
/// [`area_row_u16`]). Each source pixel lands in exactly one output pixel, so no point is
/// counted twice.
pub fn point_row_u16(src: &[u8], from: (u32, u32), to: (u32, u32), oy: usize, row: &mut [u8]) {
    let (fw, fh) = (from.0 as usize, from.1 as usize);
    let (tw, th) = (to.0 as usize, to.1 as usize);
    debug_assert_eq!(src.len(), 2 * fw * fh);
    debug_assert_eq!(row.len(), 2 * tw);
    row.fill(0);
    for sy in sources_of(oy, fh, th) {
        let srow = &src[2 * sy * fw..2 * (sy + 1) * fw];
        for (sx, b) in srow.chunks_exact(2).enumerate() {
            let v = u16::from_le_bytes([b[0], b[1]]);
            if v == 0 {
                continue;
            }
            let o = 2 * output_of(sx, fw, tw);
            if v > u16::from_le_bytes([row[o], row[o + 1]]) {
                row[o..o + 2].copy_from_slice(&v.to_le_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every source pixel lands in exactly one output pixel, the one whose footprint holds its
    /// centre, for integer and fractional factors alike.
    #[test]
    fn each_source_pixel_lands_in_one_output_pixel() {
        for (source, output) in [(8, 4), (7, 3), (100, 30), (5, 5), (1067, 533), (9, 1)] {
            let s = source as f64 / output as f64;
            let mut seen = vec![0u32; source];
            for o in 0..output {
                for i in sources_of(o, source, output) {
                    seen[i] += 1;
                    let centre = i as f64 + 0.5;
                    assert!(
                        centre >= o as f64 * s - 1e-9 && centre < (o + 1) as f64 * s + 1e-9,
                        "{source}→{output}: pixel {i} in output {o}"
                    );
                }
            }
            assert!(seen.iter().all(|&n| n == 1), "{source}→{output}: {seen:?}");
        }
    }

    /// The sparse rule keeps points: a lone point keeps its exact value, two in one output
    /// pixel give the larger (nearer), and an output pixel without points holds 0.
    #[test]
    fn sparse_planes_keep_their_points_when_downscaled() {
        let (w, h) = (6u32, 4u32);
        let mut plane = vec![0u16; (w * h) as usize];
        plane[0] = 500; // (0, 0) → output (0, 0), alone
        plane[3 * 6 + 5] = 40_000; // (5, 3) → output (2, 1)
        plane[2 * 6 + 4] = 41_000; // (4, 2) → output (2, 1): the nearer of the two
        plane[6 + 3] = 7; // (3, 1) → output (1, 0), alone
        let src: Vec<u8> = plane.iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut got = Vec::new();
        for oy in 0..2 {
            let mut row = vec![0xAAu8; 6];
            point_row_u16(&src, (w, h), (3, 2), oy, &mut row);
            got.extend(
                row.chunks_exact(2)
                    .map(|b| u16::from_le_bytes([b[0], b[1]])),
            );
        }
        assert_eq!(got, vec![500, 7, 0, 0, 0, 41_000]);
        // The area rule, by contrast, loses every one of them (each block holds a 0).
        let (xs, ys) = (AxisTaps::new(w, 3), AxisTaps::new(h, 2));
        for oy in 0..2 {
            let mut row = vec![0u8; 6];
            area_row_u16(&src, &xs, &ys, oy, &mut row);
            assert!(row.iter().all(|&b| b == 0));
        }
    }

    #[test]
    fn target_sizes_follow_each_rule() {
        assert_eq!(target_size(1600, 1066, Resize::Downscale(2)), (800, 533));
        assert_eq!(target_size(5, 3, Resize::Downscale(2)), (3, 2));
        assert_eq!(target_size(1, 1, Resize::Downscale(8)), (1, 1));
        assert_eq!(
            target_size(3200, 2133, Resize::MaxWidth(1600)),
            (1600, 1067)
        );
        assert_eq!(target_size(800, 600, Resize::MaxWidth(1600)), (800, 600));
        for r in [Resize::None, Resize::Downscale(0), Resize::Downscale(1)] {
            assert!(r.is_none());
            assert_eq!(target_size(7, 5, r), (7, 5));
        }
        assert!(!Resize::MaxWidth(10).is_none());
        assert_eq!(Resize::Downscale(4).to_string(), "downscaled 4×");
        assert_eq!(Resize::MaxWidth(1600).to_string(), "at most 1600 px wide");
        assert_eq!(Resize::Downscale(1).to_string(), "the stored size");
    }

    #[test]
    fn premultiplication_round_trips_opaque_and_clears_transparent() {
        for c in 0..=255u8 {
            assert_eq!(unpremultiply(premultiply(c, 255), 255), c);
            assert_eq!(premultiply(c, 0), 0);
            assert_eq!(unpremultiply(c, 0), 0);
        }
        // Half alpha: within one step of the straight value.
        for c in 0..=255u8 {
            let back = unpremultiply(premultiply(c, 128), 128);
            assert!(back.abs_diff(c) <= 1, "{c} → {back}");
        }
    }

    /// A row kernel's output for an integer factor is the exact block mean.
    #[test]
    fn integer_factors_are_exact_block_means() {
        let (w, h) = (6u32, 4u32);
        let src: Vec<u8> = (0..w * h * 2).map(|i| (i * 37 % 251) as u8).collect();
        let (xs, ys) = (AxisTaps::new(w, 3), AxisTaps::new(h, 2));
        let mut acc = vec![0f32; 6];
        for oy in 0..2 {
            let mut row = vec![0u8; 6];
            area_row_u8::<2>(&src, &xs, &ys, oy, &mut acc, &mut row);
            for ox in 0..3 {
                for c in 0..2 {
                    let mut sum = 0u32;
                    for dy in 0..2 {
                        for dx in 0..2 {
                            let (x, y) = (ox * 2 + dx, oy * 2 + dy);
                            sum += src[(y * w as usize + x) * 2 + c] as u32;
                        }
                    }
                    // Mean of four bytes, rounded half up.
                    assert_eq!(
                        row[ox * 2 + c] as u32,
                        (sum + 2) / 4,
                        "({ox}, {oy}) channel {c}"
                    );
                }
            }
        }
        let depth: Vec<u8> = [1000u16, 3000, 0, 0, 7, 8, 60000, 65535]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let (xs, ys) = (AxisTaps::new(4, 2), AxisTaps::new(2, 1));
        let mut row = vec![0u8; 4];
        area_row_u16(&depth, &xs, &ys, 0, &mut row);
        let got: Vec<u16> = row
            .chunks_exact(2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .collect();
        // (1000 + 3000 + 7 + 8) / 4 = 1003.75; the second block holds a 0, "no value", which
        // is never averaged (it would give 31383.75).
        assert_eq!(got, vec![1004, 0]);
    }

    /// A fractional factor weights each source pixel by its overlap.
    #[test]
    fn fractional_factors_weight_by_overlap() {
        // 3 → 2: output 0 covers [0, 1.5): pixel 0 whole and half of pixel 1.
        let src = [0u8, 90, 255];
        let (xs, ys) = (AxisTaps::new(3, 2), AxisTaps::new(1, 1));
        let mut acc = [0f32; 2];
        let mut row = [0u8; 2];
        area_row_u8::<1>(&src, &xs, &ys, 0, &mut acc, &mut row);
        assert_eq!(row, [30, 200]);
    }
}
