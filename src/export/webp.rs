//! A lossless WebP (VP8L) encoder, for the images of a SOG model ([`super::sog`]).
//!
//! SOG stores a model as images whose texels are quantised values, not photographs: codebook
//! indices, the bytes of 16-bit positions, palette labels. The `image` crate's encoder writes
//! a valid VP8L stream but with one fixed predictor, the subtract-green transform always on,
//! no backward references and no colour cache, so SOG files came out ~24 % larger than the
//! reference writer's (libwebp). This encoder uses the parts of the format that pay on such
//! data:
//!
//! - **Transforms**: subtract-green; the cross-colour transform (red and blue less multiples
//!   of green, blue of red, per block); the predictor transform, one of the 14 predictors per
//!   block. Predictors and multipliers are chosen per block by an entropy estimate against
//!   the blocks before. Each image is encoded four ways (`VARIANTS`) and the smallest
//!   stream kept: codebook indices gain nothing from prediction, positions in Morton order a
//!   lot, and the three colours of one SH coefficient move together.
//! - **Backward references**: LZ77 over pixels through hash chains of pixel pairs, with a
//!   one-step lazy match; the pixel above and the one to the left are always tried, since
//!   their distance codes are the cheapest.
//! - **Colour cache**: its size (0 or 2¹ to 2¹¹ entries) picked by the entropy of the
//!   symbols each size would give.
//! - **Prefix codes**: Huffman codes limited to 15 bits (7 for the code-length code), code
//!   lengths run-length coded, trailing zeros cut with the format's `max_symbol`.
//!
//! Not used: an entropy image (several prefix-code groups over the image) and the
//! colour-indexing transform. On the demo model's SOG, libwebp (method 4) encodes the same
//! seven images 0.9 % smaller than this encoder does.
//!
//! Invariants: the output decodes to exactly the input pixels (every test decodes it with an
//! independent decoder and compares, as does the `webp_encode` fuzz target); it is a function
//! of the pixels alone (no timestamps, no randomness), so a model converts to the same bytes
//! every time; the memory it holds beside its input is bounded per pixel
//! ([`ENCODE_BYTES_PER_PIXEL`] + [`ENCODE_FIXED_BYTES`]; `tests/sog_memory.rs` measures at
//! most 30 B per pixel, on noise).

use std::collections::HashMap;

/// Why an image could not be encoded.
#[derive(Debug, thiserror::Error)]
pub enum WebpError {
    #[error("a lossless WebP image is 1 to 16,384 pixels a side, not {width}×{height}")]
    Dimensions { width: usize, height: usize },
    #[error("{len} bytes of RGBA are not a {width}×{height} image")]
    Length {
        len: usize,
        width: usize,
        height: usize,
    },
}

/// The largest side of a WebP image.
pub const MAX_SIDE: usize = 16_384;

/// What [`encode_rgba`] holds beside its input, per pixel, at most: the pixels as ARGB (4 B),
/// one trial's transformed copy and, while the predictor's residuals are computed, a second
/// (8 B), its hash chain (4 B), its copies and literals (8 B, at most one per pixel), its
/// stream and the smallest stream so far (each within 4 B per pixel for any image, held in
/// buffers up to twice that: 16 B).
pub const ENCODE_BYTES_PER_PIXEL: u64 = 4 + 8 + 4 + 8 + 16;

/// What [`encode_rgba`] holds beside its input whatever the image's size: the hash heads
/// (at most 2¹⁸ × 4 B), the colour-cache trials' tables and the prefix codes, with room.
pub const ENCODE_FIXED_BYTES: u64 = 2 << 20;

/// The RGBA image `rgba` (`width` × `height`, row-major, 4 B per pixel) as a lossless WebP
/// file (RIFF container, one `VP8L` chunk).
pub fn encode_rgba(rgba: &[u8], width: usize, height: usize) -> Result<Vec<u8>, WebpError> {
    if width == 0 || height == 0 || width > MAX_SIDE || height > MAX_SIDE {
        return Err(WebpError::Dimensions { width, height });
    }
    if rgba.len() != width * height * 4 {
        return Err(WebpError::Length {
            len: rgba.len(),
            width,
            height,
        });
    }
    let argb: Vec<u32> = rgba
        .chunks_exact(4)
        .map(|p| u32::from_be_bytes([p[3], p[0], p[1], p[2]]))
        .collect();
    let alpha_used = argb.iter().any(|&p| p >> 24 != 0xff);
    // Each variant is a full encoding, so the choice rests on exact sizes, not on an
    // estimate that leaves out copies and the cache. One at a time, keeping the smallest so
    // far, so the memory held is one trial's.
    let mut best: Option<Vec<u8>> = None;
    for variant in VARIANTS {
        let stream = encode_variant(&argb, width, height, alpha_used, variant);
        if best.as_ref().is_none_or(|b| stream.len() < b.len()) {
            best = Some(stream);
        }
    }
    let stream = best.expect("four variants were tried");
    let padded = stream.len() + stream.len() % 2;
    let mut out = Vec::with_capacity(20 + padded);
    out.extend_from_slice(b"RIFF");
    out.extend_from_slice(&((4 + 8 + padded) as u32).to_le_bytes());
    out.extend_from_slice(b"WEBPVP8L");
    out.extend_from_slice(&(stream.len() as u32).to_le_bytes());
    out.extend_from_slice(&stream);
    if stream.len() % 2 == 1 {
        out.push(0);
    }
    Ok(out)
}

/// Which transforms a trial encoding applies, in the order applied (the reader undoes them
/// in reverse).
#[derive(Clone, Copy, Debug)]
struct Variant {
    subtract_green: bool,
    predict: bool,
    cross_color: bool,
}

/// No transform (best for codebook indices whose neighbours are unrelated and whose channels
/// are not), subtract-green or the cross-colour transform's finer multipliers per block
/// (channels that move together, as the three colours of one SH coefficient do), and the
/// predictor (neighbours that move together, as positions in Morton order do) followed by
/// the cross-colour transform (which can subtract green from the residuals, so subtract-green
/// before the predictor is not tried: on a SOG's seven images it saved 108 B in 772 kB).
const VARIANTS: [Variant; 4] = [
    Variant {
        subtract_green: false,
        predict: false,
        cross_color: false,
    },
    Variant {
        subtract_green: true,
        predict: false,
        cross_color: false,
    },
    Variant {
        subtract_green: false,
        predict: false,
        cross_color: true,
    },
    Variant {
        subtract_green: false,
        predict: true,
        cross_color: true,
    },
];

/// The VP8L stream (signature byte onwards) of `argb` with `variant`'s transforms.
fn encode_variant(
    argb: &[u32],
    width: usize,
    height: usize,
    alpha_used: bool,
    variant: Variant,
) -> Vec<u8> {
    let mut w = BitWriter::default();
    w.write(0x2f, 8);
    w.write(width as u32 - 1, 14);
    w.write(height as u32 - 1, 14);
    w.write(u32::from(alpha_used), 1);
    w.write(0, 3); // version
    let mut px = argb.to_vec();
    if variant.subtract_green {
        w.write(1, 1);
        w.write(2, 2);
        for p in &mut px {
            let g = (*p >> 8) & 0xff;
            let r = ((*p >> 16).wrapping_sub(g)) & 0xff;
            let b = (*p).wrapping_sub(g) & 0xff;
            *p = (*p & 0xff00_ff00) | (r << 16) | b;
        }
    }
    let bits = predictor_bits(width, height);
    let sub_image = |w: &mut BitWriter, kind: u32, texels: &[u32]| {
        w.write(1, 1);
        w.write(kind, 2);
        w.write(bits - 2, 3);
        write_image_stream(w, texels, subsample(width, bits), false);
    };
    if variant.predict {
        let (modes, residuals) = predict_blocks(&px, width, height, bits);
        let texels: Vec<u32> = modes
            .iter()
            .map(|&m| 0xff00_0000 | (u32::from(m) << 8))
            .collect();
        sub_image(&mut w, 0, &texels);
        px = residuals;
    }
    if variant.cross_color {
        // Red and blue less a multiple of green (and blue of red), per block.
        let elements = choose_cross_color(&px, width, height, bits);
        let texels: Vec<u32> = elements.iter().map(|e| e.to_argb()).collect();
        sub_image(&mut w, 1, &texels);
        apply_cross_color(&mut px, width, bits, &elements);
    }
    w.write(0, 1); // no more transforms
    write_image_stream(&mut w, &px, width, true);
    w.finish()
}

/// `size` divided by the block side `1 << bits`, rounded up.
fn subsample(size: usize, bits: u32) -> usize {
    (size + (1 << bits) - 1) >> bits
}

/// The side (log₂) of the predictor's and the cross-colour transform's blocks: 8 pixels for
/// images under 256², 16 for larger ones, whose sub-images would otherwise grow with them.
fn predictor_bits(width: usize, height: usize) -> u32 {
    if width * height < 256 * 256 {
        3
    } else {
        4
    }
}

// ---------------------------------------------------------------------------------------
// Bits

/// Writes bits least significant first, as VP8L reads them.
#[derive(Default)]
struct BitWriter {
    out: Vec<u8>,
    acc: u64,
    n: u32,
}

impl BitWriter {
    /// Appends the low `n` bits of `v` (`n` ≤ 32).
    fn write(&mut self, v: u32, n: u32) {
        debug_assert!(n <= 32 && (n == 32 || v >> n == 0), "{v} in {n} bits");
        self.acc |= u64::from(v) << self.n;
        self.n += n;
        while self.n >= 8 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.n -= 8;
        }
    }

    fn finish(mut self) -> Vec<u8> {
        if self.n > 0 {
            self.out.push(self.acc as u8);
        }
        self.out
    }
}

/// A length or distance `v` ≥ 1 as VP8L's prefix code: (symbol, extra bits, their value).
fn prefix_code(v: u32) -> (u32, u32, u32) {
    debug_assert!(v >= 1);
    let d = v - 1;
    if d < 4 {
        return (d, 0, 0);
    }
    let high = 31 - d.leading_zeros();
    let second = (d >> (high - 1)) & 1;
    let extra_bits = high - 1;
    (2 * high + second, extra_bits, d & ((1 << extra_bits) - 1))
}

// ---------------------------------------------------------------------------------------
// Predictor transform

/// The per-channel average of two pixels, rounded down.
fn average2(a: u32, b: u32) -> u32 {
    (((a ^ b) & 0xfefe_fefe) >> 1) + (a & b)
}

fn channels(p: u32) -> [i32; 4] {
    [
        (p >> 24) as i32,
        ((p >> 16) & 0xff) as i32,
        ((p >> 8) & 0xff) as i32,
        (p & 0xff) as i32,
    ]
}

fn from_channels(c: [i32; 4]) -> u32 {
    (c[0].clamp(0, 255) as u32) << 24
        | (c[1].clamp(0, 255) as u32) << 16
        | (c[2].clamp(0, 255) as u32) << 8
        | c[3].clamp(0, 255) as u32
}

/// Predictor `mode` (0 to 13) from the left, top, top-right and top-left pixels, as the
/// decoder computes it.
fn predict(mode: u8, l: u32, t: u32, tr: u32, tl: u32) -> u32 {
    match mode {
        0 => 0xff00_0000,
        1 => l,
        2 => t,
        3 => tr,
        4 => tl,
        5 => average2(average2(l, tr), t),
        6 => average2(l, tl),
        7 => average2(l, t),
        8 => average2(tl, t),
        9 => average2(t, tr),
        10 => average2(average2(l, tl), average2(t, tr)),
        11 => {
            // Select: the one of L and T nearer (Manhattan, over channels) to L + T − TL.
            let (lc, tc, tlc) = (channels(l), channels(t), channels(tl));
            let to_l: i32 = (0..4).map(|i| (tc[i] - tlc[i]).abs()).sum();
            let to_t: i32 = (0..4).map(|i| (lc[i] - tlc[i]).abs()).sum();
            if to_l < to_t {
                l
            } else {
                t
            }
        }
        12 => {
            let (lc, tc, tlc) = (channels(l), channels(t), channels(tl));
            from_channels(std::array::from_fn(|i| lc[i] + tc[i] - tlc[i]))
        }
        13 => {
            let (a, tlc) = (channels(average2(l, t)), channels(tl));
            // Integer division truncates toward zero, as the format's C definition does.
            from_channels(std::array::from_fn(|i| a[i] + (a[i] - tlc[i]) / 2))
        }
        _ => unreachable!("VP8L has 14 predictors"),
    }
}

/// The per-channel difference `p − q`, modulo 256.
fn sub_pixels(p: u32, q: u32) -> u32 {
    let mut out = 0;
    for shift in [0, 8, 16, 24] {
        let d = ((p >> shift) & 0xff).wrapping_sub((q >> shift) & 0xff) & 0xff;
        out |= d << shift;
    }
    out
}

/// The prediction of pixel (x, y) of `px` under `mode`, with the format's borders: the first
/// pixel predicts from black, the first row from the left, the first column from above.
fn prediction(px: &[u32], width: usize, x: usize, y: usize, mode: u8) -> u32 {
    let i = y * width + x;
    if y == 0 {
        return if x == 0 { 0xff00_0000 } else { px[i - 1] };
    }
    if x == 0 {
        return px[i - width];
    }
    // The top-right of the last column is, in memory order, the first pixel of this row.
    predict(
        mode,
        px[i - 1],
        px[i - width],
        px[i - width + 1],
        px[i - width - 1],
    )
}

/// Per-channel counts of the values chosen so far, and each value's cost in bits under
/// them: the estimate by which the predictor and cross-colour searches price a block.
struct ChannelCosts<const N: usize> {
    counts: [[u32; 256]; N],
    bits: [[f32; 256]; N],
}

impl<const N: usize> ChannelCosts<N> {
    /// A small prior towards 0, so the first blocks prefer predicting well to not predicting
    /// at all (and small multipliers to large ones).
    fn new() -> Self {
        let mut counts = [[1u32; 256]; N];
        for c in &mut counts {
            c[0] = 16;
        }
        ChannelCosts {
            counts,
            bits: [[0.0; 256]; N],
        }
    }

    /// Recomputes the costs, `log2(total / count)`, from the counts.
    fn refresh(&mut self) {
        for (b, c) in self.bits.iter_mut().zip(&self.counts) {
            let total: f32 = c.iter().map(|&v| v as f32).sum();
            for (bv, &cv) in b.iter_mut().zip(c) {
                *bv = (total / cv as f32).log2();
            }
        }
    }
}

/// Picks a predictor per block of side `1 << bits`, the one whose residuals cost the fewest
/// bits under the distribution of the residuals chosen so far (blocks in raster order), and
/// returns the modes with the residuals of `px` under them.
fn predict_blocks(px: &[u32], width: usize, height: usize, bits: u32) -> (Vec<u8>, Vec<u32>) {
    let (bw, bh) = (subsample(width, bits), subsample(height, bits));
    let mut modes = vec![0u8; bw * bh];
    let mut residuals = vec![0u32; px.len()];
    // Channels alpha, red, green, blue.
    let mut costs = ChannelCosts::<4>::new();
    let side = 1usize << bits;
    let (mut trial, mut best_residuals) = (vec![0u32; side * side], vec![0u32; side * side]);
    for by in 0..bh {
        for bx in 0..bw {
            costs.refresh();
            let cost = &costs.bits;
            let (x0, x1) = (bx << bits, ((bx + 1) << bits).min(width));
            let (y0, y1) = (by << bits, ((by + 1) << bits).min(height));
            let block_width = x1 - x0;
            let mut best = (f32::INFINITY, 0u8);
            for mode in 0..14u8 {
                // The first row and column predict the same under every mode: they are
                // computed but not priced.
                let mut bits_total = 0f32;
                for y in y0..y1 {
                    for x in x0..x1 {
                        let r = sub_pixels(px[y * width + x], prediction(px, width, x, y, mode));
                        trial[(y - y0) * block_width + (x - x0)] = r;
                        if x > 0 && y > 0 {
                            bits_total += cost[0][(r >> 24) as usize]
                                + cost[1][((r >> 16) & 0xff) as usize]
                                + cost[2][((r >> 8) & 0xff) as usize]
                                + cost[3][(r & 0xff) as usize];
                        }
                    }
                }
                if bits_total < best.0 {
                    best = (bits_total, mode);
                    std::mem::swap(&mut trial, &mut best_residuals);
                }
            }
            modes[by * bw + bx] = best.1;
            for y in y0..y1 {
                let row = &best_residuals[(y - y0) * block_width..(y - y0 + 1) * block_width];
                residuals[y * width + x0..y * width + x1].copy_from_slice(row);
                for &r in row {
                    for (c, counts) in costs.counts.iter_mut().enumerate() {
                        counts[((r >> (24 - 8 * c)) & 0xff) as usize] += 1;
                    }
                }
            }
        }
    }
    (modes, residuals)
}

// ---------------------------------------------------------------------------------------
// Cross-colour transform

/// One block's multipliers, in 3.5 fixed point: red −= g2r·green, blue −= g2b·green +
/// r2b·red (the red before its own change), on the channels read as signed bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct CrossColor {
    g2r: i8,
    g2b: i8,
    r2b: i8,
}

impl CrossColor {
    /// The sub-image texel: red_to_blue in red, green_to_blue in green, green_to_red in blue.
    fn to_argb(self) -> u32 {
        0xff00_0000
            | u32::from(self.r2b as u8) << 16
            | u32::from(self.g2b as u8) << 8
            | u32::from(self.g2r as u8)
    }
}

/// `t · c >> 5` on signed bytes, the format's colour-transform delta.
fn delta(t: i8, c: u8) -> i32 {
    (i32::from(t) * i32::from(c as i8)) >> 5
}

/// Picks each block's multipliers: per channel, the value whose transformed channel costs
/// the fewest bits under the distribution of the blocks before ([`best_multiplier`];
/// green-to-blue before red-to-blue).
fn choose_cross_color(px: &[u32], width: usize, height: usize, bits: u32) -> Vec<CrossColor> {
    let (bw, bh) = (subsample(width, bits), subsample(height, bits));
    let mut out = vec![CrossColor::default(); bw * bh];
    // Channels red, blue.
    let mut costs = ChannelCosts::<2>::new();
    let mut block: Vec<(u8, u8, u8)> = Vec::with_capacity(1 << (2 * bits));
    for by in 0..bh {
        for bx in 0..bw {
            costs.refresh();
            let cost = &costs.bits;
            block.clear();
            for y in (by << bits)..((by + 1) << bits).min(height) {
                for x in (bx << bits)..((bx + 1) << bits).min(width) {
                    let p = px[y * width + x];
                    block.push(((p >> 16) as u8, (p >> 8) as u8, p as u8));
                }
            }
            let g2r = best_multiplier(&block, &cost[0], |m, (r, g, _)| {
                (i32::from(r) - delta(m, g)) as u8
            });
            let g2b = best_multiplier(&block, &cost[1], |m, (_, g, b)| {
                (i32::from(b) - delta(m, g)) as u8
            });
            let r2b = best_multiplier(&block, &cost[1], |m, (r, g, b)| {
                (i32::from(b) - delta(g2b, g) - delta(m, r)) as u8
            });
            let e = CrossColor { g2r, g2b, r2b };
            out[by * bw + bx] = e;
            for &(r, g, b) in &block {
                let (r2, b2) = cross_color(e, r, g, b);
                costs.counts[0][r2 as usize] += 1;
                costs.counts[1][b2 as usize] += 1;
            }
        }
    }
    out
}

/// The multiplier for one channel whose transformed values (`value(m, (r, g, b))`) cost the
/// fewest bits under `table` over `block`: every eighth value from −64 to 64, then the three
/// either side of the best (0 wins ties, then the earlier). Narrower than the format allows
/// (±128, step 1 near the best): the demo model's SOG grew by 10 B of 772 kB for half the
/// time.
fn best_multiplier(
    block: &[(u8, u8, u8)],
    table: &[f32; 256],
    value: impl Fn(i8, (u8, u8, u8)) -> u8,
) -> i8 {
    let bits_of = |m: i8| -> f32 { block.iter().map(|&p| table[value(m, p) as usize]).sum() };
    let mut best = (bits_of(0), 0i8);
    for m in (-64i8..=64).step_by(8) {
        let c = bits_of(m);
        if c < best.0 {
            best = (c, m);
        }
    }
    let centre = best.1;
    for m in centre.saturating_sub(3)..=centre.saturating_add(3) {
        let c = bits_of(m);
        if c < best.0 {
            best = (c, m);
        }
    }
    best.1
}

/// The transformed red and blue of one pixel.
fn cross_color(e: CrossColor, r: u8, g: u8, b: u8) -> (u8, u8) {
    let r2 = i32::from(r) - delta(e.g2r, g);
    let b2 = i32::from(b) - delta(e.g2b, g) - delta(e.r2b, r);
    (r2 as u8, b2 as u8)
}

fn apply_cross_color(px: &mut [u32], width: usize, bits: u32, elements: &[CrossColor]) {
    let bw = subsample(width, bits);
    for (i, p) in px.iter_mut().enumerate() {
        let (x, y) = (i % width, i / width);
        let e = elements[(y >> bits) * bw + (x >> bits)];
        let (r2, b2) = cross_color(e, (*p >> 16) as u8, (*p >> 8) as u8, *p as u8);
        *p = (*p & 0xff00_ff00) | u32::from(r2) << 16 | u32::from(b2);
    }
}

// ---------------------------------------------------------------------------------------
// Backward references

const HASH_BITS: u32 = 18;
/// How many earlier positions with the same two pixels a match search looks at.
const MAX_CHAIN: usize = 48;
/// The longest copy VP8L codes.
const MAX_LENGTH: usize = 4096;
/// The farthest copy VP8L codes.
const WINDOW: usize = (1 << 20) - 120;
const NONE: u32 = u32::MAX;

/// A literal (`len` 0) or a copy of `len` pixels from `dist` back.
#[derive(Clone, Copy, Debug)]
struct Token {
    len: u32,
    dist: u32,
}

/// The (x, y) offsets of distance codes 1 to 120: the neighbourhood above and to the left
/// that the format codes more cheaply than plain distances.
#[rustfmt::skip]
const PLANE: [(i8, i8); 120] = [
    (0, 1), (1, 0), (1, 1), (-1, 1), (0, 2), (2, 0), (1, 2), (-1, 2),
    (2, 1), (-2, 1), (2, 2), (-2, 2), (0, 3), (3, 0), (1, 3), (-1, 3),
    (3, 1), (-3, 1), (2, 3), (-2, 3), (3, 2), (-3, 2), (0, 4), (4, 0),
    (1, 4), (-1, 4), (4, 1), (-4, 1), (3, 3), (-3, 3), (2, 4), (-2, 4),
    (4, 2), (-4, 2), (0, 5), (3, 4), (-3, 4), (4, 3), (-4, 3), (5, 0),
    (1, 5), (-1, 5), (5, 1), (-5, 1), (2, 5), (-2, 5), (5, 2), (-5, 2),
    (4, 4), (-4, 4), (3, 5), (-3, 5), (5, 3), (-5, 3), (0, 6), (6, 0),
    (1, 6), (-1, 6), (6, 1), (-6, 1), (2, 6), (-2, 6), (6, 2), (-6, 2),
    (4, 5), (-4, 5), (5, 4), (-5, 4), (3, 6), (-3, 6), (6, 3), (-6, 3),
    (0, 7), (7, 0), (1, 7), (-1, 7), (5, 5), (-5, 5), (7, 1), (-7, 1),
    (4, 6), (-4, 6), (6, 4), (-6, 4), (2, 7), (-2, 7), (7, 2), (-7, 2),
    (3, 7), (-3, 7), (7, 3), (-7, 3), (5, 6), (-5, 6), (6, 5), (-6, 5),
    (8, 0), (4, 7), (-4, 7), (7, 4), (-7, 4), (8, 1), (8, 2), (6, 6),
    (-6, 6), (8, 3), (5, 7), (-5, 7), (7, 5), (-7, 5), (8, 4), (6, 7),
    (-6, 7), (7, 6), (-7, 6), (8, 5), (7, 7), (-7, 7), (8, 6), (8, 7),
];

/// Maps a copy distance to its distance code for an image `width` wide: the smallest plane
/// code that decodes to it, else the distance + 120.
struct DistanceCodes(HashMap<u32, u32>);

impl DistanceCodes {
    fn new(width: usize) -> Self {
        let mut map = HashMap::new();
        for (k, &(dx, dy)) in PLANE.iter().enumerate().rev() {
            let d = i64::from(dx) + i64::from(dy) * width as i64;
            // The decoder reads a plane code that lands before the row's start as 1.
            map.insert(d.max(1) as u32, k as u32 + 1);
        }
        DistanceCodes(map)
    }

    fn code(&self, dist: u32) -> u32 {
        self.0.get(&dist).copied().unwrap_or(dist + 120)
    }
}

/// Two pixels' hash, the key of the match search's chains.
fn pair_hash(a: u32, b: u32, bits: u32) -> usize {
    let h = (u64::from(a) << 32 | u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (h >> (64 - bits)) as usize
}

/// The match search: hash chains over pixel pairs, positions inserted in order.
struct Matcher<'a> {
    px: &'a [u32],
    width: usize,
    /// Hash bits: enough for the image, at most [`HASH_BITS`].
    bits: u32,
    head: Vec<u32>,
    prev: Vec<u32>,
    inserted: usize,
}

impl<'a> Matcher<'a> {
    fn new(px: &'a [u32], width: usize) -> Self {
        let bits = (px.len().max(2).ilog2() + 1).clamp(8, HASH_BITS);
        Matcher {
            px,
            width,
            bits,
            head: vec![NONE; 1 << bits],
            prev: vec![NONE; px.len()],
            inserted: 0,
        }
    }

    /// Makes the positions before `end` findable.
    fn insert_to(&mut self, end: usize) {
        let last = end.min(self.px.len().saturating_sub(1));
        while self.inserted < last {
            let i = self.inserted;
            let h = pair_hash(self.px[i], self.px[i + 1], self.bits);
            self.prev[i] = self.head[h];
            self.head[h] = i as u32;
            self.inserted += 1;
        }
    }

    fn match_len(&self, i: usize, j: usize) -> usize {
        let max = (self.px.len() - i).min(MAX_LENGTH);
        let (a, b) = (&self.px[i..i + max], &self.px[j..j + max]);
        a.iter().zip(b).take_while(|(x, y)| x == y).count()
    }

    /// The longest copy at `i` as (length, distance), (0, 0) for none: first from the pixel
    /// to the left and the one above (the cheapest distances, so they win ties), then along
    /// the hash chain.
    fn longest(&self, i: usize) -> (usize, usize) {
        let n = self.px.len();
        let mut best = (0usize, 0usize);
        for d in [1, self.width] {
            if d <= i {
                let l = self.match_len(i, i - d);
                if l > best.0 {
                    best = (l, d);
                }
            }
        }
        if i + 1 >= n {
            return best;
        }
        let limit = MAX_LENGTH.min(n - i);
        let mut j = self.head[pair_hash(self.px[i], self.px[i + 1], self.bits)];
        let mut steps = 0;
        while j != NONE && steps < MAX_CHAIN && best.0 < limit {
            let j_ = j as usize;
            let d = i - j_;
            if d > WINDOW {
                break;
            }
            // The pixel that would make this match longer than the best decides quickly.
            let probe = best.0.min(limit - 1);
            if self.px[j_ + probe] == self.px[i + probe] {
                let l = self.match_len(i, j_);
                if l > best.0 {
                    best = (l, d);
                }
            }
            j = self.prev[j_];
            steps += 1;
        }
        best
    }
}

/// Finds copies greedily, with a one-step lazy look-ahead. (A parse priced by the symbols'
/// costs, a shortest path over positions in two rounds, was tried: the demo model's SOG came
/// out 0.18 % smaller, for a second parser and a match search at every pixel.)
fn backward_references(px: &[u32], width: usize) -> Vec<Token> {
    let n = px.len();
    let mut m = Matcher::new(px, width);
    let find = |m: &mut Matcher, i: usize| {
        m.insert_to(i);
        m.longest(i)
    };
    let mut tokens = Vec::with_capacity(n);
    let mut i = 0;
    let mut pending: Option<(usize, usize)> = None;
    while i < n {
        let (len, dist) = pending.take().unwrap_or_else(|| find(&mut m, i));
        if len >= 2 {
            // One step of laziness: a literal here and a longer copy from the next pixel.
            if len < 64 && i + 1 < n {
                let next = find(&mut m, i + 1);
                if next.0 > len + 1 {
                    tokens.push(Token { len: 0, dist: 0 });
                    i += 1;
                    pending = Some(next);
                    continue;
                }
            }
            tokens.push(Token {
                len: len as u32,
                dist: dist as u32,
            });
            i += len;
        } else {
            tokens.push(Token { len: 0, dist: 0 });
            i += 1;
        }
    }
    tokens
}

// ---------------------------------------------------------------------------------------
// Symbols and the entropy-coded image

/// One coded element of the pixel stream.
#[derive(Clone, Copy)]
enum Symbol {
    Literal(u32),
    Cache(u32),
    Copy { len: u32, dist_code: u32 },
}

/// The colour cache's hash of `argb`, whose top `bits` bits are its slot in a cache of `bits`
/// bits.
fn cache_hash(argb: u32) -> u32 {
    0x1e35_a7bd_u32.wrapping_mul(argb)
}

/// The colour cache's slot of `argb` at `bits` bits.
fn cache_key(argb: u32, bits: u32) -> usize {
    (cache_hash(argb) >> (32 - bits)) as usize
}

/// A literal's four channels in the order of its histograms and codes: green, red, blue,
/// alpha.
fn literal_channels(p: u32) -> [u32; 4] {
    [(p >> 8) & 0xff, (p >> 16) & 0xff, p & 0xff, p >> 24]
}

/// Calls `f` with the symbols of `tokens` over `px` with a colour cache of `cache_bits` (0:
/// none), keeping the cache as the decoder does (every pixel inserted).
fn for_each_symbol(
    px: &[u32],
    tokens: &[Token],
    codes: &DistanceCodes,
    cache_bits: u32,
    mut f: impl FnMut(Symbol),
) {
    let mut cache = vec![0u32; if cache_bits > 0 { 1 << cache_bits } else { 0 }];
    let mut pos = 0usize;
    for t in tokens {
        if t.len == 0 {
            let p = px[pos];
            if cache_bits > 0 {
                let k = cache_key(p, cache_bits);
                if cache[k] == p {
                    f(Symbol::Cache(k as u32));
                } else {
                    cache[k] = p;
                    f(Symbol::Literal(p));
                }
            } else {
                f(Symbol::Literal(p));
            }
            pos += 1;
        } else {
            f(Symbol::Copy {
                len: t.len,
                dist_code: codes.code(t.dist),
            });
            if cache_bits > 0 {
                for &p in &px[pos..pos + t.len as usize] {
                    cache[cache_key(p, cache_bits)] = p;
                }
            }
            pos += t.len as usize;
        }
    }
}

/// The symbol counts of one prefix-code group: green + lengths + cache, red, blue, alpha,
/// distance.
struct Histograms([Vec<u32>; 5]);

impl Histograms {
    fn new(cache_bits: u32) -> Self {
        let cache = if cache_bits > 0 { 1 << cache_bits } else { 0 };
        Histograms([
            vec![0; 256 + 24 + cache],
            vec![0; 256],
            vec![0; 256],
            vec![0; 256],
            vec![0; 40],
        ])
    }

    fn add(&mut self, s: Symbol) {
        let h = &mut self.0;
        match s {
            Symbol::Literal(p) => {
                for (hc, v) in h.iter_mut().zip(literal_channels(p)) {
                    hc[v as usize] += 1;
                }
            }
            Symbol::Cache(k) => h[0][280 + k as usize] += 1,
            Symbol::Copy { len, dist_code } => {
                h[0][256 + prefix_code(len).0 as usize] += 1;
                h[4][prefix_code(dist_code).0 as usize] += 1;
            }
        }
    }

    /// Estimated bits of the coded stream: each histogram's Shannon entropy, its extra bits
    /// aside, plus ~5 bits per used symbol for the code lengths.
    fn estimated_bits(&self) -> f64 {
        self.0
            .iter()
            .map(|h| {
                let total: f64 = h.iter().map(|&c| f64::from(c)).sum();
                h.iter()
                    .filter(|&&c| c > 0)
                    .map(|&c| f64::from(c) * (total / f64::from(c)).log2() + 5.0)
                    .sum::<f64>()
            })
            .sum()
    }
}

/// The largest colour cache the format allows (bits).
const MAX_CACHE_BITS: u32 = 11;

/// The colour-cache size (bits; 0 for none) whose symbols are estimated cheapest. One pass
/// keeps every size's cache at once: a size's histograms are those without a cache, less the
/// channels of the literals its cache would hit, plus those hits' cache symbols.
fn choose_cache_bits(px: &[u32], tokens: &[Token], codes: &DistanceCodes) -> u32 {
    let mut base = Histograms::new(0);
    for_each_symbol(px, tokens, codes, 0, |s| base.add(s));
    let sizes = MAX_CACHE_BITS as usize;
    let mut caches: Vec<Vec<u32>> = (1..=MAX_CACHE_BITS).map(|b| vec![0; 1 << b]).collect();
    let mut key_hits: Vec<Vec<u32>> = (1..=MAX_CACHE_BITS).map(|b| vec![0; 1 << b]).collect();
    // Per size, the literal channels (green, red, blue, alpha) its hits take away.
    let mut taken = vec![[[0u32; 256]; 4]; sizes];
    let mut pos = 0usize;
    for t in tokens {
        if t.len == 0 {
            let p = px[pos];
            let h = cache_hash(p);
            for b in 0..sizes {
                // Size index b has b + 1 bits.
                let k = (h >> (31 - b as u32)) as usize;
                if caches[b][k] == p {
                    key_hits[b][k] += 1;
                    for (tc, v) in taken[b].iter_mut().zip(literal_channels(p)) {
                        tc[v as usize] += 1;
                    }
                } else {
                    caches[b][k] = p;
                }
            }
            pos += 1;
        } else {
            for &p in &px[pos..pos + t.len as usize] {
                let h = cache_hash(p);
                for (b, cache) in caches.iter_mut().enumerate() {
                    cache[(h >> (31 - b as u32)) as usize] = p;
                }
            }
            pos += t.len as usize;
        }
    }
    let mut best = (base.estimated_bits(), 0);
    for b in 0..sizes {
        let mut h = Histograms::new(b as u32 + 1);
        for (c, (dst, src)) in h.0.iter_mut().zip(&base.0).enumerate() {
            dst[..src.len()].copy_from_slice(src);
            if c < 4 {
                for (d, &t) in dst.iter_mut().zip(&taken[b][c]) {
                    *d -= t;
                }
            }
        }
        h.0[0][280..].copy_from_slice(&key_hits[b]);
        let cost = h.estimated_bits();
        if cost < best.0 {
            best = (cost, b as u32 + 1);
        }
    }
    best.1
}

/// Writes `px` as an entropy-coded image: colour cache, (for the main image) a single
/// prefix-code group, the five codes and the symbols.
fn write_image_stream(w: &mut BitWriter, px: &[u32], width: usize, main: bool) {
    let codes = DistanceCodes::new(width);
    let tokens = backward_references(px, width);
    let cache_bits = choose_cache_bits(px, &tokens, &codes);
    if cache_bits > 0 {
        w.write(1, 1);
        w.write(cache_bits, 4);
    } else {
        w.write(0, 1);
    }
    if main {
        w.write(0, 1); // no entropy image: one prefix-code group
    }
    let mut hist = Histograms::new(cache_bits);
    for_each_symbol(px, &tokens, &codes, cache_bits, |s| hist.add(s));
    let [g, r, b, a, d] = hist.0.each_ref().map(|h| write_prefix_code(w, h));
    for_each_symbol(px, &tokens, &codes, cache_bits, |s| match s {
        Symbol::Literal(p) => {
            for (code, v) in [&g, &r, &b, &a].into_iter().zip(literal_channels(p)) {
                code.put(w, v);
            }
        }
        Symbol::Cache(k) => g.put(w, 280 + k),
        Symbol::Copy { len, dist_code } => {
            let (sym, extra_bits, extra) = prefix_code(len);
            g.put(w, 256 + sym);
            w.write(extra, extra_bits);
            let (sym, extra_bits, extra) = prefix_code(dist_code);
            d.put(w, sym);
            w.write(extra, extra_bits);
        }
    });
}

// ---------------------------------------------------------------------------------------
// Prefix codes

/// A prefix code ready to write symbols: per symbol the code (bit-reversed, as the reader
/// takes bits least significant first) and its length (0 for a code of one symbol, which the
/// format codes in no bits).
struct Code {
    bits: Vec<u16>,
    lengths: Vec<u8>,
}

impl Code {
    fn put(&self, w: &mut BitWriter, symbol: u32) {
        let s = symbol as usize;
        w.write(u32::from(self.bits[s]), u32::from(self.lengths[s]));
    }
}

/// Huffman code lengths for `freq`, none longer than `limit`: where the plain code is too
/// deep, rare symbols' counts are raised to a floor that doubles until it fits (the floor
/// reaches the point where all counts are equal, a balanced code of depth ⌈log₂ n⌉ ≤ limit,
/// for every alphabet here). Symbols with count 0 get length 0; a lone symbol gets 1.
fn huffman_lengths(freq: &[u32], limit: u8) -> Vec<u8> {
    let used: Vec<usize> = (0..freq.len()).filter(|&s| freq[s] > 0).collect();
    let mut lengths = vec![0u8; freq.len()];
    match used.len() {
        0 => return lengths,
        1 => {
            lengths[used[0]] = 1;
            return lengths;
        }
        _ => {}
    }
    let mut floor = 1u64;
    loop {
        // Nodes: leaves 0..used.len(), then internal nodes; ties broken by index, so the
        // code is a function of the counts.
        let mut parent = vec![usize::MAX; 2 * used.len() - 1];
        let mut heap: std::collections::BinaryHeap<std::cmp::Reverse<(u64, usize)>> = used
            .iter()
            .enumerate()
            .map(|(i, &s)| std::cmp::Reverse((u64::from(freq[s]).max(floor), i)))
            .collect();
        let mut next = used.len();
        while heap.len() > 1 {
            let std::cmp::Reverse((wa, a)) = heap.pop().expect("two nodes left");
            let std::cmp::Reverse((wb, b)) = heap.pop().expect("two nodes left");
            parent[a] = next;
            parent[b] = next;
            heap.push(std::cmp::Reverse((wa + wb, next)));
            next += 1;
        }
        // Depths: parents come after their children, so walk from the root down.
        let mut depth = vec![0u8; next];
        for node in (0..next - 1).rev() {
            depth[node] = depth[parent[node]] + 1;
        }
        if depth[..used.len()].iter().all(|&d| d <= limit) {
            for (i, &s) in used.iter().enumerate() {
                lengths[s] = depth[i];
            }
            return lengths;
        }
        floor *= 2;
    }
}

/// Canonical codes for `lengths` (shorter first, then by symbol), bit-reversed.
fn canonical_codes(lengths: &[u8]) -> Vec<u16> {
    let max = lengths.iter().copied().max().unwrap_or(0) as usize;
    let mut count = vec![0u32; max + 1];
    for &l in lengths.iter().filter(|&&l| l > 0) {
        count[l as usize] += 1;
    }
    let mut next = vec![0u32; max + 2];
    let mut code = 0u32;
    for l in 1..=max {
        code = (code + count[l - 1]) << 1;
        next[l] = code;
    }
    lengths
        .iter()
        .map(|&l| {
            if l == 0 {
                return 0;
            }
            let c = next[l as usize];
            next[l as usize] += 1;
            (c.reverse_bits() >> (32 - u32::from(l))) as u16
        })
        .collect()
}

/// The order in which the code-length code's own lengths are written.
const CODE_LENGTH_ORDER: [usize; 19] = [
    17, 18, 0, 1, 2, 3, 4, 5, 16, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
];

/// Writes the prefix code for the symbol counts `freq` and returns it.
fn write_prefix_code(w: &mut BitWriter, freq: &[u32]) -> Code {
    let used: Vec<usize> = (0..freq.len()).filter(|&s| freq[s] > 0).collect();
    let mut lengths = vec![0u8; freq.len()];
    let mut bits = vec![0u16; freq.len()];
    if used.len() <= 2 && used.iter().all(|&s| s < 256) {
        // The simple code: one or two symbols of 8 bits (the first may take 1 bit). An unused
        // alphabet is written as symbol 0 alone, which is never read.
        w.write(1, 1);
        let symbols: Vec<u32> = if used.is_empty() {
            vec![0]
        } else {
            used.iter().map(|&s| s as u32).collect()
        };
        w.write(symbols.len() as u32 - 1, 1);
        if symbols[0] < 2 {
            w.write(0, 1);
            w.write(symbols[0], 1);
        } else {
            w.write(1, 1);
            w.write(symbols[0], 8);
        }
        if symbols.len() == 2 {
            w.write(symbols[1], 8);
            lengths[symbols[1] as usize] = 1;
            bits[symbols[1] as usize] = 1;
            lengths[symbols[0] as usize] = 1;
        }
        return Code { bits, lengths };
    }
    let code_lengths = huffman_lengths(freq, 15);
    write_code_lengths(w, &code_lengths);
    if used.len() > 1 {
        bits = canonical_codes(&code_lengths);
        lengths = code_lengths;
    }
    Code { bits, lengths }
}

/// Writes a normal code's lengths: run-length coded (16: repeat the previous length 3–6
/// times, 17: 3–10 zeros, 18: 11–138 zeros) under a code-length code of its own, the zeros
/// after the last used symbol left to `max_symbol`.
fn write_code_lengths(w: &mut BitWriter, lengths: &[u8]) {
    // (symbol, extra bits, their value)
    let mut tokens: Vec<(u8, u32, u32)> = Vec::new();
    let mut i = 0;
    while i < lengths.len() {
        let v = lengths[i];
        let mut run = 1;
        while i + run < lengths.len() && lengths[i + run] == v {
            run += 1;
        }
        i += run;
        if v == 0 {
            let mut left = run;
            while left >= 11 {
                let r = left.min(138);
                tokens.push((18, 7, (r - 11) as u32));
                left -= r;
            }
            if left >= 3 {
                tokens.push((17, 3, (left - 3) as u32));
                left = 0;
            }
            for _ in 0..left {
                tokens.push((0, 0, 0));
            }
        } else {
            tokens.push((v, 0, 0));
            let mut left = run - 1;
            while left >= 3 {
                let r = left.min(6);
                tokens.push((16, 2, (r - 3) as u32));
                left -= r;
            }
            for _ in 0..left {
                tokens.push((v, 0, 0));
            }
        }
    }
    // Tokens after the last non-zero length write zeros the reader assumes anyway.
    let kept = tokens
        .iter()
        .rposition(|&(s, _, _)| s != 0 && s != 17 && s != 18)
        .map_or(0, |p| p + 1)
        .max(2);
    let mut cl_freq = [0u32; 19];
    for &(s, _, _) in &tokens[..kept] {
        cl_freq[s as usize] += 1;
    }
    let cl_lengths = huffman_lengths(&cl_freq, 7);
    let written = CODE_LENGTH_ORDER
        .iter()
        .rposition(|&s| cl_lengths[s] > 0)
        .map_or(4, |p| (p + 1).max(4));
    w.write(0, 1); // a normal code
    w.write(written as u32 - 4, 4);
    for &s in &CODE_LENGTH_ORDER[..written] {
        w.write(u32::from(cl_lengths[s]), 3);
    }
    let single = cl_lengths.iter().filter(|&&l| l > 0).count() == 1;
    let cl_codes = canonical_codes(&cl_lengths);
    if kept < tokens.len() {
        w.write(1, 1);
        let value = kept as u32 - 2;
        let nbits = (2..=16)
            .step_by(2)
            .find(|&b| value < 1 << b)
            .expect("an alphabet has fewer than 2^16 symbols");
        w.write((nbits - 2) / 2, 3);
        w.write(value, nbits);
    } else {
        w.write(0, 1);
    }
    for &(s, extra_bits, extra) in &tokens[..kept] {
        if !single {
            w.write(
                u32::from(cl_codes[s as usize]),
                u32::from(cl_lengths[s as usize]),
            );
        }
        w.write(extra, extra_bits);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::ImageDecoder;

    /// Decodes `bytes` with the `image` crate's WebP decoder, an independent implementation.
    fn decode(bytes: &[u8]) -> (usize, usize, Vec<u8>) {
        let d = image::codecs::webp::WebPDecoder::new(std::io::Cursor::new(bytes))
            .expect("a WebP file");
        let (w, h) = d.dimensions();
        let mut buf = vec![0u8; d.total_bytes() as usize];
        let rgba = d.color_type() == image::ColorType::Rgba8;
        d.read_image(&mut buf).expect("decodes");
        if !rgba {
            buf = buf
                .chunks_exact(3)
                .flat_map(|p| [p[0], p[1], p[2], 255])
                .collect();
        }
        (w as usize, h as usize, buf)
    }

    fn round_trip(rgba: &[u8], w: usize, h: usize) -> usize {
        let bytes = encode_rgba(rgba, w, h).unwrap();
        let (dw, dh, back) = decode(&bytes);
        assert_eq!((dw, dh), (w, h));
        assert!(back == rgba, "{w}×{h} image decoded to other pixels");
        bytes.len()
    }

    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> u32 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 33) as u32
        }
    }

    #[test]
    fn prefix_codes_decode_to_their_values() {
        for v in 1..5000u32 {
            let (sym, extra_bits, extra) = prefix_code(v);
            // The reader's formula.
            let back = if sym < 4 {
                sym + 1
            } else {
                let eb = (sym - 2) >> 1;
                assert_eq!(eb, extra_bits);
                ((2 + (sym & 1)) << eb) + extra + 1
            };
            assert_eq!(back, v);
        }
        assert_eq!(prefix_code(4096).0, 23);
        assert!(prefix_code(WINDOW as u32 + 120).0 < 40);
    }

    #[test]
    fn huffman_lengths_respect_the_limit_and_are_complete() {
        // Fibonacci counts make the deepest plain Huffman trees.
        let mut fib = vec![1u32, 1];
        while fib.len() < 40 {
            let k = fib.len();
            fib.push(fib[k - 1] + fib[k - 2]);
        }
        for limit in [7u8, 15] {
            let l = huffman_lengths(&fib, limit);
            assert!(l.iter().all(|&x| (1..=limit).contains(&x)));
            let kraft: f64 = l.iter().map(|&x| 0.5f64.powi(i32::from(x))).sum();
            assert!((kraft - 1.0).abs() < 1e-12, "incomplete code {kraft}");
        }
    }

    #[test]
    fn images_of_every_kind_round_trip() {
        let mut rng = Lcg(1);
        let sizes = [
            (1, 1),
            (1, 7),
            (7, 1),
            (3, 5),
            (16, 16),
            (17, 9),
            (64, 33),
            (300, 200),
        ];
        for (w, h) in sizes {
            let n = w * h;
            // Noise, a constant, few colours, a gradient, repeated rows, noise in few bits,
            // and an alpha channel that varies.
            let kinds: Vec<Vec<u8>> = vec![
                (0..n * 4).map(|_| rng.next() as u8).collect(),
                [10u8, 200, 30, 255].repeat(n),
                (0..n)
                    .flat_map(|i| [[1u8, 2, 3, 255], [250, 0, 7, 255], [9, 9, 9, 0]][i * 7 % 3])
                    .collect(),
                (0..n)
                    .flat_map(|i| {
                        let (x, y) = (i % w, i / w);
                        [x as u8, y as u8, (x + y) as u8, 255]
                    })
                    .collect(),
                (0..n)
                    .flat_map(|i| [(i % w * 37) as u8, (i % w) as u8, 5, 255])
                    .collect(),
                (0..n * 4).map(|_| (rng.next() & 3) as u8).collect(),
                (0..n).flat_map(|i| [0, 0, 0, (i * 13) as u8]).collect(),
            ];
            for rgba in kinds {
                round_trip(&rgba, w, h);
            }
        }
    }

    #[test]
    fn long_runs_far_copies_and_caches_round_trip() {
        let mut rng = Lcg(2);
        let (w, h) = (1000, 300);
        // A block of noise repeated at a distance beyond the plane codes, runs longer than
        // the longest copy, a palette of 600 colours drawn at random (the cache's case).
        let block: Vec<u8> = (0..5000 * 4).map(|_| rng.next() as u8).collect();
        let mut rgba = Vec::with_capacity(w * h * 4);
        while rgba.len() < w * h * 4 {
            rgba.extend_from_slice(&block);
            rgba.extend(std::iter::repeat_n(7u8, 4 * 6000));
            for _ in 0..3000 {
                let c = rng.next() % 600;
                rgba.extend_from_slice(&[c as u8, (c >> 8) as u8, 1, 255]);
            }
        }
        rgba.truncate(w * h * 4);
        let size = round_trip(&rgba, w, h);
        // The copies pay: far below the ~16 B per pixel of the noise blocks written out.
        assert!(size < w * h, "{size} bytes");
    }

    #[test]
    fn beats_the_image_crates_encoder_on_structured_data_and_is_deterministic() {
        let mut rng = Lcg(3);
        let (w, h) = (256, 256);
        // A smooth field with a little noise, what positions in Morton order look like.
        let rgba: Vec<u8> = (0..w * h)
            .flat_map(|i| {
                let (x, y) = ((i % w) as f32, (i / w) as f32);
                let v = (x * 0.05).sin() * 60.0 + (y * 0.03).cos() * 60.0 + 128.0;
                let n = (rng.next() % 3) as f32;
                [(v + n) as u8, (v * 0.5 + n) as u8, (255.0 - v) as u8, 255]
            })
            .collect();
        let ours = encode_rgba(&rgba, w, h).unwrap();
        assert_eq!(ours, encode_rgba(&rgba, w, h).unwrap());
        let mut theirs = Vec::new();
        image::codecs::webp::WebPEncoder::new_lossless(&mut theirs)
            .encode(&rgba, w as u32, h as u32, image::ExtendedColorType::Rgba8)
            .unwrap();
        assert!(
            ours.len() < theirs.len(),
            "{} vs {}",
            ours.len(),
            theirs.len()
        );
        round_trip(&rgba, w, h);
    }

    #[test]
    fn wrong_sizes_are_refused() {
        assert!(matches!(
            encode_rgba(&[], 0, 1),
            Err(WebpError::Dimensions { .. })
        ));
        assert!(matches!(
            encode_rgba(&[0; 4], 16_385, 1),
            Err(WebpError::Dimensions { .. })
        ));
        assert!(matches!(
            encode_rgba(&[0; 12], 2, 2),
            Err(WebpError::Length { .. })
        ));
    }
}
