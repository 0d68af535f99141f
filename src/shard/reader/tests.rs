use std::path::Path;

use super::*;
use crate::dataset::{MemPoints, PointChunk, Split};
use crate::rng::Rng;
use crate::scene::camera::{Camera, Intrinsics, Pose, Projection};
use crate::shard::writer::{PackWriter, WriteError, WriterOptions};
use crate::shard::{PointChunkRef, SourceInfo};

pub(crate) fn camera(w: u32, h: u32, tx: f64) -> Camera {
    Camera {
        width: w,
        height: h,
        intrinsics: Intrinsics {
            fx: w as f64,
            fy: w as f64,
            cx: w as f64 / 2.0,
            cy: h as f64 / 2.0,
        },
        world_to_camera: Pose {
            translation: [tx, 0.0, 4.0],
            ..Pose::IDENTITY
        },
        projection: Projection::Pinhole,
    }
}

fn source_info() -> SourceInfo {
    SourceInfo {
        path: "test".into(),
        format: crate::dataset::Format::Colmap,
        missing_images: vec![],
        max_width: None,
        downscale: None,
        test_every: None,
        images: None,
        depths: None,
        sfm_depths: false,
        points: None,
        points_transform: None,
    }
}

/// Smooth pattern plus noise, so zstd and png have something realistic to chew on.
fn pixels(w: u32, h: u32, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::with_capacity((w * h * 3) as usize);
    for y in 0..h {
        for x in 0..w {
            for c in 0..3 {
                let base = (x * (c + 1) + y * 2) as u64 % 200;
                out.push((base + rng.below(40)) as u8);
            }
        }
    }
    out
}

fn cloud(n: usize, labels: bool, normals: bool, seed: u64) -> PointChunk {
    let mut rng = Rng::new(seed);
    PointChunk {
        xyz: (0..n)
            .map(|_| {
                [
                    rng.normal() as f32,
                    rng.normal() as f32,
                    rng.normal() as f32,
                ]
            })
            .collect(),
        rgb: (0..n).map(|i| [i as u8, (i * 7) as u8, 255]).collect(),
        labels: labels.then(|| (0..n).map(|i| i as i32 - 5).collect()),
        normals: normals.then(|| (0..n).map(|i| [0.0, i as f32, 1.0]).collect()),
    }
}

/// Writes a pack of `views` views plus one cloud; returns the pixels written.
fn write_pack(dir: &Path, codec: Codec, views: usize, shard_size: u64) -> Vec<Vec<u8>> {
    let opts = WriterOptions {
        codec,
        shard_size,
        ..Default::default()
    };
    let mut w = PackWriter::create(dir, &opts).unwrap();
    let mut all = vec![];
    for i in 0..views {
        let (wd, ht) = (40 + i as u32, 24);
        let px = pixels(wd, ht, i as u64);
        let split = if i % 4 == 3 {
            Split::Test
        } else {
            Split::Train
        };
        w.add_view(
            &format!("v{i:03}.png"),
            &camera(wd, ht, i as f64),
            split,
            &px,
        )
        .unwrap();
        all.push(px);
    }
    let mut src = MemPoints::new(
        "sfm",
        vec![cloud(1000, true, true, 1), cloud(37, true, true, 2)],
    );
    w.add_cloud(&mut src).unwrap();
    w.finish(source_info()).unwrap();
    all
}

#[test]
fn round_trip_every_codec() {
    for codec in [Codec::Raw, Codec::Zstd, Codec::Png] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("p.pack");
        let px = write_pack(&dir, codec, 6, 1 << 30);
        let pack = Pack::open(&dir).unwrap();
        let m = pack.manifest();
        assert_eq!(m.views.len(), 6);
        assert_eq!(m.split_indices(Split::Test), vec![3]);
        for (i, want) in px.iter().enumerate() {
            let mut out = vec![0u8; m.views[i].decoded_len()];
            pack.read_view_into(i, &mut out).unwrap();
            assert_eq!(&out, want, "{codec:?} view {i}");
            assert_eq!(m.views[i].camera, camera(40 + i as u32, 24, i as f64));
        }
        let c = &m.clouds[0];
        assert_eq!((c.points, c.chunks.len()), (1037, 2));
        let mut got = vec![];
        for k in 0..c.chunks.len() {
            let mut buf = vec![0u8; c.chunks[k].record.decoded_len as usize];
            let layout = pack.read_chunk_into(0, k, &mut buf).unwrap();
            got.push(PointChunkRef::new(layout, &buf).unwrap().to_chunk());
        }
        assert_eq!(
            got,
            vec![cloud(1000, true, true, 1), cloud(37, true, true, 2)]
        );
        assert_eq!(pack.verify(&|_, _| {}).unwrap().records, 8);
    }
}

#[test]
fn shards_roll_at_the_size_limit_and_records_are_page_aligned() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("p.pack");
    // Raw 40x24 views are 2880 bytes: one page + header each, so ~3 records per 16 KiB shard.
    let px = write_pack(&dir, Codec::Raw, 10, 16 << 10);
    let pack = Pack::open(&dir).unwrap();
    assert!(
        pack.manifest().shards.len() >= 3,
        "{:?}",
        pack.manifest().shards
    );
    for (i, v) in pack.manifest().views.iter().enumerate() {
        assert_eq!(v.record.offset % PAGE, 0);
        let mut out = vec![0u8; v.decoded_len()];
        pack.read_view_into(i, &mut out).unwrap();
        assert_eq!(out, px[i]);
    }
    pack.verify(&|_, _| {}).unwrap();
}

fn shard_path(dir: &Path, i: u32) -> std::path::PathBuf {
    dir.join(crate::shard::shard_file_name(i))
}

#[test]
fn every_flipped_byte_is_caught_and_names_the_shard() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("p.pack");
    write_pack(&dir, Codec::Zstd, 3, 1 << 30);
    let path = shard_path(&dir, 0);
    let orig = std::fs::read(&path).unwrap();
    // Header, first record header, payload, padding, table, footer: every region.
    let len = orig.len();
    let positions = [
        0,
        40,
        100,
        4096,
        4096 + 10,
        4096 + 70,
        4096 + 2000,
        len - 40,
        len - 20,
        len - 1,
    ];
    for &pos in &positions {
        let mut bad = orig.clone();
        bad[pos] ^= 0x10;
        std::fs::write(&path, &bad).unwrap();
        let err = Pack::open(&dir).and_then(|p| p.verify(&|_, _| {}).map(|_| p));
        let msg = match err {
            Ok(_) => panic!("flip at byte {pos} not detected"),
            Err(e) => e.to_string(),
        };
        assert!(msg.contains("shard-00000.gss"), "byte {pos}: {msg}");
    }
    std::fs::write(&path, &orig).unwrap();
    Pack::open(&dir).unwrap().verify(&|_, _| {}).unwrap();
}

#[test]
fn flipped_payload_fails_the_read_of_that_view_only() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("p.pack");
    let px = write_pack(&dir, Codec::Zstd, 3, 1 << 30);
    let pack = Pack::open(&dir).unwrap();
    let r = pack.manifest().views[1].record;
    drop(pack);
    let path = shard_path(&dir, 0);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[(r.offset + RECORD_HEADER_LEN + 5) as usize] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    let pack = Pack::open(&dir).unwrap();
    let mut out = vec![0u8; px[1].len()];
    let err = pack.read_view_into(1, &mut out).unwrap_err().to_string();
    assert!(err.contains("view 1") && err.contains("checksum"), "{err}");
    let mut out0 = vec![0u8; px[0].len()];
    pack.read_view_into(0, &mut out0).unwrap();
    assert_eq!(out0, px[0]);
    let verr = pack.verify(&|_, _| {}).unwrap_err().to_string();
    assert!(verr.contains(&format!("byte {}", r.offset)), "{verr}");
}

#[test]
fn truncated_shard_is_refused_at_open() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("p.pack");
    write_pack(&dir, Codec::Zstd, 2, 1 << 30);
    let path = shard_path(&dir, 0);
    let bytes = std::fs::read(&path).unwrap();
    for cut in [0, 10, 4096, bytes.len() - 1] {
        std::fs::write(&path, &bytes[..cut]).unwrap();
        let err = Pack::open(&dir)
            .err()
            .expect("truncated shard opened")
            .to_string();
        assert!(err.contains("shard-00000.gss"), "{err}");
    }
}

#[test]
fn newer_and_older_versions_get_their_own_messages() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("p.pack");
    write_pack(&dir, Codec::Raw, 1, 1 << 30);
    let mpath = dir.join(MANIFEST_FILE);
    let text = std::fs::read_to_string(&mpath).unwrap();
    std::fs::write(&mpath, text.replace("\"version\": 1", "\"version\": 9")).unwrap();
    let err = Pack::open(&dir).err().unwrap();
    assert!(matches!(err, ShardError::TooNew { found: 9, .. }), "{err}");
    assert!(err.to_string().contains("upgrade ramsplat"));
    std::fs::write(&mpath, text.replace("\"version\": 1", "\"version\": 0")).unwrap();
    assert!(matches!(
        Pack::open(&dir).err().unwrap(),
        ShardError::TooOld { .. }
    ));
    std::fs::write(&mpath, "{not json").unwrap();
    assert!(matches!(
        Pack::open(&dir).err().unwrap(),
        ShardError::BadManifest { .. }
    ));
    std::fs::remove_file(&mpath).unwrap();
    assert!(matches!(
        Pack::open(&dir).err().unwrap(),
        ShardError::NotAPack { .. }
    ));
}

#[test]
fn a_shard_header_is_checked_for_damage_before_its_version() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("p.pack");
    write_pack(&dir, Codec::Raw, 1, 1 << 30);
    let path = shard_path(&dir, 0);
    let bytes = std::fs::read(&path).unwrap();
    // A flipped bit in the version field is damage, not a newer format.
    let mut flipped = bytes.clone();
    flipped[10] ^= 0x01;
    std::fs::write(&path, &flipped).unwrap();
    let err = Pack::open(&dir).err().unwrap();
    assert!(matches!(err, ShardError::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("header checksum"), "{err}");
    // A real newer shard (version and header checksum both written by it) asks for an upgrade.
    let mut newer = bytes.clone();
    newer[8..12].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
    let sum = xxhash_rust::xxh3::xxh3_64(&newer[0..32]);
    newer[32..40].copy_from_slice(&sum.to_le_bytes());
    std::fs::write(&path, &newer).unwrap();
    let err = Pack::open(&dir).err().unwrap();
    assert!(matches!(err, ShardError::TooNew { .. }), "{err}");
}

#[test]
fn existing_output_needs_force_and_abandoned_writers_leave_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("p.pack");
    write_pack(&dir, Codec::Raw, 1, 1 << 30);
    let err = PackWriter::create(&dir, &WriterOptions::default())
        .err()
        .unwrap();
    assert!(matches!(err, WriteError::Exists { .. }), "{err}");
    // An abandoned writer (e.g. an error mid-pack) removes its temporary directory and leaves
    // the old pack untouched.
    {
        let opts = WriterOptions {
            force: true,
            ..Default::default()
        };
        let mut w = PackWriter::create(&dir, &opts).unwrap();
        w.add_view("a", &camera(8, 8, 0.0), Split::Train, &pixels(8, 8, 0))
            .unwrap();
    }
    let names: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("p.pack")]);
    assert_eq!(Pack::open(&dir).unwrap().manifest().views.len(), 1);
    // --force replaces it.
    let opts = WriterOptions {
        force: true,
        ..Default::default()
    };
    let mut w = PackWriter::create(&dir, &opts).unwrap();
    for i in 0..2 {
        w.add_view(
            &format!("b{i}"),
            &camera(8, 8, i as f64),
            Split::Train,
            &pixels(8, 8, i),
        )
        .unwrap();
    }
    w.finish(source_info()).unwrap();
    assert_eq!(Pack::open(&dir).unwrap().manifest().views.len(), 2);
}

/// An empty directory at the destination is filled without `force`; one that is empty when the
/// writer starts but holds a file when it finishes keeps the file, and the writer reports the
/// race (with `force` too: the file makes it no pack).
#[test]
fn an_empty_destination_is_filled_but_not_once_something_is_put_there() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("p.pack");
    let one_view = |w: &mut PackWriter| {
        w.add_view("a", &camera(8, 8, 0.0), Split::Train, &pixels(8, 8, 0))
            .unwrap();
    };
    std::fs::create_dir(&dir).unwrap();
    let mut w = PackWriter::create(&dir, &WriterOptions::default()).unwrap();
    one_view(&mut w);
    w.finish(source_info()).unwrap();
    assert_eq!(Pack::open(&dir).unwrap().manifest().views.len(), 1);
    for force in [false, true] {
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::create_dir(&dir).unwrap();
        let opts = WriterOptions {
            force,
            ..Default::default()
        };
        let mut w = PackWriter::create(&dir, &opts).unwrap();
        one_view(&mut w);
        std::fs::write(dir.join("notes.txt"), b"mine").unwrap();
        let err = w.finish(source_info()).unwrap_err();
        let want_raced = !force;
        assert_eq!(
            matches!(err, WriteError::Raced { .. }),
            want_raced,
            "force {force}: {err}"
        );
        assert_eq!(std::fs::read(dir.join("notes.txt")).unwrap(), b"mine");
        let names: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["p.pack"], "force {force}: a temporary was left");
    }
}

#[test]
fn bad_views_and_empty_packs_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("p.pack");
    let mut w = PackWriter::create(&dir, &WriterOptions::default()).unwrap();
    let err = w
        .add_view("a", &camera(8, 8, 0.0), Split::Train, &[0u8; 10])
        .unwrap_err();
    assert!(err.to_string().contains("192"), "{err}");
    let mut cam = camera(8, 8, 0.0);
    cam.world_to_camera.rotation[0][0] = f64::NAN;
    assert!(w
        .add_view("a", &cam, Split::Train, &pixels(8, 8, 0))
        .is_err());
    w.add_view("a", &camera(8, 8, 0.0), Split::Train, &pixels(8, 8, 0))
        .unwrap();
    let dup = w
        .add_view("a", &camera(8, 8, 0.0), Split::Train, &pixels(8, 8, 0))
        .unwrap_err();
    assert!(dup.to_string().contains("unique"), "{dup}");
    drop(w);
    let w = PackWriter::create(&dir, &WriterOptions::default()).unwrap();
    assert!(matches!(w.finish(source_info()), Err(WriteError::Empty)));
    assert!(!dir.exists());
}

#[test]
fn wrong_buffer_size_and_out_of_range_are_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("p.pack");
    write_pack(&dir, Codec::Zstd, 1, 1 << 30);
    let pack = Pack::open(&dir).unwrap();
    assert!(matches!(
        pack.read_view_into(0, &mut [0u8; 3]),
        Err(ShardError::BufferSize { .. })
    ));
    assert!(matches!(
        pack.read_view_into(5, &mut [0u8; 3]),
        Err(ShardError::OutOfRange { .. })
    ));
    assert!(matches!(
        pack.read_chunk_into(0, 9, &mut [0u8; 3]),
        Err(ShardError::OutOfRange { .. })
    ));
}

#[test]
fn scene_extent_follows_the_3dgs_rule() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("p.pack");
    write_pack(&dir, Codec::Raw, 3, 1 << 30);
    let m = Pack::open(&dir).unwrap().manifest().clone();
    // Camera centres are (−i, 0, −4) for i = 0, 1, 2: centroid x = −1, max distance 1.
    assert!((m.scene.camera_centroid[0] + 1.0).abs() < 1e-12);
    assert!((m.scene.extent - 1.1).abs() < 1e-12);
    assert!(!m.scene.no_sfm_points);
}

#[test]
fn every_layout_round_trips_every_codec_and_rgb_views_are_unchanged() {
    use crate::shard::writer::encode_view_depth;
    use crate::shard::DepthScale;
    for codec in [Codec::Raw, Codec::Zstd, Codec::Png] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("p.pack");
        let opts = WriterOptions {
            codec,
            ..Default::default()
        };
        let mut w = PackWriter::create(&dir, &opts).unwrap();
        let (wd, ht) = (20u32, 12u32);
        let rgb = pixels(wd, ht, 1);
        // RGBA: the RGB pattern plus an alpha ramp with fully transparent and opaque pixels.
        let rgba: Vec<u8> = rgb
            .chunks_exact(3)
            .enumerate()
            .flat_map(|(i, p)| [p[0], p[1], p[2], (i * 7 % 256) as u8])
            .collect();
        w.add_view("rgb.png", &camera(wd, ht, 0.0), Split::Train, &rgb)
            .unwrap();
        // A mask of 0/255 with both values present.
        let mask: Vec<u8> = (0..wd * ht)
            .map(|i| if i % 5 < 2 { 0 } else { 255 })
            .collect();
        // An inverse-depth plane with 0, 65535 and values whose two bytes differ (so a byte
        // order mix-up shows).
        let depth: Vec<u8> = (0..wd * ht)
            .flat_map(|i| {
                match i {
                    0 => 0u16,
                    1 => u16::MAX,
                    _ => (i * 4099 % 65536) as u16,
                }
                .to_le_bytes()
            })
            .collect();
        let mut layouts = Vec::new();
        let mut bytes = Vec::new();
        for depth_on in [false, true] {
            for (alpha, mask_on) in [(false, false), (true, false), (false, true), (true, true)] {
                layouts.push(PixelLayout {
                    alpha,
                    mask: mask_on,
                    depth: depth_on,
                });
                let mut b = if alpha { rgba.clone() } else { rgb.clone() };
                if mask_on {
                    b.extend_from_slice(&mask);
                }
                if depth_on {
                    b.extend_from_slice(&depth);
                }
                bytes.push(b);
            }
        }
        let scale_of = |i: usize| {
            layouts[i].depth.then_some(DepthScale {
                scale: 0.5 + i as f32,
                offset: -0.25 * i as f32,
            })
        };
        for (i, (layout, b)) in layouts.iter().zip(&bytes).enumerate().skip(1) {
            let v = encode_view_depth(
                &format!("view{i}.png"),
                &camera(wd, ht, i as f64),
                Split::Train,
                b,
                *layout,
                scale_of(i),
                codec,
                3,
            )
            .unwrap();
            w.add_encoded_view(v).unwrap();
        }
        // Bytes of another layout's size are refused with both sizes; so is a depth plane
        // without its scale, a scale without a plane, and a scale that is not finite.
        for (layout, want) in [
            (layouts[1], "RGBA8 needs 960"),
            (layouts[2], "RGB8 + mask needs 960"),
            (layouts[3], "RGBA8 + mask needs 1200"),
            (layouts[4], "RGB8 + depth needs 1200"),
            (layouts[7], "RGBA8 + mask + depth needs 1680"),
        ] {
            let e = encode_view_depth(
                "bad",
                &camera(wd, ht, 0.0),
                Split::Train,
                &rgb,
                layout,
                layout.depth.then_some(DepthScale::IDENTITY),
                codec,
                3,
            )
            .unwrap_err()
            .to_string();
            assert!(e.contains(want), "{e}");
        }
        let encode = |i: usize, d: Option<DepthScale>| {
            encode_view_depth(
                "bad",
                &camera(wd, ht, 0.0),
                Split::Train,
                &bytes[i],
                layouts[i],
                d,
                codec,
                3,
            )
            .unwrap_err()
            .to_string()
        };
        assert!(encode(4, None).contains("has an inverse-depth plane but no depth scale"));
        assert!(encode(0, Some(DepthScale::IDENTITY)).contains("has no inverse-depth plane"));
        let nan = DepthScale {
            scale: f32::NAN,
            offset: 0.0,
        };
        assert!(encode(4, Some(nan)).contains("must be finite"));
        w.add_cloud(&mut MemPoints::new("sfm", vec![cloud(10, false, false, 1)]))
            .unwrap();
        w.finish(source_info()).unwrap();

        let pack = Pack::open(&dir).unwrap();
        let m = pack.manifest();
        let got: Vec<PixelLayout> = m.views.iter().map(|v| v.layout()).collect();
        assert_eq!(got, layouts);
        let scales: Vec<Option<DepthScale>> = m.views.iter().map(|v| v.depth).collect();
        let want: Vec<Option<DepthScale>> = (0..8).map(scale_of).collect();
        assert_eq!(scales, want);
        assert!(m.has_depths());
        let lens: Vec<usize> = m.views.iter().map(|v| v.decoded_len()).collect();
        assert_eq!(lens, [720, 960, 960, 1200, 1200, 1440, 1440, 1680]);
        for (i, want) in bytes.iter().enumerate() {
            let mut out = vec![0u8; m.views[i].decoded_len()];
            pack.read_view_into(i, &mut out).unwrap();
            assert_eq!(&out, want, "{codec:?} view {i}");
            let planes = m.views[i].layout().planes(&out, wd, ht).unwrap();
            assert_eq!(planes.depth, layouts[i].depth.then_some(depth.as_slice()));
        }
        assert_eq!(pack.verify(&|_, _| {}).unwrap().records, 9);
        // The manifest names alpha, mask and depth only where they are set: an RGB view's
        // entry is as before.
        let text = std::fs::read_to_string(dir.join(crate::shard::MANIFEST_FILE)).unwrap();
        assert_eq!(text.matches("\"alpha\"").count(), 4, "{text}");
        assert_eq!(text.matches("\"mask\"").count(), 4, "{text}");
        assert_eq!(text.matches("\"depth\"").count(), 4, "{text}");
    }
}

/// `verify` and the reader check that a view's record flags say what its manifest entry says:
/// a manifest that drops a view's depth entry (or adds one) no longer describes the record.
#[test]
fn verify_catches_a_manifest_that_disagrees_with_the_depth_flag() {
    use crate::shard::writer::encode_view_depth;
    use crate::shard::DepthScale;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("p.pack");
    let mut w = PackWriter::create(&dir, &WriterOptions::default()).unwrap();
    let (wd, ht) = (6u32, 4u32);
    for i in 0..2u32 {
        let mut b = pixels(wd, ht, i as u64);
        b.extend((0..wd * ht).flat_map(|k| ((k * 1000) as u16).to_le_bytes()));
        let layout = PixelLayout {
            depth: true,
            ..PixelLayout::RGB
        };
        let v = encode_view_depth(
            &format!("v{i}"),
            &camera(wd, ht, i as f64),
            Split::Train,
            &b,
            layout,
            Some(DepthScale::IDENTITY),
            Codec::Zstd,
            3,
        )
        .unwrap();
        w.add_encoded_view(v).unwrap();
    }
    w.finish(source_info()).unwrap();
    Pack::open(&dir).unwrap().verify(&|_, _| {}).unwrap();
    let path = dir.join(crate::shard::MANIFEST_FILE);
    let orig = std::fs::read_to_string(&path).unwrap();
    let mut m: Manifest = serde_json::from_str(&orig).unwrap();
    // RGBA8 + mask has the length of RGB8 + depth: dropping the depth entry and claiming
    // alpha and a mask keeps every length consistent, so only the flags tell.
    m.views[1].depth = None;
    m.views[1].depth_pixels = None;
    m.views[1].alpha = true;
    m.views[1].mask = true;
    std::fs::write(&path, serde_json::to_vec(&m).unwrap()).unwrap();
    let pack = Pack::open(&dir).unwrap();
    let e = pack.verify(&|_, _| {}).unwrap_err().to_string();
    assert!(e.contains("not the one the manifest lists"), "{e}");
    let mut out = vec![0u8; m.views[1].decoded_len()];
    let e = pack.read_view_into(1, &mut out).unwrap_err().to_string();
    assert!(e.contains("not this view"), "{e}");
    // A scale that overflows f32 (JSON has no infinity) is refused when the pack is opened.
    assert!(orig.contains("\"scale\": 1.0"), "{orig}");
    std::fs::write(&path, orig.replacen("\"scale\": 1.0", "\"scale\": 1e39", 1)).unwrap();
    let e = Pack::open(&dir).map(|_| ()).unwrap_err().to_string();
    assert!(
        e.contains("depth scale inf and offset 0 must be finite"),
        "{e}"
    );
}

/// `gs-train -r` reads a view as `gs-pack convert --downscale` would have packed it: the
/// colour (straight or with alpha), the mask and the camera are byte-identical, the
/// inverse-depth plane within one stored step (the packer averages the file's values, the
/// reader the stored ones), for integer and fractional factors and odd sizes.
#[test]
fn resampling_a_packed_view_matches_packing_it_at_that_size() {
    use crate::dataset::{DepthSource, Distortion, ViewSource};
    use crate::import::image::{prepare_view_pixels, Resize};
    use crate::shard::DepthScale;
    use image::ImageEncoder;
    let tmp = tempfile::tempdir().unwrap();
    let (w, h) = (37u32, 23u32);
    let colour = |x: u32, y: u32, c: u32| ((x * 29 + y * 13 + c * 71 + (x * y) % 17) % 256) as u8;
    let rgb_path = tmp.path().join("rgb.png");
    image::RgbImage::from_fn(w, h, |x, y| image::Rgb([0, 1, 2].map(|c| colour(x, y, c))))
        .save(&rgb_path)
        .unwrap();
    // Alpha with transparent, opaque and partial pixels.
    let rgba_path = tmp.path().join("rgba.png");
    image::RgbaImage::from_fn(w, h, |x, y| {
        let a = match (x + 3 * y) % 7 {
            0 => 0,
            1 | 2 => 255,
            k => (k * 40 + x) as u8,
        };
        image::Rgba([colour(x, y, 0), colour(x, y, 1), colour(x, y, 2), a])
    })
    .save(&rgba_path)
    .unwrap();
    // A mask excluding a disc and a stripe.
    let mask_path = tmp.path().join("mask.png");
    image::GrayImage::from_fn(w, h, |x, y| {
        let (dx, dy) = (x as i32 - 12, y as i32 - 9);
        image::Luma([if dx * dx + dy * dy < 30 || x == 30 {
            0
        } else {
            255
        }])
    })
    .save(&mask_path)
    .unwrap();
    // A 16-bit map with a no-depth corner.
    let depth_path = tmp.path().join("depth.png");
    let depth: Vec<u8> = (0..h)
        .flat_map(|y| (0..w).map(move |x| (x, y)))
        .flat_map(|(x, y)| {
            let v = if x < 4 && y < 3 {
                0
            } else {
                1000 + x * 997 + y * 331
            };
            (v as u16).to_ne_bytes()
        })
        .collect();
    image::codecs::png::PngEncoder::new(std::fs::File::create(&depth_path).unwrap())
        .write_image(&depth, w, h, image::ExtendedColorType::L16)
        .unwrap();
    for (alpha, mask, with_depth) in [
        (false, false, false),
        (true, false, false),
        (false, true, true),
        (true, true, true),
    ] {
        let view = ViewSource {
            name: "v.png".into(),
            image_path: if alpha { &rgba_path } else { &rgb_path }.clone(),
            camera: crate::synth::packs::centred_camera(w, h, Pose::IDENTITY),
            distortion: Distortion::NONE,
            split: None,
            mask_path: mask.then(|| mask_path.clone()),
            depth: with_depth.then(|| DepthSource {
                path: depth_path.clone(),
                scale: DepthScale::IDENTITY,
            }),
        };
        let full = prepare_view_pixels(&view, Resize::None, false).unwrap();
        let layout = full.layout;
        assert_eq!(
            (layout.alpha, layout.mask, layout.depth),
            (alpha, mask, with_depth)
        );
        for resize in [
            Resize::Downscale(2),
            Resize::Downscale(3),
            Resize::Downscale(4),
            Resize::MaxWidth(20),
        ] {
            let packed = prepare_view_pixels(&view, resize, false).unwrap();
            let (sw, sh) = (packed.camera.width, packed.camera.height);
            assert_eq!(full.camera.resized(sw, sh), packed.camera, "{resize:?}");
            let mut src = full.pixels.clone();
            let mut out = vec![0u8; layout.len(sw, sh)];
            resample_view(
                layout,
                DepthRule::AreaMean,
                (w, h),
                &mut src,
                (sw, sh),
                &mut out,
            );
            let n = sw as usize * sh as usize;
            let colour_and_mask = layout.pixel_bytes(sw, sh) + if mask { n } else { 0 };
            assert_eq!(
                out[..colour_and_mask],
                packed.pixels[..colour_and_mask],
                "{resize:?} alpha {alpha} mask {mask}"
            );
            if mask {
                let m = &out[layout.pixel_bytes(sw, sh)..colour_and_mask];
                assert!(
                    m.contains(&0) && m.contains(&255),
                    "{resize:?}: a real mask"
                );
            }
            let steps = |b: &[u8]| -> Vec<i32> {
                b.chunks_exact(2)
                    .map(|p| u16::from_le_bytes([p[0], p[1]]) as i32)
                    .collect()
            };
            let (got, want) = (
                steps(&out[colour_and_mask..]),
                steps(&packed.pixels[colour_and_mask..]),
            );
            assert_eq!(got.len(), want.len());
            for (k, (g, e)) in got.iter().zip(&want).enumerate() {
                assert!((g - e).abs() <= 1, "{resize:?} depth {k}: {g} vs {e}");
            }
        }
    }
}

/// A pack presented at another size: cameras and lengths follow, reads return the resampled
/// view, views already small enough and point clouds are untouched, and what names the pack
/// (verify, the content fingerprint) is the stored pack's.
#[test]
fn a_resized_pack_presents_smaller_views_and_reads_them_resampled() {
    use crate::import::image::Resize;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("p.pack");
    let mut w = PackWriter::create(&dir, &WriterOptions::default()).unwrap();
    let big = pixels(40, 30, 1);
    let small = pixels(16, 12, 2);
    w.add_view("big.png", &camera(40, 30, 0.0), Split::Train, &big)
        .unwrap();
    w.add_view("small.png", &camera(16, 12, 1.0), Split::Test, &small)
        .unwrap();
    w.finish(source_info()).unwrap();
    let stored = Pack::open(&dir).unwrap();
    let fingerprint = stored.content_fingerprint();
    assert_eq!(stored.resize(), Resize::None);
    assert_eq!(stored.resample_scratch(0), 0);

    let pack = Pack::open(&dir).unwrap().resized(Resize::MaxWidth(20));
    assert_eq!(pack.resize(), Resize::MaxWidth(20));
    let m = pack.manifest();
    assert_eq!((m.views[0].width(), m.views[0].height()), (20, 15));
    assert_eq!(m.views[0].camera, camera(40, 30, 0.0).resized(20, 15));
    assert_eq!(m.views[0].decoded_len(), 20 * 15 * 3);
    assert_eq!(
        m.views[1],
        stored.manifest().views[1],
        "narrower view untouched"
    );
    assert_eq!(pack.stored_view(0), stored.manifest().views.first());
    assert_eq!(pack.content_fingerprint(), fingerprint);
    assert_ne!(
        m.content_fingerprint(),
        fingerprint,
        "the presented manifest differs"
    );
    assert_eq!(
        pack.resample_scratch(0),
        40 * 30 * 3 + resample_heap_bytes(PixelLayout::RGB, (40, 30), (20, 15))
    );
    assert_eq!(pack.resample_scratch(1), 0);
    assert_eq!(pack.max_decode_scratch(0..2), pack.resample_scratch(0));
    assert_eq!(
        pack.decode_scratch(0),
        pack.resample_scratch(0),
        "no JPEG views"
    );
    pack.verify(&|_, _| {}).unwrap();

    let mut got = vec![0u8; 20 * 15 * 3];
    pack.read_view_into(0, &mut got).unwrap();
    let mut src = big.clone();
    let mut want = vec![0u8; got.len()];
    resample_view(
        PixelLayout::RGB,
        DepthRule::AreaMean,
        (40, 30),
        &mut src,
        (20, 15),
        &mut want,
    );
    assert_eq!(got, want);
    let mut got_small = vec![0u8; small.len()];
    pack.read_view_into(1, &mut got_small).unwrap();
    assert_eq!(got_small, small);
    // The stored size is refused now, naming the size it wants.
    let e = pack
        .read_view_into(0, &mut vec![0u8; big.len()])
        .unwrap_err();
    assert!(e.to_string().contains(&(20 * 15 * 3).to_string()), "{e}");

    // Resizing again starts from the stored views; `Resize::None` gives the stored pack back.
    let quarter = pack.resized(Resize::Downscale(4));
    assert_eq!(quarter.manifest().views[0].width(), 10);
    assert_eq!(quarter.manifest().views[1].width(), 4);
    let again = quarter.resized(Resize::None);
    assert_eq!(again.manifest(), stored.manifest());
    assert_eq!(again.resize(), Resize::None);
}

/// A pack of SfM depths (`sfm_depths`) counts each view's points when it is written, and a
/// loader that reads it smaller keeps the points (the nearest in each smaller pixel) where a
/// dense map's area mean would erase them; a count the plane cannot hold is refused on open.
#[test]
fn sfm_depth_planes_are_counted_and_keep_their_points_when_read_smaller() {
    use crate::resample::point_row_u16;
    use crate::shard::writer::encode_view_depth;
    use crate::shard::DepthScale;
    let (wd, ht) = (12u32, 8u32);
    let mut plane = vec![0u16; (wd * ht) as usize];
    for (x, y, v) in [
        (0, 0, 900u16),
        (5, 3, 40_000),
        (4, 2, 41_000),
        (11, 7, 3),
        (7, 1, 2),
    ] {
        plane[y * wd as usize + x] = v;
    }
    let plane_bytes: Vec<u8> = plane.iter().flat_map(|v| v.to_le_bytes()).collect();
    let layout = PixelLayout {
        depth: true,
        ..PixelLayout::RGB
    };
    let mut got = Vec::new();
    for sparse in [true, false] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("p.pack");
        let mut w = PackWriter::create(&dir, &WriterOptions::default()).unwrap();
        let bytes = [pixels(wd, ht, 3), plane_bytes.clone()].concat();
        let v = encode_view_depth(
            "v0",
            &camera(wd, ht, 0.0),
            Split::Train,
            &bytes,
            layout,
            Some(DepthScale::IDENTITY),
            Codec::Zstd,
            3,
        )
        .unwrap();
        assert_eq!(v.depth_pixels, Some(5));
        w.add_encoded_view(v).unwrap();
        w.finish(SourceInfo {
            sfm_depths: sparse,
            ..source_info()
        })
        .unwrap();
        let pack = Pack::open(&dir).unwrap();
        assert_eq!(pack.manifest().views[0].depth_pixels, Some(5));
        let small = pack.resized(Resize::Downscale(2));
        let v = &small.manifest().views[0];
        assert_eq!((v.width(), v.height()), (6, 4));
        // The count stays the stored plane's: the divisor at any training resolution.
        assert_eq!(v.depth_pixels, Some(5));
        let mut out = vec![0u8; v.decoded_len()];
        small.read_view_into(0, &mut out).unwrap();
        let depth: Vec<u16> = out[6 * 4 * 3..]
            .chunks_exact(2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .collect();
        got.push(depth);
        // A count larger than the plane, or on a view without one, is refused on open.
        let path = dir.join(crate::shard::MANIFEST_FILE);
        let orig = std::fs::read_to_string(&path).unwrap();
        assert!(orig.contains("\"depth_pixels\": 5"), "{orig}");
        std::fs::write(
            &path,
            orig.replace("\"depth_pixels\": 5", "\"depth_pixels\": 97"),
        )
        .unwrap();
        let e = Pack::open(&dir).map(|_| ()).unwrap_err().to_string();
        assert!(
            e.contains("97 depth pixels listed for a plane of 96 pixels"),
            "{e}"
        );
    }
    let mut want = Vec::new();
    for oy in 0..4 {
        let mut row = vec![0u8; 12];
        point_row_u16(&plane_bytes, (wd, ht), (6, 4), oy, &mut row);
        want.extend(
            row.chunks_exact(2)
                .map(|b| u16::from_le_bytes([b[0], b[1]])),
        );
    }
    assert_eq!(got[0], want);
    // (4, 2) and (5, 3) share output pixel (2, 1): the nearer (larger) value is kept.
    let kept: Vec<u16> = got[0].iter().copied().filter(|&v| v != 0).collect();
    assert_eq!(kept, vec![900, 2, 41_000, 3]);
    // The area mean of a dense map: every 2×2 block holds a 0, so nothing is left.
    assert!(got[1].iter().all(|&v| v == 0), "{:?}", got[1]);
}
