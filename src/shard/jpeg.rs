//! JPEG view payloads (`gs-pack convert --codec jpeg`): reading a JPEG's frame, keeping only
//! what decoding needs, bounding what decoding allocates, and decoding into a caller's buffer.
//!
//! A view stored as JPEG holds either its source file's compressed data unchanged (the view's
//! packed pixels are exactly that file's decode: no undistortion, resize or orientation
//! applied) or the packed pixels encoded at a chosen quality ([`encode_rgb`]: baseline,
//! 4:4:4, one interleaved scan). Either way [`decode_rgb_into`] is the one decoder: the
//! packer keeps a source file only after decoding the kept bytes with it and comparing every
//! byte with the pixels it would otherwise have packed, so a kept JPEG reads back as exactly
//! those pixels (the same decoder, in strict mode, as the importer's).
//!
//! # Invariants
//! - [`strip`] keeps the segments decoding reads (frame, tables, restart interval, scans, and
//!   the JFIF and Adobe segments, which decide the colour transform) and drops metadata (EXIF
//!   with its thumbnail, XMP, ICC, comments) and anything after the end-of-image marker (the
//!   video a motion photo appends), so a stored JPEG carries no bytes the trainer cannot use.
//! - [`decode_scratch`] bounds the heap the decoder allocates besides the output, from the
//!   frame alone: the pack records it per view and the loader's memory plan reserves it for
//!   each worker; [`decode_rgb_into`] refuses a payload whose frame needs more than the bound
//!   the manifest records, so a damaged manifest cannot make a worker exceed its plan.

use zune_jpeg::zune_core::bytestream::ZCursor;
use zune_jpeg::zune_core::colorspace::ColorSpace;
use zune_jpeg::zune_core::options::DecoderOptions;

/// What decoding a JPEG depends on, read from its markers by [`strip`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    pub width: u32,
    pub height: u32,
    /// Horizontal and vertical sampling factors of each component (1 to 4 components).
    pub sampling: Vec<(u8, u8)>,
    /// Progressive (SOF2) rather than sequential (SOF0/SOF1).
    pub progressive: bool,
    /// Scans (SOS segments).
    pub scans: u32,
}

impl Frame {
    /// Whether the decoder can turn each row of blocks into pixels as it goes (one sequential
    /// scan holding every component), rather than holding the whole image's coefficients.
    pub fn streams(&self) -> bool {
        !self.progressive && self.scans == 1
    }
}

/// Heap the decoder may hold at once for a fixed part (the decoder itself, its Huffman and
/// quantisation tables, the colour converter) regardless of the image size. Measured peaks for
/// a 16×16 image: 2.2 KiB baseline, 3.7 KiB progressive, 7.7 KiB at most over every sampling
/// layout (the test `decode_scratch_bounds_the_decoders_heap`).
const FIXED_SCRATCH: u64 = 64 << 10;

/// Bytes the decoder allocates besides the output while decoding a JPEG of `frame` (an upper
/// bound; the test `decode_scratch_bounds_the_decoders_heap` measures it for every sampling
/// layout, sequential and progressive).
///
/// Why: a sequential single-scan JPEG is decoded one row of blocks (MCU row) at a time, into
/// per-component rows of 16-bit coefficients and upsampling rows; any other JPEG (progressive,
/// or sequential with a scan per component) first collects the whole image's coefficients,
/// 64 × 16 bits per block of every component, padded to whole MCUs.
pub fn decode_scratch(frame: &Frame) -> u64 {
    let hmax = frame.sampling.iter().map(|s| s.0).max().unwrap_or(1).max(1) as u64;
    let vmax = frame.sampling.iter().map(|s| s.1).max().unwrap_or(1).max(1) as u64;
    let mcus_x = (frame.width as u64).div_ceil(8 * hmax);
    let mcus_y = (frame.height as u64).div_ceil(8 * vmax);
    // Blocks of one MCU row and of the whole image, over all components.
    let row_blocks: u64 = frame
        .sampling
        .iter()
        .map(|&(h, v)| mcus_x * h as u64 * v as u64)
        .sum();
    let coefficients = if frame.streams() {
        0
    } else {
        row_blocks * mcus_y * 64 * 2
    };
    // Row buffers (coefficients, upsampled rows, the previous row kept for upsampling), each
    // at most a few MCU rows of 16-bit samples at full resolution per component: 8 MCU rows'
    // worth covers them with room (the test measures the ratio).
    let padded_width = mcus_x * 8 * hmax;
    let rows = frame.sampling.len() as u64 * padded_width * 8 * vmax * 2 * 8;
    FIXED_SCRATCH + coefficients + rows
}

/// The largest [`decode_scratch`] of any JPEG of `width × height` this module reads (four
/// components, every one sampled 4 × 4 so the MCU is largest, progressive): a manifest that
/// records more is damaged.
pub fn max_decode_scratch(width: u32, height: u32) -> u64 {
    decode_scratch(&Frame {
        width,
        height,
        sampling: vec![(4, 4); 4],
        progressive: true,
        scans: 2,
    })
}

/// Why a JPEG cannot be read as a view payload.
fn bad(msg: impl Into<String>) -> String {
    msg.into()
}

/// Reads `jpeg`'s markers and returns its [`Frame`] and a copy holding only what decoding
/// needs (see the module doc). Refuses what the view decoder does not read: arithmetic
/// coding, lossless and hierarchical frames, more than one frame, and a file without its
/// end-of-image marker.
pub fn strip(jpeg: &[u8]) -> Result<(Frame, Vec<u8>), String> {
    let mut out = Vec::with_capacity(jpeg.len());
    let frame = walk(jpeg, Some(&mut out))?;
    Ok((frame, out))
}

/// The [`Frame`] of `jpeg`, checked as [`strip`] checks it, without copying anything.
pub fn frame(jpeg: &[u8]) -> Result<Frame, String> {
    walk(jpeg, None)
}

/// Walks `jpeg`'s markers (see [`strip`]), appending what decoding needs to `out` if given.
fn walk(jpeg: &[u8], mut out: Option<&mut Vec<u8>>) -> Result<Frame, String> {
    if !jpeg.starts_with(&[0xFF, 0xD8]) {
        return Err(bad("not a JPEG (no start-of-image marker)"));
    }
    let mut emit = |bytes: &[u8]| {
        if let Some(out) = out.as_deref_mut() {
            out.extend_from_slice(bytes);
        }
    };
    emit(&[0xFF, 0xD8]);
    let mut frame: Option<Frame> = None;
    let mut scans = 0u32;
    let mut i = 2;
    loop {
        // Fill bytes (any number of 0xFF) may precede a marker.
        while jpeg.get(i) == Some(&0xFF) && jpeg.get(i + 1) == Some(&0xFF) {
            i += 1;
        }
        if jpeg.get(i) != Some(&0xFF) {
            return Err(bad(format!("expected a marker at byte {i}")));
        }
        let Some(&marker) = jpeg.get(i + 1) else {
            return Err(bad("the file ends before its end-of-image marker"));
        };
        if marker == 0xD9 {
            emit(&[0xFF, 0xD9]);
            break;
        }
        let len = jpeg
            .get(i + 2..i + 4)
            .map(|b| u16::from_be_bytes([b[0], b[1]]) as usize)
            .filter(|&len| len >= 2 && i + 2 + len <= jpeg.len())
            .ok_or_else(|| {
                bad(format!(
                    "marker 0x{marker:02X} at byte {i} has a bad length"
                ))
            })?;
        let segment = &jpeg[i..i + 2 + len];
        let body = &segment[4..];
        let keep = match marker {
            // Sequential (baseline or extended) and progressive Huffman frames.
            0xC0..=0xC2 => {
                if frame.is_some() {
                    return Err(bad("more than one frame"));
                }
                let n = *body.get(5).ok_or_else(|| bad("frame header is short"))? as usize;
                if !(1..=4).contains(&n) || body.len() < 6 + 3 * n {
                    return Err(bad(format!("frame header with {n} components")));
                }
                if body[0] != 8 {
                    return Err(bad(format!("{}-bit samples", body[0])));
                }
                let sampling = (0..n)
                    .map(|c| {
                        let s = body[6 + 3 * c + 1];
                        (s >> 4, s & 15)
                    })
                    .collect::<Vec<_>>();
                if sampling
                    .iter()
                    .any(|&(h, v)| !(1..=4).contains(&h) || !(1..=4).contains(&v))
                {
                    return Err(bad("a sampling factor outside 1 to 4"));
                }
                frame = Some(Frame {
                    height: u16::from_be_bytes([body[1], body[2]]) as u32,
                    width: u16::from_be_bytes([body[3], body[4]]) as u32,
                    sampling,
                    progressive: marker == 0xC2,
                    scans: 0,
                });
                true
            }
            0xC3 | 0xC5..=0xC7 | 0xC9..=0xCB | 0xCD..=0xCF => {
                return Err(bad(format!(
                    "frame type 0x{marker:02X} (lossless, hierarchical or arithmetic-coded)"
                )))
            }
            // Huffman tables, quantisation tables, restart interval, number of lines.
            0xC4 | 0xDB | 0xDD | 0xDC => true,
            // JFIF (APP0) and Adobe (APP14) decide how three components map to RGB; an APP0
            // that is not JFIF's (a JFXX thumbnail) is metadata.
            0xE0 => body.starts_with(b"JFIF\0"),
            0xEE => true,
            // Other application segments (EXIF, XMP, ICC, …) and comments: metadata.
            0xE1..=0xED | 0xEF | 0xFE => false,
            0xDA => {
                if frame.is_none() {
                    return Err(bad("a scan before the frame header"));
                }
                scans += 1;
                true
            }
            // A restart marker outside scan data, a second SOI, a reserved marker: damage.
            _ => return Err(bad(format!("unexpected marker 0x{marker:02X} at byte {i}"))),
        };
        if keep {
            emit(segment);
        }
        i += 2 + len;
        if marker == 0xDA {
            // Entropy-coded data runs to the next marker that is neither a stuffed 0xFF
            // (FF 00) nor a restart marker (FF D0..D7).
            let start = i;
            loop {
                match jpeg.get(i..i + 2) {
                    None => return Err(bad("the file ends inside scan data")),
                    Some([0xFF, m]) if *m != 0 && !(0xD0..=0xD7).contains(m) && *m != 0xFF => break,
                    _ => i += 1,
                }
            }
            emit(&jpeg[start..i]);
        }
    }
    let mut frame = frame.ok_or_else(|| bad("no frame header"))?;
    if scans == 0 {
        return Err(bad("no scan"));
    }
    frame.scans = scans;
    if frame.width == 0 || frame.height == 0 {
        return Err(bad(format!(
            "the frame is {}x{} (a height of 0 needs a DNL marker, which views do not use)",
            frame.width, frame.height
        )));
    }
    Ok(frame)
}

/// Decoder options shared by the packer's check and the reader: strict, so damaged scan data
/// is an error rather than grey blocks; and portable code only (no AVX2/NEON paths), so a
/// pack reads back as the same pixels on every CPU, not only on one with the packer's
/// instruction set. Measured on this machine: the scalar and AVX2 paths decode the fox photos
/// and the synthetic views identically, in the same time (within 1 ms of ~13 ms a photo).
fn options() -> DecoderOptions {
    DecoderOptions::default()
        .set_strict_mode(true)
        .set_use_unsafe(false)
        .set_max_width(usize::MAX)
        .set_max_height(usize::MAX)
}

/// Decodes `jpeg` (one or three components) into `out`, RGB8 of `width × height`: a
/// greyscale JPEG's value is repeated in the three channels. Refuses a JPEG of another size,
/// with other than one or three components, or whose [`decode_scratch`] exceeds
/// `max_scratch` (the bound the pack recorded for it).
pub fn decode_rgb_into(
    jpeg: &[u8],
    width: u32,
    height: u32,
    max_scratch: u64,
    out: &mut [u8],
) -> Result<(), String> {
    let frame = frame(jpeg)?;
    if (frame.width, frame.height) != (width, height) {
        return Err(format!(
            "the JPEG is {}x{}, the view {width}x{height}",
            frame.width, frame.height
        ));
    }
    let need = decode_scratch(&frame);
    if need > max_scratch {
        return Err(format!(
            "decoding the JPEG needs {need} bytes of scratch, more than the {max_scratch} the \
             pack's manifest plans for it"
        ));
    }
    let n = width as usize * height as usize;
    if out.len() != 3 * n {
        return Err(format!(
            "{} output bytes for {width}x{height} RGB8",
            out.len()
        ));
    }
    match frame.sampling.len() {
        1 => {
            // Decode the grey plane into the first third, then spread it backwards so no
            // sample is overwritten before it is read.
            let mut d = zune_jpeg::JpegDecoder::new_with_options(
                ZCursor::new(jpeg),
                options().jpeg_set_out_colorspace(ColorSpace::Luma),
            );
            d.decode_into(&mut out[..n]).map_err(|e| e.to_string())?;
            for k in (0..n).rev() {
                let g = out[k];
                out[3 * k..3 * k + 3].fill(g);
            }
        }
        3 => {
            let mut d = zune_jpeg::JpegDecoder::new_with_options(
                ZCursor::new(jpeg),
                options().jpeg_set_out_colorspace(ColorSpace::RGB),
            );
            d.decode_into(out).map_err(|e| e.to_string())?;
        }
        c => return Err(format!("a JPEG of {c} components cannot be an RGB view")),
    }
    Ok(())
}

/// Encodes `width × height` RGB8 `pixels` as a baseline JPEG at `quality` (1 to 100) with
/// full-resolution chroma (4:4:4: training compares every pixel's colour) and the standard
/// Huffman tables, as one interleaved scan. Baseline, so decoding streams row by row
/// ([`decode_scratch`] stays small).
pub fn encode_rgb(pixels: &[u8], width: u32, height: u32, quality: u8) -> Result<Vec<u8>, String> {
    let (w, h) = (
        u16::try_from(width).map_err(|_| format!("{width} px is wider than JPEG allows"))?,
        u16::try_from(height).map_err(|_| format!("{height} px is taller than JPEG allows"))?,
    );
    let mut out = Vec::new();
    let mut enc = jpeg_encoder::Encoder::new(&mut out, quality);
    enc.set_sampling_factor(jpeg_encoder::SamplingFactor::F_1_1);
    // Not optimised Huffman tables: the encoder then writes one scan per component, which the
    // decoder can only turn into pixels after holding the whole image's coefficients.
    enc.set_optimized_huffman_tables(false);
    enc.encode(pixels, w, h, jpeg_encoder::ColorType::Rgb)
        .map_err(|e| e.to_string())?;
    Ok(out)
}
