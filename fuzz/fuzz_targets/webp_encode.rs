//! Fuzz target for the lossless WebP encoder (`export::webp`): the input's first byte picks
//! the image's width (1 to 256), the rest are its RGBA pixels (the last partial row dropped).
//! The encoder must succeed and the `image` crate's decoder, an independent implementation of
//! the format, must give back exactly those pixels: any wrong bit in a transform, a copy, the
//! colour cache or a prefix code shows as a decoding error or other pixels.
//!
//! Run: `RUSTC_BOOTSTRAP=1 cargo fuzz run webp_encode corpus/webp_encode` from `fuzz/` (see
//! fuzz/README.md).
#![no_main]

use image::ImageDecoder;
use libfuzzer_sys::fuzz_target;
use ramsplat::export::webp;

fuzz_target!(|data: &[u8]| {
    let Some((&w, pixels)) = data.split_first() else { return };
    let width = usize::from(w) + 1;
    let height = pixels.len() / 4 / width;
    if height == 0 {
        return;
    }
    let rgba = &pixels[..width * height * 4];
    let file = webp::encode_rgba(rgba, width, height).expect("a valid image encodes");
    let decoder = image::codecs::webp::WebPDecoder::new(std::io::Cursor::new(&file))
        .expect("the encoder's output is a WebP file");
    assert_eq!(decoder.dimensions(), (width as u32, height as u32));
    let mut back = vec![0u8; decoder.total_bytes() as usize];
    let rgb = decoder.color_type() == image::ColorType::Rgb8;
    decoder.read_image(&mut back).expect("the encoder's output decodes");
    if rgb {
        // A file whose alpha is all 255 may decode as RGB.
        back = back.chunks_exact(3).flat_map(|p| [p[0], p[1], p[2], 255]).collect();
    }
    assert!(back == rgba, "{width}×{height}: decoded pixels differ");
});
