//! Alpha compositing of RGBA8 training targets.
//!
//! Owns one rule: a view packed with alpha (straight, not premultiplied; see
//! [`crate::shard::VIEW_FLAG_ALPHA`]) becomes an RGB8 target by compositing it over the
//! background the render of the same step uses, `c = a·rgb + (1 − a)·bg`, rounded to the
//! nearest 8-bit value. The trainer composites on the host before the engine sees the frame,
//! so the host and device engines train on byte-identical targets (the device engine needs no
//! kernel of its own; the rounding costs at most half a quantisation step, 0.5/255).
//! Fully transparent pixels therefore teach the background colour, i.e. "empty".
//!
//! Invariant: an opaque pixel (a = 255) is copied unchanged, whatever the background.

use crate::shard::PixelLayout;

/// Composites `rgba` (RGBA8, straight alpha) over `background` (linear [0, 1] per channel, the
/// render's background) into `out` as RGB8 (`out` is resized to `rgba.len() / 4 × 3`).
pub fn composite_rgba8(rgba: &[u8], background: [f32; 3], out: &mut Vec<u8>) {
    debug_assert_eq!(rgba.len() % 4, 0);
    out.resize(rgba.len() / 4 * 3, 0);
    let bg = background.map(|b| b.clamp(0.0, 1.0) * 255.0);
    for (o, p) in out.chunks_exact_mut(3).zip(rgba.chunks_exact(4)) {
        let a = p[3] as f32 * (1.0 / 255.0);
        for c in 0..3 {
            let v = a * p[c] as f32 + (1.0 - a) * bg[c];
            o[c] = v.round().clamp(0.0, 255.0) as u8;
        }
    }
}

/// The ground truth as scored: a view's decoded bytes (`layout`) are replaced in place by RGB8,
/// an RGBA view composited over white (the NeRF-synthetic rule), a masked view's excluded
/// pixels black (see [`crate::eval`]); an inverse-depth plane is dropped.
pub fn evaluation_rgb8(bytes: &mut Vec<u8>, layout: PixelLayout) {
    let npix = bytes.len()
        / (layout.channels() + usize::from(layout.mask) + 2 * usize::from(layout.depth));
    if layout.depth {
        bytes.truncate(bytes.len() - 2 * npix);
    }
    let mask = layout
        .mask
        .then(|| bytes.split_off(npix * layout.channels()));
    if layout.alpha {
        let mut rgb = Vec::new();
        composite_rgba8(bytes, [1.0; 3], &mut rgb);
        *bytes = rgb;
    }
    if let Some(mask) = mask {
        crate::eval::mask_rgb8(bytes, &mask);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opaque_pixels_are_unchanged_and_transparent_ones_take_the_background() {
        let rgba = [10, 20, 30, 255, 200, 100, 50, 0, 255, 0, 0, 128];
        let mut out = Vec::new();
        composite_rgba8(&rgba, [1.0, 0.4, 0.0], &mut out);
        // Opaque: unchanged. Transparent: the background (0.4·255 = 102).
        // Half: 128/255·255 + (1 − 128/255)·255 = 255 for red; (1 − 128/255)·102 = 50.8 → 51.
        assert_eq!(out, vec![10, 20, 30, 255, 102, 0, 255, 51, 0]);
        composite_rgba8(&rgba, [0.0; 3], &mut out);
        assert_eq!(out, vec![10, 20, 30, 0, 0, 0, 128, 0, 0]);
    }
}
