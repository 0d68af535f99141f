//! The Bundler importer (`gs-pack convert --format bundler`): a `bundle.out` and `list.txt`
//! written from `gs-pack synth`'s exact cameras must pack the same cameras, pixels and points
//! as the equivalent COLMAP workspace (RADIAL), and hostile files must be refused with a
//! message naming the file, the line and the fault.

use std::fmt::Write as _;
use std::path::Path;

use ramsplat::dataset::Format;
use ramsplat::import::colmap::{parse_tracks_bytes, ColmapModel, Encoding};
use ramsplat::import::{open, ImportOptions};
use ramsplat::scene::camera::Pose;
use ramsplat::shard::reader::Pack;

#[path = "common/gs_pack.rs"]
mod gs_pack;
use gs_pack::{
    chain, convert_full_size, holds_model_points, same_camera, same_sfm_depth_planes, synth_colmap,
    text,
};

const W: u32 = 64;
const H: u32 = 48;
const VIEWS: usize = 7;
const F: f64 = 61.75;
const K: [f64; 2] = [-0.04, 0.006];

/// Synthesises a COLMAP workspace at `dir` with a RADIAL lens, and writes the same
/// reconstruction as `dir/bundle/bundle.out` with `dir/list.txt` (Bundler's layout), plus a
/// camera that was not registered (all zeros).
fn write_bundle(dir: &Path) -> ColmapModel {
    let camera = format!(
        "1 RADIAL {W} {H} {F} {} {} {} {}",
        f64::from(W) / 2.0,
        f64::from(H) / 2.0,
        K[0],
        K[1]
    );
    let model = synth_colmap(dir, [VIEWS as u32, W, H, 250, 8], true, &camera);
    let sparse = dir.join("sparse/0");
    let tracks = parse_tracks_bytes(
        &std::fs::read(sparse.join("points3D.txt")).unwrap(),
        Encoding::Text,
    )
    .unwrap();
    let camera_of: std::collections::HashMap<u32, usize> = model
        .images
        .iter()
        .enumerate()
        .map(|(i, im)| (im.id, i))
        .collect();
    let mut out = format!(
        "# Bundle file v0.3\n{} {}\n",
        model.images.len() + 1,
        model.points.len()
    );
    let mut list = String::new();
    for im in &model.images {
        let pose = Pose::from_quaternion_wxyz(im.qvec, im.tvec).unwrap();
        let r = pose.rotation;
        let t = pose.translation;
        // OpenCV's axes to Bundler's: negate the y and z rows.
        writeln!(out, "{F:e} {:e} {:e}", K[0], K[1]).unwrap();
        for (row, sign) in r.iter().zip([1.0, -1.0, -1.0]) {
            writeln!(
                out,
                "{:e} {:e} {:e}",
                sign * row[0],
                sign * row[1],
                sign * row[2]
            )
            .unwrap();
        }
        writeln!(out, "{:e} {:e} {:e}", t[0], -t[1], -t[2]).unwrap();
        // Bundler lists the image and, optionally, a focal length from EXIF.
        writeln!(list, "images/{} 0 {F}", im.name).unwrap();
    }
    out.push_str("0 0 0\n0 0 0\n0 0 0\n0 0 0\n0 0 0\n");
    list.push_str("images/unregistered.png\n");
    for (p, (_, track)) in model.points.iter().zip(&tracks) {
        writeln!(out, "{:e} {:e} {:e}", p.xyz[0], p.xyz[1], p.xyz[2]).unwrap();
        writeln!(out, "{} {} {}", p.rgb[0], p.rgb[1], p.rgb[2]).unwrap();
        // The view list: `camera key x y` per observation (keys and positions unused).
        write!(out, "{}", track.len()).unwrap();
        for (k, e) in track.iter().enumerate() {
            write!(out, " {} {k} 1.5 -2.25", camera_of[&e.image_id]).unwrap();
        }
        out.push('\n');
    }
    std::fs::create_dir_all(dir.join("bundle")).unwrap();
    std::fs::write(dir.join("bundle/bundle.out"), out).unwrap();
    std::fs::write(dir.join("list.txt"), list).unwrap();
    model
}

#[test]
fn bundle_packs_like_its_colmap_workspace() {
    let tmp = tempfile::tempdir().unwrap();
    let scene = tmp.path().join("scene");
    let model = write_bundle(&scene);
    let colmap_pack = tmp.path().join("colmap.pack");
    let o = convert_full_size(&scene, &colmap_pack, &["--format", "colmap"]);
    assert!(o.status.success(), "{}", text(&o));
    // The .out file itself, the format told by its extension.
    let bundle_pack = tmp.path().join("bundle.pack");
    let o = convert_full_size(&scene.join("bundle/bundle.out"), &bundle_pack, &[]);
    assert!(o.status.success(), "{}", text(&o));
    let all = text(&o);
    assert!(all.contains("1 of 8 cameras were not registered"), "{all}");

    let a = Pack::open(&colmap_pack).unwrap();
    let b = Pack::open(&bundle_pack).unwrap();
    let (ma, mb) = (a.manifest(), b.manifest());
    assert_eq!(mb.source.format, Format::Bundler);
    assert_eq!(mb.views.len(), VIEWS);
    for (i, (va, vb)) in ma.views.iter().zip(&mb.views).enumerate() {
        assert_eq!(format!("images/{}", va.name), vb.name, "view {i}");
        let (pa, pb) = same_camera(&a, &b, i, 1e-12);
        assert!(pa == pb, "view {i}: the packed pixels differ");
    }
    holds_model_points(&bundle_pack, &model);
}

/// `--sfm-depths` of a bundle, whose observations come from its points' view lists, packs the
/// same sparse depth planes as of the COLMAP workspace; a bundle whose view lists are all
/// empty is refused.
#[test]
fn sfm_depths_come_from_the_view_lists_as_from_colmap_tracks() {
    let tmp = tempfile::tempdir().unwrap();
    let scene = tmp.path().join("scene");
    write_bundle(&scene);
    let colmap_pack = tmp.path().join("colmap.pack");
    let o = convert_full_size(
        &scene,
        &colmap_pack,
        &["--format", "colmap", "--sfm-depths"],
    );
    assert!(o.status.success(), "{}", text(&o));
    let bundle_pack = tmp.path().join("bundle.pack");
    let bundle = scene.join("bundle/bundle.out");
    let o = convert_full_size(&bundle, &bundle_pack, &["--sfm-depths"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(same_sfm_depth_planes(&colmap_pack, &bundle_pack) > 100);
    // The same bundle with every view list emptied.
    let text_of = std::fs::read_to_string(&bundle).unwrap();
    let lines: Vec<&str> = text_of.lines().collect();
    let points_from = 2 + 5 * (VIEWS + 1);
    let emptied: Vec<&str> = lines
        .iter()
        .enumerate()
        .map(|(i, l)| {
            if i >= points_from && (i - points_from) % 3 == 2 {
                "0"
            } else {
                l
            }
        })
        .collect();
    std::fs::write(&bundle, emptied.join("\n") + "\n").unwrap();
    let o = convert_full_size(&bundle, &tmp.path().join("none.pack"), &["--sfm-depths"]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("every point's view list is empty"),
        "{}",
        text(&o)
    );
}

/// Imports `out` (written as `dir/bundle.out` beside `dir/list.txt` listing `images`, each a
/// 40×30 PNG in `dir`), giving the error's whole chain on failure.
fn import_bundle(dir: &Path, out: &str, images: &[&str]) -> Result<usize, String> {
    for name in images {
        let img = image::RgbImage::from_pixel(40, 30, image::Rgb([9, 8, 7]));
        img.save(dir.join(name)).unwrap();
    }
    std::fs::write(dir.join("bundle.out"), out).unwrap();
    std::fs::write(dir.join("list.txt"), images.join("\n")).unwrap();
    open(
        &dir.join("bundle.out"),
        Format::Bundler,
        &ImportOptions::default(),
    )
    .map(|s| s.views.len())
    .map_err(|e| chain(&e))
}

const CAM: &str = "30 0.01 0\n1 0 0\n0 1 0\n0 0 1\n0 0 -5\n";

#[test]
fn hostile_bundles_are_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let ok = format!("# Bundle file v0.3\n2 1\n{CAM}{CAM}0 0 0\n255 0 0\n1 1 0 2.5 3.5\n");
    assert_eq!(import_bundle(dir, &ok, &["a.png", "b.png"]), Ok(2));
    let refused = |out: String, images: &[&str], want: &[&str]| {
        let e = import_bundle(dir, &out, images).unwrap_err();
        for w in want {
            assert!(e.contains(w), "missing {w:?} in: {e}");
        }
    };
    refused(
        ok.clone(),
        &["a.png"],
        &["list.txt", "1 images listed", "2 cameras"],
    );
    refused(
        format!(
            "# Bundle file v0.3\n2 1\n{CAM}30 0 0\n1 0 0\n0 2 0\n0 0 1\n0 0 0\n0 0 0\n1 1 1\n0\n"
        ),
        &["a.png", "b.png"],
        &["bundle.out", "camera 1 (b.png), lines 8–12", "rotation"],
    );
    refused(
        format!("# Bundle file v0.3\n1 1\n{CAM}0 0 0\n1 1 1\n1 3 0 2.5 3.5\n"),
        &["a.png"],
        &[
            "bundle.out: line 10",
            "names camera \"3\", not one of the 1",
        ],
    );
    refused(
        format!("# Bundle file v0.3\n1 1\n{CAM}0 0 0\n1 1 1\n2 0 0 2.5\n"),
        &["a.png"],
        &["line 10", "2 observations need four numbers each"],
    );
    refused(
        format!("# Bundle file v0.3\n1 2\n{CAM}0 0 0\n1 1 1\n0\n"),
        &["a.png"],
        &["line 11", "ends where a point's position should be"],
    );
    refused(
        "# Bundle file v0.3\n1 0\n30 nan 0\n1 0 0\n0 1 0\n0 0 1\n0 0 -5\n".into(),
        &["a.png"],
        &["line 3", "\"nan\" is not a finite number"],
    );
    refused(
        "# Bundle file v0.3\n1 0\n-30 0 0\n1 0 0\n0 1 0\n0 0 1\n0 0 -5\n".into(),
        &["a.png"],
        &["line 3", "focal length -30 is negative"],
    );
    refused(
        "# Bundle file v0.3\n1 0 7\n".into(),
        &["a.png"],
        &["line 2", "more than 2 numbers"],
    );
    refused(
        "# Bundle file v0.3\n1 0\n0 0 0\n0 0 0\n0 0 0\n0 0 0\n0 0 0\n".into(),
        &["a.png"],
        &["no registered camera"],
    );
}

/// Every truncation of a valid bundle is refused, and seeded corruptions of it are read or
/// refused, never a panic.
#[test]
fn truncated_and_corrupted_bundles_are_refused_without_panicking() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let whole = format!(
        "# Bundle file v0.3\n2 2\n{CAM}{CAM}0 0 0\n255 0 0\n1 1 0 2.5 3.5\n1 2 3\n4 5 6\n0\n"
    );
    let images = ["a.png", "b.png"];
    assert_eq!(import_bundle(dir, &whole, &images), Ok(2));
    for n in 0..whole.len() - 1 {
        // A cut inside the last number of a line may still read as a number; a cut line
        // boundary never passes the counts.
        if whole.as_bytes()[n] == b'\n' {
            assert!(
                import_bundle(dir, &whole[..n], &images).is_err(),
                "cut at {n}"
            );
        }
    }
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let bytes = whole.as_bytes();
    let mut read = 0;
    for _ in 0..500 {
        let mut b = bytes.to_vec();
        for _ in 0..1 + next() % 3 {
            let i = (next() % b.len() as u64) as usize;
            b[i] = b"0123456789.-e \n#"[(next() % 16) as usize];
        }
        let text = String::from_utf8(b).unwrap();
        read += usize::from(import_bundle(dir, &text, &images).is_ok());
    }
    assert!(read < 500, "{read}");
}
