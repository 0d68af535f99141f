//! `gs-pack convert --codec jpeg`: kept source JPEGs read back as exactly the pixels zstd
//! packs, encoded views stay close to theirs, masks and depth planes stay lossless, the
//! decoder's heap stays within the bound the memory plan reserves, and damaged JPEG records
//! and manifests are refused with an error that names the view. Also the decode scratch of
//! a view read at a run's resolution, in any codec: the allocator here counts the reading
//! thread alone, so the figure is exact whatever other tests do meanwhile.

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
        enc.encode(
            &luma,
            width as u16,
            height as u16,
            jpeg_encoder::ColorType::Luma,
        )
        .unwrap();
    } else {
        enc.encode(
            pixels,
            width as u16,
            height as u16,
            jpeg_encoder::ColorType::Rgb,
        )
        .unwrap();
    }
    out
}

#[test]
fn decode_scratch_bounds_the_decoders_heap() {
    use jpeg_encoder::SamplingFactor as S;
    for &(w, h) in &[(16u32, 16u32), (640, 480), (1601, 1067)] {
        let pixels = picture(w, h, 1);
        for sampling in [
            S::F_1_1,
            S::F_2_1,
            S::F_1_2,
            S::F_2_2,
            S::F_4_1,
            S::F_1_4,
            S::F_4_2,
            S::F_2_4,
            S::R_4_4_0,
            S::R_4_2_0,
            S::R_4_1_1,
            S::R_4_2_1,
        ] {
            for progressive in [false, true] {
                for grey in [false, true] {
                    let data = encode(&pixels, w, h, sampling, progressive, grey);
                    let frame = jpeg::frame(&data).unwrap();
                    let bound = jpeg::decode_scratch(&frame);
                    let mut out = vec![0u8; (w * h * 3) as usize];
                    let (r, heap) =
                        heap::measured(|| jpeg::decode_rgb_into(&data, w, h, bound, &mut out));
                    r.unwrap().unwrap();
                    let what = format!(
                        "{w}x{h} {sampling:?} progressive {progressive} grey {grey}: {} scans, \
                         {} bytes allocated, {bound} planned",
                        frame.scans, heap.peak
                    );
                    assert!(heap.peak as u64 <= bound, "{what}");
                    // Holding every coefficient dominates, and the bound follows it closely:
                    // measured bound / peak 1.06 to 1.93 at 640x480 and above (streamed
                    // decodes need a few hundred KiB; their bound is 3.8 to 14 times that).
                    if !frame.streams() && w >= 640 {
                        assert!(bound as f64 <= 2.5 * heap.peak as f64, "{what}");
                    }
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
    if out.exists() {
        return out;
    }
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

fn pack(
    input: &Path,
    output: &Path,
    codec: Codec,
    resize: Resize,
) -> ramsplat::pack::ConvertReport {
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
        assert!(heap.largest <= j.decode_scratch(i), "view {i}: {heap:?}");
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
            // Encoded as one interleaved baseline scan, 4:4:4: decoded row by row, so the
            // decoder's scratch is a few rows, not the whole image's coefficients.
            let streaming = jpeg::Frame {
                width: v.width(),
                height: v.height(),
                sampling: vec![(1, 1); 3],
                progressive: false,
                scans: 1,
            };
            assert_eq!(
                v.jpeg.unwrap().decode_scratch,
                jpeg::decode_scratch(&streaming)
            );
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

/// Packs the JPEG dataset as JPEG into `dir/name` and returns the manifest's path.
fn jpeg_pack(dir: &Path, name: &str) -> std::path::PathBuf {
    let ds = dataset(dir, ImageFormat::Jpg);
    let out = dir.join(name);
    pack(&ds, &out, Codec::Jpeg, Resize::None);
    out
}

/// Rewrites `pack`'s manifest with `edit`.
fn edit_manifest(pack: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = pack.join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    edit(&mut m);
    std::fs::write(&path, serde_json::to_vec_pretty(&m).unwrap()).unwrap();
}

fn open_error(pack: &Path) -> String {
    match Pack::open(pack) {
        Ok(_) => panic!("{} opened", pack.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn damaged_jpeg_manifests_are_refused_naming_the_view() {
    let dir = tempfile::tempdir().unwrap();
    type Edit = dyn Fn(&mut serde_json::Value);
    let cases: [(&str, &Edit, &str); 4] = [
        (
            "no-entry",
            &|m| {
                m["views"][2].as_object_mut().unwrap().remove("jpeg");
            },
            "view 2 (\"00002.jpg\") is stored as JPEG but has no \"jpeg\" entry",
        ),
        (
            "version-1",
            &|m| m["version"] = 1.into(),
            "view 0 (\"00000.jpg\") is stored as JPEG, which format version 1 packs do not hold",
        ),
        (
            "huge-scratch",
            &|m| m["views"][2]["jpeg"]["decode_scratch"] = (1u64 << 40).into(),
            "view 2 (\"00002.jpg\"): a JPEG decode scratch of 1099511627776 bytes is more than any 96x64 JPEG needs",
        ),
        (
            "entry-on-zstd",
            &|m| m["views"][2]["codec"] = "zstd".into(),
            "view 2 (\"00002.jpg\") has a \"jpeg\" entry but is stored as Zstd",
        ),
    ];
    for (name, edit, want) in cases {
        let pack = jpeg_pack(dir.path(), name);
        edit_manifest(&pack, edit);
        let e = open_error(&pack);
        assert!(e.contains(want), "{name}: {e}");
        assert!(e.contains("manifest.json"), "{name}: {e}");
    }
}

#[test]
fn a_jpeg_needing_more_scratch_than_planned_is_refused_before_decoding() {
    let dir = tempfile::tempdir().unwrap();
    let pack = jpeg_pack(dir.path(), "low-scratch");
    edit_manifest(&pack, |m| {
        m["views"][1]["jpeg"]["decode_scratch"] = 1000.into()
    });
    let p = Pack::open(&pack).unwrap();
    let mut out = vec![0u8; p.manifest().views[1].decoded_len()];
    let e = p.read_view_into(1, &mut out).unwrap_err().to_string();
    assert!(
        e.contains("more than the 1000 the pack's manifest plans"),
        "{e}"
    );
    assert!(e.contains(&p.manifest().views[1].name), "{e}");
    // The other views read as before.
    let mut out = vec![0u8; p.manifest().views[0].decoded_len()];
    p.read_view_into(0, &mut out).unwrap();
}

#[test]
fn damaged_jpeg_payloads_are_decode_errors_naming_the_view() {
    use ramsplat::dataset::Split;
    use ramsplat::shard::writer::{EncodedView, PackWriter, WriterOptions};
    use ramsplat::shard::{Checksum, JpegEntry, PixelLayout, SourceInfo};
    let dir = tempfile::tempdir().unwrap();
    let good = Pack::open(&jpeg_pack(dir.path(), "good")).unwrap();
    let camera = good.manifest().views[0].camera;
    let source = {
        // The first view's stored JPEG, taken from a pack without depth planes.
        let ds = dataset(dir.path(), ImageFormat::Jpg);
        let name = &good.manifest().views[0].name;
        std::fs::read(ds.join("images").join(name)).unwrap()
    };
    let (_, kept) = jpeg::strip(&source).unwrap();
    let truncated = kept[..kept.len() / 2].to_vec();
    let mut wrong_size = kept.clone();
    // The frame header's width (SOF0 is the only frame marker; its width follows the height).
    let sof = wrong_size
        .windows(2)
        .position(|w| w == [0xFF, 0xC0])
        .unwrap();
    wrong_size[sof + 7..sof + 9].copy_from_slice(&80u16.to_be_bytes());
    let cases: [(&str, Vec<u8>, &str); 3] = [
        (
            "garbage",
            b"\xFF\xD8 not a JPEG".to_vec(),
            "expected a marker",
        ),
        ("truncated", truncated, "ends inside scan data"),
        (
            "wrong-size",
            wrong_size,
            "the JPEG is 80x64, the view 96x64",
        ),
    ];
    for (name, payload, want) in cases {
        let out = dir.path().join(format!("bad-{name}"));
        let opts = WriterOptions {
            codec: Codec::Jpeg,
            ..Default::default()
        };
        let mut w = PackWriter::create(&out, &opts).unwrap();
        w.add_encoded_view(EncodedView {
            name: format!("{name}.jpg"),
            camera,
            split: Split::Train,
            codec: Codec::Jpeg,
            checksum: Checksum(xxhash_rust::xxh3::xxh3_64(&payload)),
            payload,
            decoded_len: 96 * 64 * 3,
            layout: PixelLayout::RGB,
            depth: None,
            depth_pixels: None,
            jpeg: Some(JpegEntry {
                quality: None,
                decode_scratch: jpeg::max_decode_scratch(96, 64),
            }),
        })
        .unwrap();
        w.finish(SourceInfo::generated("a damaged JPEG payload"))
            .unwrap();
        let p = Pack::open(&out).unwrap();
        let mut buf = vec![0u8; 96 * 64 * 3];
        let e = p.read_view_into(0, &mut buf).unwrap_err().to_string();
        assert!(
            e.contains(want) && e.contains(&format!("{name}.jpg")),
            "{name}: {e}"
        );
    }
}

#[test]
fn strip_drops_metadata_and_trailing_data_and_keeps_what_decodes() {
    let pixels = picture(40, 24, 3);
    let plain = encode(
        &pixels,
        40,
        24,
        jpeg_encoder::SamplingFactor::F_2_2,
        false,
        false,
    );
    // An EXIF-sized APP1 and a comment after SOI, and a motion photo's video after EOI.
    let mut dressed = plain[..2].to_vec();
    let app1 = [
        &[0xFF, 0xE1, 0x03, 0xEA][..],
        &b"Exif\0\0"[..],
        &[7u8; 994][..],
    ]
    .concat();
    dressed.extend_from_slice(&app1);
    dressed.extend_from_slice(&[0xFF, 0xFE, 0x00, 0x07, b'h', b'e', b'l', b'l', b'o']);
    dressed.extend_from_slice(&plain[2..]);
    dressed.extend_from_slice(&[0x42; 5000]);
    let (frame, kept) = jpeg::strip(&dressed).unwrap();
    assert_eq!(kept, plain);
    assert_eq!((frame.width, frame.height, frame.scans), (40, 24, 1));
    assert_eq!(frame.sampling, vec![(2, 2), (1, 1), (1, 1)]);
    assert!(frame.streams());
    assert_eq!(jpeg::frame(&dressed).unwrap(), frame);
}

#[test]
fn views_with_transparency_are_stored_as_png_under_the_jpeg_codec() {
    use ramsplat::dataset::Split;
    use ramsplat::shard::writer::{encode_view_as, WriterOptions};
    use ramsplat::shard::PixelLayout;
    let dir = tempfile::tempdir().unwrap();
    let ds = dataset(dir.path(), ImageFormat::Jpg);
    let camera = {
        let out = dir.path().join("p");
        pack(&ds, &out, Codec::Jpeg, Resize::None);
        Pack::open(&out).unwrap().manifest().views[0].camera
    };
    let layout = PixelLayout {
        alpha: true,
        ..PixelLayout::RGB
    };
    let rgba: Vec<u8> = (0..96 * 64 * 4).map(|i| (i % 251) as u8).collect();
    let options = WriterOptions {
        codec: Codec::Jpeg,
        ..Default::default()
    };
    let v = encode_view_as(
        "a.png",
        &camera,
        Split::Train,
        &rgba,
        layout,
        None,
        &options,
        None,
    )
    .unwrap();
    assert_eq!((v.codec, v.jpeg), (Codec::Png, None));
}

/// Rewrites view 1's image of the JPEG dataset in `dir` as the same pixels stored upside down
/// under EXIF orientation 3 (180°), and returns the dataset.
fn dataset_with_a_rotated_view(dir: &Path) -> std::path::PathBuf {
    let ds = dataset(dir, ImageFormat::Jpg);
    let path = ds.join("images").join("00001.jpg");
    let upright = image::open(&path).unwrap().to_rgb8();
    let exif_rotate_180: [u8; 26] = [
        0x49, 0x49, 0x2A, 0x00, 0x08, 0x00, 0x00, 0x00, // TIFF header, IFD at 8
        0x01, 0x00, // one entry
        0x12, 0x01, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00,
        0x00, // orientation 3
        0x00, 0x00, 0x00, 0x00, // no next IFD
    ];
    let mut rotated = Vec::new();
    let mut enc = jpeg_encoder::Encoder::new(&mut rotated, 95);
    enc.add_exif_metadata(&exif_rotate_180).unwrap();
    enc.encode(upright.as_raw(), 96, 64, jpeg_encoder::ColorType::Rgb)
        .unwrap();
    std::fs::write(&path, rotated).unwrap();
    ds
}

#[test]
fn a_rotated_source_jpeg_is_encoded_not_kept() {
    // Orientation 3 (180°) keeps the size, so only the byte comparison can tell that the packed
    // pixels are not the file's decode: keeping the file would store the photo upside down.
    let dir = tempfile::tempdir().unwrap();
    let ds = dataset_with_a_rotated_view(dir.path());
    pack(&ds, &dir.path().join("zstd"), Codec::Zstd, Resize::None);
    let report = pack(&ds, &dir.path().join("jpeg"), Codec::Jpeg, Resize::None)
        .jpeg
        .unwrap();
    assert_eq!((report.kept, report.encoded), (5, 1));
    let (z, j) = (
        Pack::open(&dir.path().join("zstd")).unwrap(),
        Pack::open(&dir.path().join("jpeg")).unwrap(),
    );
    let v = &j.manifest().views[1];
    assert_eq!(
        (v.name.as_str(), v.jpeg.unwrap().quality),
        ("00001.jpg", Some(95))
    );
    let (a, b) = (&views(&z)[1], &views(&j)[1]);
    let colour = v.layout().pixel_bytes(96, 64);
    assert!(psnr(&a[..colour], &b[..colour]) > 37.0);
}

#[test]
fn the_cli_reports_kept_and_encoded_views_and_refuses_a_stray_quality() {
    let dir = tempfile::tempdir().unwrap();
    let ds = dataset(dir.path(), ImageFormat::Png);
    let gs_pack = env!("CARGO_BIN_EXE_gs-pack");
    let run = |args: &[&str]| {
        let out = std::process::Command::new(gs_pack)
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let ds = ds.to_str().unwrap();
    let out = dir.path().join("q80");
    let out = out.to_str().unwrap();

    let (code, err, _) = run(&["convert", ds, "-o", out, "--jpeg-quality", "80"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--jpeg-quality applies to --codec jpeg only (the codec is zstd)"),
        "{err}"
    );
    assert!(!Path::new(out).exists());
    let (code, err, _) = run(&["convert", ds, "-o", out, "--lossless"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--lossless applies to --codec jpeg only"),
        "{err}"
    );
    let (code, err, _) = run(&[
        "convert",
        ds,
        "-o",
        out,
        "--codec",
        "jpeg",
        "--lossless",
        "--jpeg-quality",
        "80",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("cannot be used with"), "{err}");
    assert!(!Path::new(out).exists());

    let (code, err, _) = run(&[
        "convert",
        ds,
        "-o",
        out,
        "--codec",
        "jpeg",
        "--jpeg-quality",
        "80",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("views stored as JPEG: 0 kept as their source JPEG, 6 encoded at quality 80"),
        "{err}"
    );
    let (code, _, info) = run(&["info", out]);
    assert_eq!(code, Some(0));
    assert!(
        info.contains(
            "jpeg        0 views kept as their source JPEG (lossless), 6 encoded at quality 80"
        ),
        "{info}"
    );
    let (_, _, json) = run(&["info", out, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        v["jpeg_views"],
        serde_json::json!({"kept": 0, "encoded": 6, "qualities": [80]})
    );
    assert_eq!(v["version"], 2);
}

#[test]
fn lossless_keeps_what_it_can_and_stores_the_rest_with_zstd() {
    let dir = tempfile::tempdir().unwrap();
    let ds = dataset_with_a_rotated_view(dir.path());
    pack(&ds, &dir.path().join("zstd"), Codec::Zstd, Resize::None);
    let opts = ConvertOptions {
        codec: Codec::Jpeg,
        lossless: true,
        resize: Some(Resize::None),
        depths: Some("depths".into()),
        workers: 2,
        ..Default::default()
    };
    let report = convert(&ds, &dir.path().join("lossless"), &opts, &|_| {})
        .unwrap()
        .jpeg
        .unwrap();
    assert_eq!(
        (report.kept, report.encoded, report.zstd, report.png),
        (5, 0, 1, 0)
    );
    let (z, l) = (
        Pack::open(&dir.path().join("zstd")).unwrap(),
        Pack::open(&dir.path().join("lossless")).unwrap(),
    );
    let v = &l.manifest().views[1];
    assert_eq!((v.codec, v.jpeg), (Codec::Zstd, None));
    // Every view, kept or not, reads back as the zstd pack's bytes.
    assert_eq!(views(&z), views(&l));
}

/// A view read at a run's resolution (`gs-train -r 2`) holds, besides the caller's buffer, at
/// most what the plan reserves for it (`Pack::decode_scratch`, in each worker's decode scratch
/// and in evaluation): the view decoded at its stored size, one row accumulator, and for a
/// JPEG view the decoder's scratch.
#[test]
fn reading_a_view_at_a_run_resolution_stays_within_its_scratch() {
    use ramsplat::dataset::Split;
    use ramsplat::shard::writer::{PackWriter, WriterOptions};
    use ramsplat::shard::SourceInfo;
    use ramsplat::synth::packs::centred_camera;
    let dir = tempfile::tempdir().unwrap();
    let (w, h) = (640u32, 480u32);
    let pixels = picture(w, h, 5);
    let cam = centred_camera(w, h, ramsplat::scene::camera::Pose::IDENTITY);
    for codec in [Codec::Raw, Codec::Jpeg] {
        let path = dir.path().join(format!("{codec:?}"));
        let options = WriterOptions {
            codec,
            ..Default::default()
        };
        let mut writer = PackWriter::create(&path, &options).unwrap();
        writer
            .add_view("v.png", &cam, Split::Train, &pixels)
            .unwrap();
        writer.finish(SourceInfo::generated("one view")).unwrap();
        for resize in [Resize::None, Resize::Downscale(2), Resize::MaxWidth(500)] {
            let pack = Pack::open(&path).unwrap().resized(resize);
            let scratch = pack.decode_scratch(0);
            let mut out = vec![0u8; pack.manifest().views[0].decoded_len()];
            let (r, heap) = heap::measured(|| pack.read_view_into(0, &mut out));
            r.unwrap().unwrap();
            let what = format!(
                "{codec:?} {resize}: {} B held, {scratch} B planned",
                heap.peak
            );
            if !resize.is_none() {
                assert!(
                    heap.peak as usize >= pixels.len(),
                    "{what}: the stored view is decoded whole"
                );
            }
            // Besides the scratch, the read formats one short string (the record's name for
            // its error messages): small churn the plan's allocator margin covers.
            assert!(heap.peak as usize <= scratch + 256, "{what}");
        }
    }
}
