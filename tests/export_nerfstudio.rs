//! `gs-pack export` end to end: a pack exported as a nerfstudio folder and converted back is
//! the same data (pixels, masks and inverse-depth planes byte for byte in every layout, depth
//! scales, cameras, split, points), the random
//! initial points are exactly gs-train's, and refusals leave nothing behind.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use ramsplat::dataset::{MemPoints, PointChunk, Split};
use ramsplat::scene::camera::{Camera, Intrinsics, Pose, Projection};
use ramsplat::shard::reader::Pack;
use ramsplat::shard::writer::{encode_view_depth, PackWriter, WriterOptions};
use ramsplat::shard::{Codec, DepthScale, PixelLayout, SourceInfo};

const BIN: &str = env!("CARGO_BIN_EXE_gs-pack");

fn gs_pack(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

fn ok(o: &Output) -> String {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{text}");
    text
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `gs-pack convert` of an exported folder into `back`, keeping its pixels as they are (raw,
/// no resize) and reading its depth maps.
fn convert_back(folder: &Path, back: &Path) -> Pack {
    convert_back_with(folder, back, &[])
}

/// [`convert_back`] with more arguments (`--keep-fisheye`).
fn convert_back_with(folder: &Path, back: &Path, extra: &[&str]) -> Pack {
    let mut args = vec![
        "convert",
        s(folder),
        "-o",
        s(back),
        "--codec",
        "raw",
        "--max-width",
        "0",
        "--depths",
        "depths",
    ];
    args.extend_from_slice(extra);
    ok(&gs_pack(&args));
    Pack::open(back).unwrap()
}

/// View names as datasets spell them: folders, spaces, a climb out of the folder, names equal
/// after the export's sanitising rule.
const NAMES: [&str; 8] = [
    "images/0001.jpg",
    "images/0002.JPG",
    "images/a b.png",
    "../up.png",
    "images/0001.png",
    "x",
    "y.jpeg",
    "z.png",
];

/// Eight views (every colour/mask layout twice, four of them with an inverse-depth plane: every
/// layout with depth once; odd sizes, rotated cameras with off-centre principal points, three
/// test views) and a 500-point SfM cloud.
fn write_pack(dir: &Path, with_points: bool) -> PathBuf {
    write_pack_as(dir, with_points, |_| Projection::Pinhole)
}

/// [`write_pack`] with view `i`'s camera of projection `projection(i)`.
fn write_pack_as(
    dir: &Path,
    with_points: bool,
    projection: impl Fn(usize) -> Projection,
) -> PathBuf {
    let path = dir.join("src.pack");
    let mut w = PackWriter::create(&path, &WriterOptions::default()).unwrap();
    for (i, name) in NAMES.iter().enumerate() {
        let (width, height) = (7 + i as u32, 5 + (i as u32 % 3));
        let layout = PixelLayout {
            alpha: i % 2 == 1,
            mask: (i / 2) % 2 == 1,
            depth: (3..=6).contains(&i),
        };
        let n = (width * height) as usize;
        let mut bytes: Vec<u8> = (0..layout.pixel_bytes(width, height))
            .map(|k| (k * 37 + i * 11) as u8)
            .collect();
        if layout.alpha {
            // Some transparent and some half-covered pixels, so the alpha channel is kept.
            for (p, px) in bytes.chunks_exact_mut(4).enumerate() {
                px[3] = [0, 128, 255][p % 3];
            }
        }
        if layout.mask {
            bytes.extend((0..n).map(|k| if k % 4 == 0 { 0 } else { 255 }));
        }
        if layout.depth {
            // 0, 65535 and values whose two bytes differ.
            bytes.extend((0..n).flat_map(|k| {
                let v = match k {
                    0 => 0,
                    1 => u16::MAX,
                    _ => (k * 2593 + i * 977) as u16,
                };
                v.to_le_bytes()
            }));
        }
        // Scales within 0.2–5× of their median, so none is unreliable on re-import.
        let depth = layout.depth.then_some(DepthScale {
            scale: 1.0 + 0.3 * i as f32,
            offset: 0.1 * i as f32 - 0.3,
        });
        let a = i as f64 * 0.7;
        let pose = Pose::from_quaternion_wxyz(
            [a.cos(), 0.3 * a.sin(), 0.2, -0.1 * i as f64],
            [0.1 * i as f64, -0.5, 3.0 + i as f64],
        )
        .unwrap();
        let camera = Camera {
            width,
            height,
            intrinsics: Intrinsics {
                fx: 9.25 + i as f64,
                fy: 8.5 + 0.1 * i as f64,
                cx: width as f64 / 2.0 + 0.3,
                cy: height as f64 / 2.0 - 0.7,
            },
            world_to_camera: pose,
            projection: projection(i),
        };
        let split = if i % 3 == 1 {
            Split::Test
        } else {
            Split::Train
        };
        w.add_encoded_view(
            encode_view_depth(name, &camera, split, &bytes, layout, depth, Codec::Zstd, 3).unwrap(),
        )
        .unwrap();
    }
    if with_points {
        let chunk = PointChunk {
            xyz: (0..500)
                .map(|i| {
                    [
                        i as f32 * 0.01 - 2.5,
                        (i % 7) as f32 * 0.3,
                        1.0 / (i + 1) as f32,
                    ]
                })
                .collect(),
            rgb: (0..500)
                .map(|i| [i as u8, (i * 3) as u8, 255 - i as u8])
                .collect(),
            labels: None,
            normals: None,
        };
        w.add_cloud(&mut MemPoints::new("sfm", vec![chunk]))
            .unwrap();
    }
    w.finish(SourceInfo::generated("export test")).unwrap();
    path
}

fn decoded(pack: &Pack, i: usize) -> Vec<u8> {
    let v = &pack.manifest().views[i];
    let mut out = vec![0u8; v.layout().len(v.camera.width, v.camera.height)];
    pack.read_view_into(i, &mut out).unwrap();
    out
}

fn points(pack: &Pack) -> Vec<([f32; 3], [u8; 3])> {
    let m = pack.manifest();
    let mut out = Vec::new();
    for (c, cloud) in m.clouds.iter().enumerate() {
        for (k, ch) in cloud.chunks.iter().enumerate() {
            let layout = ramsplat::shard::PointChunkLayout::new(
                ch.points as usize,
                cloud.has_labels,
                cloud.has_normals,
            );
            let mut buf = vec![0u8; layout.total];
            pack.read_chunk_into(c, k, &mut buf).unwrap();
            let r = ramsplat::shard::PointChunkRef::new(layout, &buf).unwrap();
            out.extend((0..r.len()).map(|i| (r.xyz(i), r.rgb(i))));
        }
    }
    out
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// The exported file stem of each of `pack`'s views, by the export's naming rule.
fn stems_of(pack: &Pack) -> Vec<String> {
    ramsplat::export::nerfstudio::file_stems(pack.manifest().views.iter().map(|v| v.name.as_str()))
}

/// Every view of `a` is in `b`, named `name_in_b(i)`, with the same layout, depth scale, bytes,
/// size and intrinsics (exactly), pose (to 1e-9) and, with `same_split`, split.
fn assert_same_views(a: &Pack, b: &Pack, name_in_b: impl Fn(usize) -> String, same_split: bool) {
    let (ma, mb) = (a.manifest(), b.manifest());
    assert_eq!(ma.views.len(), mb.views.len());
    for (i, va) in ma.views.iter().enumerate() {
        let want = name_in_b(i);
        let j = mb
            .views
            .iter()
            .position(|v| v.name == want)
            .unwrap_or_else(|| panic!("no view {want} for {}", va.name));
        let vb = &mb.views[j];
        assert_eq!(va.layout(), vb.layout(), "{}", va.name);
        assert_eq!(va.depth, vb.depth, "depth scale of {}", va.name);
        if same_split {
            assert_eq!(va.split, vb.split, "{}", va.name);
        }
        assert_eq!(decoded(a, i), decoded(b, j), "pixels of {}", va.name);
        let (ca, cb) = (&va.camera, &vb.camera);
        assert_eq!((ca.width, ca.height), (cb.width, cb.height));
        assert_eq!(ca.intrinsics, cb.intrinsics, "{}", va.name);
        let (pa, pb) = (ca.world_to_camera, cb.world_to_camera);
        for r in 0..3 {
            assert!(
                close(pa.translation[r], pb.translation[r]),
                "{}: {pa:?} vs {pb:?}",
                va.name
            );
            for c in 0..3 {
                assert!(
                    close(pa.rotation[r][c], pb.rotation[r][c]),
                    "{}: {pa:?} vs {pb:?}",
                    va.name
                );
            }
        }
    }
}

#[test]
fn a_pack_round_trips_through_the_nerfstudio_folder() {
    let dir = tempfile::tempdir().unwrap();
    let src = write_pack(dir.path(), true);
    let folder = dir.path().join("exported");
    let text = ok(&gs_pack(&["export", s(&src), "-o", s(&folder)]));
    assert!(
        text.contains(
            "8 views (5 train, 3 test; 4 masked, 4 with alpha, 4 with depth), 500 SfM points"
        ),
        "{text}"
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(folder.join("transforms.json")).unwrap())
            .unwrap();
    assert_eq!(doc["ply_file_path"], "sparse_pc.ply");
    assert_eq!(doc["ramsplat_points"], "sfm");
    assert_eq!(doc["camera_model"], "PINHOLE");
    // Every file the export wrote is inside the folder, under images/ or masks/.
    for f in doc["frames"].as_array().unwrap() {
        let p = f["file_path"].as_str().unwrap();
        assert!(p.starts_with("images/") && !p.contains(".."), "{p}");
        assert!(folder.join(p).is_file(), "{p}");
    }
    // A map and a fit per view with depth, none for the others.
    let params: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(folder.join("depth_params.json")).unwrap())
            .unwrap();
    assert_eq!(params.len(), 4);
    assert_eq!(std::fs::read_dir(folder.join("depths")).unwrap().count(), 4);

    let b = convert_back(&folder, &dir.path().join("back.pack"));
    let a = Pack::open(&src).unwrap();
    // The exported file of each original view, by the export's naming rule.
    let stems = stems_of(&a);
    assert_same_views(&a, &b, |i| format!("images/{}.png", stems[i]), true);
    let mb = b.manifest();
    assert!(!mb.scene.no_sfm_points);
    assert_eq!(mb.clouds.len(), 1);
    assert_eq!(mb.clouds[0].name, "sfm");
    assert_eq!(points(&a), points(&b));
}

/// `--format colmap`: the same pixels, masks, depth planes and scales, cameras (bit for bit:
/// binary COLMAP keeps every f64) and points come back through `gs-pack convert`'s COLMAP
/// importer; `test.txt` lists the pack's test views, and the export says that the pack's split
/// is not the readers' default.
#[test]
fn a_pack_round_trips_through_the_colmap_folder() {
    let dir = tempfile::tempdir().unwrap();
    let src = write_pack(dir.path(), true);
    let folder = dir.path().join("exported");
    let text = ok(&gs_pack(&[
        "export",
        s(&src),
        "-o",
        s(&folder),
        "--format",
        "colmap",
    ]));
    assert!(text.contains("500 SfM points"), "{text}");
    assert!(text.contains("8 PINHOLE cameras"), "{text}");
    assert!(text.contains("is NOT every 8th image by name"), "{text}");
    // The test pack's principal points are (0.3, −0.7) px off centre.
    assert!(
        text.contains("principal points lie up to 0.70 px off"),
        "{text}"
    );
    let sparse = folder.join("sparse/0");
    for f in [
        "cameras.bin",
        "images.bin",
        "points3D.bin",
        "test.txt",
        "depth_params.json",
    ] {
        assert!(sparse.join(f).is_file(), "{f}");
    }
    assert!(!folder.join("transforms.json").exists());
    let a = Pack::open(&src).unwrap();
    let stems = stems_of(&a);
    let ma = a.manifest();
    let test: Vec<String> = std::fs::read_to_string(sparse.join("test.txt"))
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    let want_test: Vec<String> = (0..8)
        .filter(|&i| ma.views[i].split == Split::Test)
        .map(|i| format!("{}.png", stems[i]))
        .collect();
    assert_eq!(test, want_test);

    let b = convert_back(&folder, &dir.path().join("back.pack"));
    // The split comes back by the importer's own rule (see test.txt above).
    assert_same_views(&a, &b, |i| format!("{}.png", stems[i]), false);
    let mb = b.manifest();
    assert!(!mb.scene.no_sfm_points);
    assert_eq!(points(&a), points(&b));

    // A pack without SfM points: the random initial points go to points3D.bin.
    let bare = write_pack(&dir.path().join("bare"), false);
    let folder = dir.path().join("random");
    let text = ok(&gs_pack(&[
        "export",
        s(&bare),
        "-o",
        s(&folder),
        "--format",
        "colmap",
        "--random-points",
        "7",
    ]));
    assert!(text.contains("100000 random initial points"), "{text}");
    let back = dir.path().join("random.pack");
    ok(&gs_pack(&["convert", s(&folder), "-o", s(&back)]));
    let want =
        ramsplat::train::run::initial_gaussians(&Pack::open(&bare).unwrap(), 0, usize::MAX, 7)
            .unwrap();
    let got = points(&Pack::open(&back).unwrap());
    assert_eq!(got.len(), want.len());
    assert!(got.iter().zip(&want.means).all(|((p, _), m)| p == m));
}

/// `--centre-principal-point`: every view comes back (through either layout) as the window of
/// its pixels, mask and depth plane around its principal point, with the same focal lengths,
/// pose and depth scale, and a principal point moved by the window's corner to within 0.25 px
/// of the new centre. A principal point on the border is refused before anything is written.
#[test]
fn centring_crops_every_plane_around_the_principal_point() {
    use ramsplat::export::nerfstudio::Crop;
    let dir = tempfile::tempdir().unwrap();
    let src = write_pack(dir.path(), true);
    let a = Pack::open(&src).unwrap();
    let ma = a.manifest();
    let stems = stems_of(&a);
    for format in ["colmap", "nerfstudio"] {
        let folder = dir.path().join(format);
        let text = ok(&gs_pack(&[
            "export",
            s(&src),
            "-o",
            s(&folder),
            "--format",
            format,
            "--centre-principal-point",
        ]));
        // The test pack's principal points are (0.3, −0.7) px off centre: every view loses a
        // column and a row, and its principal point ends 0.2 px off along both axes.
        assert!(text.contains("8 views cropped"), "{text}");
        assert!(text.contains("now lie up to 0.20 px off"), "{text}");
        assert!(!text.contains("--centre-principal-point crops"), "{text}");
        let b = convert_back(&folder, &dir.path().join(format!("{format}.pack")));
        let mb = b.manifest();
        assert_eq!(mb.views.len(), ma.views.len());
        for (i, va) in ma.views.iter().enumerate() {
            let want = match format {
                "colmap" => format!("{}.png", stems[i]),
                _ => format!("images/{}.png", stems[i]),
            };
            let j = mb.views.iter().position(|v| v.name == want).unwrap();
            let vb = &mb.views[j];
            let (ca, cb) = (va.camera, vb.camera);
            let c = Crop::centring(&ca).unwrap();
            assert_eq!((c.x0, c.y0), (1, 0), "{}", va.name);
            assert_eq!((cb.width, cb.height), (ca.width - 1, ca.height - 1));
            let (ka, kb) = (ca.intrinsics, cb.intrinsics);
            assert_eq!((kb.fx, kb.fy), (ka.fx, ka.fy), "{}", va.name);
            assert!(close(kb.cx, ka.cx - 1.0) && close(kb.cy, ka.cy), "{kb:?}");
            assert!((kb.cx - cb.width as f64 / 2.0).abs() <= 0.25, "{kb:?}");
            assert!((kb.cy - cb.height as f64 / 2.0).abs() <= 0.25, "{kb:?}");
            for r in 0..3 {
                assert!(close(
                    ca.world_to_camera.translation[r],
                    cb.world_to_camera.translation[r]
                ));
            }
            assert_eq!(va.layout(), vb.layout(), "{}", va.name);
            assert_eq!(va.depth, vb.depth, "{}", va.name);
            // Each plane of the original, pixel (x, y) for x in 1..w, y in 0..h−1, in order.
            let (w, h) = (ca.width as usize, ca.height as usize);
            let layout = va.layout();
            let all = decoded(&a, i);
            let planes = layout.planes(&all, ca.width, ca.height).unwrap();
            let window = |plane: &[u8], bpp: usize| -> Vec<u8> {
                let mut out = Vec::new();
                for y in 0..h - 1 {
                    for x in 1..w {
                        let at = (y * w + x) * bpp;
                        out.extend_from_slice(&plane[at..at + bpp]);
                    }
                }
                out
            };
            let mut want = window(planes.pixels, if layout.alpha { 4 } else { 3 });
            if let Some(m) = planes.mask {
                want.extend(window(m, 1));
            }
            if let Some(d) = planes.depth {
                want.extend(window(d, 2));
            }
            assert_eq!(decoded(&b, j), want, "pixels of {}", va.name);
        }
    }

    // A principal point a fifth of a pixel from the left border has no centred window.
    let edge = dir.path().join("edge.pack");
    let mut w = PackWriter::create(&edge, &WriterOptions::default()).unwrap();
    let camera = Camera {
        width: 6,
        height: 4,
        intrinsics: Intrinsics {
            fx: 5.0,
            fy: 5.0,
            cx: 0.2,
            cy: 2.0,
        },
        world_to_camera: Pose::IDENTITY,
        projection: Projection::Pinhole,
    };
    let bytes = vec![7u8; 6 * 4 * 3];
    let layout = PixelLayout::default();
    w.add_encoded_view(
        encode_view_depth(
            "cam.png",
            &camera,
            Split::Train,
            &bytes,
            layout,
            None,
            Codec::Zstd,
            3,
        )
        .unwrap(),
    )
    .unwrap();
    w.finish(SourceInfo::generated("export test")).unwrap();
    let out = dir.path().join("edge-out");
    let o = gs_pack(&[
        "export",
        s(&edge),
        "-o",
        s(&out),
        "--format",
        "colmap",
        "--center-principal-point",
    ]);
    let e = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(
        e.contains("view \"cam.png\": its principal point (0.2, 2)")
            && e.contains("export without --centre-principal-point"),
        "{e}"
    );
    assert!(!out.exists());
    assert!(std::fs::read_dir(dir.path()).unwrap().all(|e| !e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .contains("partial")));
}

/// Fisheye views (the ideal equidistant fisheye) export as OpenCV's fisheye model with zero
/// coefficients and come back through `gs-pack convert --keep-fisheye` as the same views: the
/// same pixels, masks and depth planes byte for byte (an ideal lens is copied), intrinsics,
/// poses and projections, in every layout, whether every view is a fisheye or only some are.
/// nerfstudio's `camera_model` is at the top level when every view has it, else in the
/// fisheye views' frames. Without `--keep-fisheye` the fisheye views come back as pinhole.
#[test]
fn fisheye_views_round_trip_through_both_layouts() {
    use ramsplat::import::colmap::{read_model, Encoding};
    let dir = tempfile::tempdir().unwrap();
    let fisheye = |i: usize| {
        if i.is_multiple_of(2) {
            Projection::Fisheye
        } else {
            Projection::Pinhole
        }
    };
    for (kind, all) in [("mixed", false), ("all", true)] {
        let root = dir.path().join(kind);
        let src = write_pack_as(&root, true, |i| {
            if all {
                Projection::Fisheye
            } else {
                fisheye(i)
            }
        });
        let a = Pack::open(&src).unwrap();
        let stems = stems_of(&a);
        let is_fisheye = |i: usize| all || i.is_multiple_of(2);
        let fisheye_views = (0..8).filter(|&i| is_fisheye(i)).count();

        // nerfstudio.
        let folder = root.join("nerfstudio");
        ok(&gs_pack(&["export", s(&src), "-o", s(&folder)]));
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(folder.join("transforms.json")).unwrap())
                .unwrap();
        let top = if all { "OPENCV_FISHEYE" } else { "PINHOLE" };
        assert_eq!(doc["camera_model"], top, "{kind}");
        for f in doc["frames"].as_array().unwrap() {
            let j = (0..8)
                .find(|&j| f["file_path"] == format!("images/{}.png", stems[j]))
                .unwrap();
            for k in ["k1", "k2", "k3", "k4"] {
                match is_fisheye(j) {
                    true => assert_eq!(f[k].as_f64(), Some(0.0), "{kind} {j} {k}"),
                    false => assert!(f.get(k).is_none(), "{kind} {j} {k}"),
                }
            }
            let per_frame = f.get("camera_model").and_then(|m| m.as_str());
            let want = (!all && is_fisheye(j)).then_some("OPENCV_FISHEYE");
            assert_eq!(per_frame, want, "{kind} frame {j}");
        }
        let b = convert_back_with(&folder, &root.join("nerfstudio.pack"), &["--keep-fisheye"]);
        assert_same_views(&a, &b, |i| format!("images/{}.png", stems[i]), true);
        assert_same_projections(&a, &b, |i| format!("images/{}.png", stems[i]));

        // COLMAP.
        let folder = root.join("colmap");
        let text = ok(&gs_pack(&[
            "export",
            s(&src),
            "-o",
            s(&folder),
            "--format",
            "colmap",
        ]));
        let want = if all {
            "8 OPENCV_FISHEYE cameras (fisheye views, k1..k4 = 0)".to_owned()
        } else {
            format!(
                "{} PINHOLE cameras and {fisheye_views} OPENCV_FISHEYE cameras",
                8 - fisheye_views
            )
        };
        assert!(text.contains(&want), "{want:?} not in {text}");
        let model = read_model(&folder.join("sparse/0"), Encoding::Binary).unwrap();
        assert_eq!(model.cameras.len(), 8);
        for c in &model.cameras {
            match c.model_id {
                5 => assert_eq!(&c.params[4..], &[0.0; 4]),
                1 => assert_eq!(c.params.len(), 4),
                m => panic!("camera model {m}"),
            }
        }
        assert_eq!(
            model.cameras.iter().filter(|c| c.model_id == 5).count(),
            fisheye_views
        );
        let b = convert_back_with(&folder, &root.join("colmap.pack"), &["--keep-fisheye"]);
        assert_same_views(&a, &b, |i| format!("{}.png", stems[i]), false);
        assert_same_projections(&a, &b, |i| format!("{}.png", stems[i]));

        // Without --keep-fisheye every view comes back as a pinhole view.
        let b = convert_back(&folder, &root.join("pinhole.pack"));
        assert!(b
            .manifest()
            .views
            .iter()
            .all(|v| v.camera.projection == Projection::Pinhole));
    }

    // --centre-principal-point crops a fisheye view like a pinhole one, keeping the
    // projection: the window of the original's pixels, the principal point moved with it.
    let root = dir.path().join("centred");
    let src = write_pack_as(&root, false, |_| Projection::Fisheye);
    let a = Pack::open(&src).unwrap();
    let stems = stems_of(&a);
    let folder = root.join("colmap");
    let text = ok(&gs_pack(&[
        "export",
        s(&src),
        "-o",
        s(&folder),
        "--format",
        "colmap",
        "--centre-principal-point",
    ]));
    assert!(text.contains("8 views cropped"), "{text}");
    let b = convert_back_with(&folder, &root.join("back.pack"), &["--keep-fisheye"]);
    let (ma, mb) = (a.manifest(), b.manifest());
    for (i, va) in ma.views.iter().enumerate() {
        let j = mb
            .views
            .iter()
            .position(|v| v.name == format!("{}.png", stems[i]))
            .unwrap();
        let (ca, cb) = (va.camera, mb.views[j].camera);
        assert_eq!(cb.projection, Projection::Fisheye);
        // One column off the left, one row off the bottom (see the centring test).
        let want = ca.cropped(1, 0, ca.width - 1, ca.height - 1);
        assert_eq!((cb.width, cb.height), (want.width, want.height));
        assert!(close(cb.intrinsics.cx, want.intrinsics.cx));
        assert!(close(cb.intrinsics.cy, want.intrinsics.cy));
        assert_eq!(
            (cb.intrinsics.fx, cb.intrinsics.fy),
            (ca.intrinsics.fx, ca.intrinsics.fy)
        );
        let (w, h) = (ca.width as usize, ca.height as usize);
        let layout = va.layout();
        let bpp = if layout.alpha { 4 } else { 3 };
        let all = decoded(&a, i);
        let planes = layout.planes(&all, ca.width, ca.height).unwrap();
        let mut want = Vec::new();
        for y in 0..h - 1 {
            want.extend_from_slice(&planes.pixels[(y * w + 1) * bpp..(y * w + w) * bpp]);
        }
        let got = decoded(&b, j);
        assert_eq!(&got[..want.len()], &want[..], "pixels of {}", va.name);
    }
}

/// Every view of `a` has the projection of its namesake in `b`.
fn assert_same_projections(a: &Pack, b: &Pack, name_in_b: impl Fn(usize) -> String) {
    let mb = b.manifest();
    for (i, va) in a.manifest().views.iter().enumerate() {
        let vb = mb.views.iter().find(|v| v.name == name_in_b(i)).unwrap();
        assert_eq!(va.camera.projection, vb.camera.projection, "{}", va.name);
    }
}

#[test]
fn random_points_are_the_ones_gs_train_starts_from() {
    let dir = tempfile::tempdir().unwrap();
    let src = write_pack(dir.path(), false);
    let folder = dir.path().join("exported");
    let text = ok(&gs_pack(&[
        "export",
        s(&src),
        "-o",
        s(&folder),
        "--random-points",
        "7",
    ]));
    assert!(
        text.contains("100000 random initial points (gs-train --seed 7)"),
        "{text}"
    );
    let back = dir.path().join("back.pack");
    ok(&gs_pack(&["convert", s(&folder), "-o", s(&back)]));
    let pack = Pack::open(&src).unwrap();
    let want = ramsplat::train::run::initial_gaussians(&pack, 0, usize::MAX, 7).unwrap();
    let got = points(&Pack::open(&back).unwrap());
    assert_eq!(got.len(), want.len());
    for (k, ((p, _), m)) in got.iter().zip(&want.means).enumerate() {
        assert_eq!(p, m, "point {k}");
    }
    // Another seed, other points; a pack with SfM points refuses the option.
    let other = ramsplat::train::run::initial_gaussians(&pack, 0, usize::MAX, 8).unwrap();
    assert_ne!(other.means[0], want.means[0]);
    let with_sfm = write_pack(&dir.path().join("sfm"), true);
    let o = gs_pack(&[
        "export",
        s(&with_sfm),
        "-o",
        s(&dir.path().join("x")),
        "--random-points",
        "1",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("drop --random-points"));
    assert!(!dir.path().join("x").exists());
}

/// Nothing is written over anything, into the pack, or from a damaged pack; no partial
/// folder is left behind.
#[test]
fn refusals_leave_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let src = write_pack(dir.path(), true);
    let refused = |args: &[&str], needle: &str| {
        let o = gs_pack(args);
        let e = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(o.status.code(), Some(1), "{e}");
        assert!(e.contains(needle), "missing {needle:?} in {e}");
    };
    let existing = dir.path().join("existing");
    std::fs::create_dir(&existing).unwrap();
    std::fs::write(existing.join("keep.txt"), "mine").unwrap();
    refused(
        &["export", s(&src), "-o", s(&existing)],
        "already exists; export into a new folder",
    );
    assert_eq!(
        std::fs::read_to_string(existing.join("keep.txt")).unwrap(),
        "mine"
    );
    // A partial folder of a killed export (a process that no longer runs) is cleared by the
    // next export into the same destination.
    let stale = dir.path().join(".fresh.partial-999999999");
    std::fs::create_dir(&stale).unwrap();
    ok(&gs_pack(&[
        "export",
        s(&src),
        "-o",
        s(&dir.path().join("fresh")),
    ]));
    assert!(!stale.exists());
    let inside = src.join("out");
    refused(&["export", s(&src), "-o", s(&inside)], "is inside the pack");
    assert!(!inside.exists());

    // Damage one payload byte of the last view's record.
    let record = Pack::open(&src).unwrap().manifest().views[NAMES.len() - 1].record;
    let shard = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "gss"))
        .unwrap();
    let mut bytes = std::fs::read(&shard).unwrap();
    let at = (record.offset + ramsplat::shard::RECORD_HEADER_LEN + 2) as usize;
    bytes[at] ^= 0x40;
    std::fs::write(&shard, bytes).unwrap();
    let out = dir.path().join("from-damaged");
    let o = gs_pack(&["export", s(&src), "-o", s(&out)]);
    let e = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(
        e.contains("reading the pack") && e.contains("src.pack") && e.contains("z.png"),
        "{e}"
    );
    assert!(!out.exists());
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("partial"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}
