//! The RealityCapture importer (`gs-pack convert --format realitycapture`): XMP files written
//! from `gs-pack synth`'s exact cameras must pack the same cameras, pixels and (with
//! `--points`) points as the equivalent COLMAP workspace (OPENCV lens), for landscape and
//! portrait photos; hostile files must be refused with a message naming the file, the line and
//! the fault.

use std::path::Path;

use ramsplat::dataset::Format;
use ramsplat::import::colmap::ColmapModel;
use ramsplat::import::{open, ImportOptions};
use ramsplat::scene::camera::Pose;
use ramsplat::shard::reader::Pack;

#[path = "common/gs_pack.rs"]
mod gs_pack;
use gs_pack::{
    chain, convert_full_size, holds_model_points, model_points_ply, same_camera, synth_colmap, text,
};

const VIEWS: usize = 6;
const F: f64 = 61.75;
/// OPENCV's k1, k2, p1, p2.
const LENS: [f64; 4] = [-0.04, 0.006, 0.001, -0.0005];
/// The principal point's offset from the image centre, in pixels (exact in RealityCapture's
/// units, a fraction of the longer side of 64 pixels).
const PP_OFFSET: [f64; 2] = [0.5, -0.25];

/// The properties a registered camera's XMP file gives, as attributes; with `elements`,
/// `Rotation` and `Position` as child elements (as RealityScan 2 writes them).
fn xmp(rotation: &[[f64; 3]; 3], position: [f64; 3], calibration: &str, elements: bool) -> String {
    let r: Vec<String> = rotation
        .iter()
        .flatten()
        .map(|v| format!("{v:e}"))
        .collect();
    let c: Vec<String> = position.iter().map(|v| format!("{v:e}")).collect();
    let (attrs, children) = if elements {
        (
            String::new(),
            format!(
                "<xcr:Position>{}</xcr:Position>\n<xcr:Rotation>{}</xcr:Rotation>\n",
                c.join(" "),
                r.join(" ")
            ),
        )
    } else {
        (
            format!(
                " xcr:Rotation=\"{}\" xcr:Position=\"{}\"",
                r.join(" "),
                c.join(" ")
            ),
            String::new(),
        )
    };
    format!(
        "<x:xmpmeta xmlns:x=\"adobe:ns:meta/\">\n<rdf:RDF \
         xmlns:rdf=\"http://www.w3.org/1999/02/22-rdf-syntax-ns#\">\n<rdf:Description \
         xmlns:xcr=\"http://www.capturingreality.com/ns/xcr/1.1#\" xcr:Version=\"3\" \
         xcr:PosePrior=\"initial\" xcr:Coordinates=\"absolute\" {calibration}{attrs}>\n\
         {children}</rdf:Description>\n</rdf:RDF>\n</x:xmpmeta>\n"
    )
}

/// A calibration of `w × h` photos with focal length `F`, the principal point at
/// `PP_OFFSET` from the centre and the OPENCV lens `LENS`, in RealityCapture's terms.
fn calibration(w: u32, h: u32) -> String {
    let side = f64::from(w.max(h));
    let [k1, k2, p1, p2] = LENS;
    // RealityCapture's t1 is OpenCV's p2.
    format!(
        "xcr:DistortionModel=\"brown3t2\" xcr:DistortionCoeficients=\"{k1} {k2} 0 0 {p2} {p1}\" \
         xcr:FocalLength35mm=\"{}\" xcr:Skew=\"0\" xcr:AspectRatio=\"1\" \
         xcr:PrincipalPointU=\"{}\" xcr:PrincipalPointV=\"{}\" xcr:CalibrationPrior=\"initial\"",
        F * 36.0 / side,
        PP_OFFSET[0] / side,
        PP_OFFSET[1] / side
    )
}

/// Synthesises a COLMAP workspace at `dir` of `w × h` photos with an OPENCV lens, and writes
/// the same cameras as XMP files beside the photos in `dir/images` (half of them with the
/// pose as child elements), plus an unregistered photo's XMP file, another program's sidecar
/// and the SfM points as `points.ply`.
fn write_xmps(dir: &Path, w: u32, h: u32) -> ColmapModel {
    let [k1, k2, p1, p2] = LENS;
    let camera = format!(
        "1 OPENCV {w} {h} {F} {F} {} {} {k1} {k2} {p1} {p2}",
        f64::from(w) / 2.0 + PP_OFFSET[0],
        f64::from(h) / 2.0 + PP_OFFSET[1],
    );
    let model = synth_colmap(dir, [VIEWS as u32, w, h, 200, 3], false, &camera);
    let images = dir.join("images");
    for (i, im) in model.images.iter().enumerate() {
        let pose = Pose::from_quaternion_wxyz(im.qvec, im.tvec).unwrap();
        let stem = im.name.rsplit_once('.').unwrap().0;
        let text = xmp(
            &pose.rotation,
            pose.centre(),
            &calibration(w, h),
            i % 2 == 1,
        );
        std::fs::write(images.join(format!("{stem}.xmp")), text).unwrap();
    }
    // A photo RealityCapture did not align: its file holds the calibration prior only.
    image::RgbImage::from_pixel(w, h, image::Rgb([1, 2, 3]))
        .save(images.join("stray.png"))
        .unwrap();
    std::fs::write(
        images.join("stray.xmp"),
        xmp(
            &[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]],
            [0.0; 3],
            "",
            false,
        )
        .replace(" xcr:Rotation=\"1e0 0e0 0e0 0e0 1e0 0e0 0e0 0e0 1e0\"", ""),
    )
    .unwrap();
    // Another program's sidecar of a photo.
    std::fs::write(
        images.join("edited.xmp"),
        "<x:xmpmeta xmlns:x=\"adobe:ns:meta/\"><rdf:RDF \
         xmlns:rdf=\"http://www.w3.org/1999/02/22-rdf-syntax-ns#\"><rdf:Description \
         xmlns:crs=\"http://ns.adobe.com/camera-raw-settings/1.0/\" crs:Exposure2012=\"0.5\"/>\
         </rdf:RDF></x:xmpmeta>",
    )
    .unwrap();
    std::fs::write(images.join("points.ply"), model_points_ply(&model)).unwrap();
    model
}

/// Converts the COLMAP workspace and its XMP export of `w × h` photos, and checks that they
/// pack the same views, cameras, pixels and points.
fn packs_like_colmap(w: u32, h: u32) {
    let tmp = tempfile::tempdir().unwrap();
    let scene = tmp.path().join("scene");
    let model = write_xmps(&scene, w, h);
    let colmap_pack = tmp.path().join("colmap.pack");
    let o = convert_full_size(&scene, &colmap_pack, &["--format", "colmap"]);
    assert!(o.status.success(), "{}", text(&o));
    // The photos' folder, its format told by its XMP files (the PLY beside them is the
    // cloud they are given, not the dataset).
    let rc_pack = tmp.path().join("rc.pack");
    let o = convert_full_size(&scene.join("images"), &rc_pack, &["--points", "points.ply"]);
    assert!(o.status.success(), "{}", text(&o));
    let all = text(&o);
    for want in [
        "1 of 8 .xmp files hold no RealityCapture data",
        "1 of 8 .xmp files have no pose",
    ] {
        assert!(all.contains(want), "missing {want:?} in: {all}");
    }

    let a = Pack::open(&colmap_pack).unwrap();
    let b = Pack::open(&rc_pack).unwrap();
    let (ma, mb) = (a.manifest(), b.manifest());
    assert_eq!(mb.source.format, Format::Realitycapture);
    assert_eq!(mb.views.len(), VIEWS);
    for (i, (va, vb)) in ma.views.iter().zip(&mb.views).enumerate() {
        assert_eq!(va.name, vb.name, "view {i}");
        let (pa, pb) = same_camera(&a, &b, i, 1e-12);
        assert!(pa == pb, "view {i}: the packed pixels differ");
    }
    holds_model_points(&rc_pack, &model);
}

#[test]
fn xmp_files_pack_like_their_colmap_workspace() {
    packs_like_colmap(64, 48);
}

/// A portrait photo's 35 mm-equivalent focal length and principal point are relative to its
/// longer side, its height.
#[test]
fn portrait_photos_scale_by_their_longer_side() {
    packs_like_colmap(48, 64);
}

/// Without `--points` the note says where points come from, naming the lone PLY of the
/// folder; `--format realityscan` names the same importer.
#[test]
fn without_points_the_note_names_the_folder_cloud() {
    let tmp = tempfile::tempdir().unwrap();
    let scene = tmp.path().join("scene");
    write_xmps(&scene, 64, 48);
    let o = convert_full_size(
        &scene.join("images"),
        &tmp.path().join("rc.pack"),
        &["--format", "realityscan"],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("pass --points points.ply"),
        "{}",
        text(&o)
    );
}

/// Imports the folder `dir` holding `files` (name, text) and 40×30 PNG photos named
/// `photos`, giving the error's whole chain on failure.
fn import_xmps(dir: &Path, files: &[(&str, String)], photos: &[&str]) -> Result<usize, String> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    for name in photos {
        let img = image::RgbImage::from_pixel(40, 30, image::Rgb([9, 8, 7]));
        img.save(dir.join(name)).unwrap();
    }
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    open(dir, Format::Auto, &ImportOptions::default())
        .map(|s| s.views.len())
        .map_err(|e| chain(&e))
}

#[test]
fn hostile_xmp_files_are_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("x");
    const R: [[f64; 3]; 3] = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
    const CAL: &str = "xcr:FocalLength35mm=\"30\" xcr:DistortionModel=\"brown3\" \
                       xcr:DistortionCoeficients=\"0.01 0 0 0 0 0\"";
    let ok = xmp(&R, [0.0, 0.0, -5.0], CAL, false);
    assert_eq!(
        import_xmps(&dir, &[("a.xmp", ok.clone())], &["a.png"]),
        Ok(1)
    );
    let refused = |text: String, photos: &[&str], want: &[&str]| {
        let e = import_xmps(&dir, &[("a.xmp", text)], photos).unwrap_err();
        for w in want {
            assert!(e.contains(w), "missing {w:?} in: {e}");
        }
    };
    let with_cal = |cal: &str| xmp(&R, [0.0, 0.0, -5.0], cal, false);
    refused(
        with_cal("xcr:FocalLength35mm=\"30\" xcr:DistortionModel=\"division\" xcr:DistortionCoeficients=\"-0.2 0 0 0 0 0\""),
        &["a.png"],
        &["a.xmp: line 3:", "the division lens model (k = -0.2) is not supported", "Brown3"],
    );
    refused(
        with_cal("xcr:FocalLength35mm=\"30\" xcr:DistortionModel=\"rationalP2D1\""),
        &["a.png"],
        &["\"rationalP2D1\" is not supported"],
    );
    refused(
        with_cal("xcr:FocalLength35mm=\"30\" xcr:DistortionModel=\"fisheye9\""),
        &["a.png"],
        &["unknown xcr:DistortionModel \"fisheye9\""],
    );
    refused(
        with_cal("xcr:FocalLength35mm=\"30\" xcr:DistortionModel=\"brown3\" xcr:DistortionCoeficients=\"0 0 0 0.5 0 0\""),
        &["a.png"],
        &["gives k4 = 0.5 but the lens model \"brown3\" has no such term, so"],
    );
    refused(
        with_cal("xcr:FocalLength35mm=\"30\" xcr:DistortionCoeficients=\"0 0 0\""),
        &["a.png"],
        &["xcr:DistortionCoeficients holds 3 numbers", "not 6"],
    );
    refused(
        with_cal("xcr:FocalLength35mm=\"inf\""),
        &["a.png"],
        &["xcr:FocalLength35mm: \"inf\" is not a finite number"],
    );
    refused(
        with_cal("xcr:FocalLength35mm=\"-3\""),
        &["a.png"],
        &["xcr:FocalLength35mm is -3, not a positive focal length"],
    );
    refused(with_cal(""), &["a.png"], &["without xcr:FocalLength35mm"]);
    refused(
        with_cal("xcr:FocalLength35mm=\"30\" xcr:Skew=\"0.01\""),
        &["a.png"],
        &["xcr:Skew is 0.01: a skewed camera is not supported"],
    );
    refused(
        ok.replace("\"absolute\"", "\"rigid\""),
        &["a.png"],
        &["xcr:Coordinates is \"rigid\"", "only absolute coordinates"],
    );
    refused(
        ok.replace(
            "</rdf:Description>",
            "<xcr:FocalLength35mm>31</xcr:FocalLength35mm></rdf:Description>",
        ),
        &["a.png"],
        &["xcr:FocalLength35mm is given twice, as \"30\" (line 3) and as \"31\""],
    );
    refused(
        ok.replace("</rdf:RDF>", "</rdf:RDX>"),
        &["a.png"],
        &["a.xmp: line 5: not well-formed XML"],
    );
    refused(
        xmp(
            &[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 2.0]],
            [0.0; 3],
            CAL,
            false,
        ),
        &["a.png"],
        &["the camera of a.png: invalid camera"],
    );
    refused(
        ok.clone(),
        &["a.png", "a.jpg"],
        &["2 photos have its stem (a.jpg, a.png)"],
    );
    // A photo whose stem differs in case only is the XMP file's when it is the only one.
    assert_eq!(
        import_xmps(&dir, &[("a.xmp", ok.clone())], &["A.png"]),
        Ok(1)
    );
    // The exact stem first; two stems that differ from it in case only are no match.
    assert_eq!(
        import_xmps(&dir, &[("a.xmp", ok.clone())], &["A.png", "a.jpg"]),
        Ok(1)
    );
    let e = import_xmps(&dir, &[("ab.xmp", ok.clone())], &["AB.png", "Ab.png"]).unwrap_err();
    assert!(e.contains("none with a photo"), "{e}");
    // A TIFF photo (its bytes do not matter: it is refused by its extension).
    std::fs::create_dir_all(&dir).unwrap();
    let e = import_xmps(&dir, &[("a.xmp", ok.clone()), ("a.tif", "II*".into())], &[]).unwrap_err();
    assert!(
        e.contains("a.tif: the photo of a.xmp is not a PNG, JPEG or WebP file"),
        "{e}"
    );
    // Only unregistered cameras; only other programs' sidecars; a missing photo.
    let unregistered = ok.replace(" xcr:Rotation=\"1e0 0e0 0e0 0e0 1e0 0e0 0e0 0e0 1e0\"", "");
    assert_ne!(unregistered, ok);
    let e = import_xmps(&dir, &[("a.xmp", unregistered)], &["a.png"]).unwrap_err();
    assert!(
        e.contains("none of the 1 .xmp files holds a registered camera"),
        "{e}"
    );
    let foreign = "<x:xmpmeta xmlns:x=\"adobe:ns:meta/\"/>".to_owned();
    let e = import_xmps(&dir, &[("a.xmp", foreign)], &["a.png"]).unwrap_err();
    assert!(e.contains("holds RealityCapture's camera data"), "{e}");
    let e = import_xmps(&dir, &[("a.xmp", ok.clone())], &[]).unwrap_err();
    assert!(
        e.contains("no usable camera: 1 registered cameras, none with a photo"),
        "{e}"
    );
    // A single XMP file is refused, naming the folder to pass instead.
    let e = open(&dir.join("a.xmp"), Format::Auto, &ImportOptions::default()).unwrap_err();
    assert!(chain(&e).contains("pass that folder"), "{}", chain(&e));
}
