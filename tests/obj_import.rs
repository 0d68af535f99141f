//! Wavefront OBJ meshes as point clouds (`import::obj`): a mesh written from a synthetic
//! scene's surface gives its vertices, bit for bit, as the points training starts from
//! (`gs-pack convert SCENE --points mesh.obj`) and as a cloud pack of its own (`gs-pack
//! convert mesh.obj`).

use std::fmt::Write as _;

#[path = "common/gs_pack.rs"]
mod gs_pack;
use gs_pack::{gs_pack, packed, scene_and_surface, text};

#[test]
fn mesh_vertices_seed_a_dataset_and_pack_as_a_cloud() {
    let tmp = tempfile::tempdir().unwrap();
    let (scene, dense) = scene_and_surface(tmp.path());
    // The surface as a mesh: its points as coloured vertices (colours in [0, 1], as MeshLab
    // and Meshroom write them), with texture coordinates, normals and triangles between them.
    let mut obj = String::from("# a mesh\nmtllib texturedMesh.mtl\nusemtl material0\n");
    for (xyz, rgb) in &dense {
        let c = rgb.map(|v| f64::from(v) / 255.0);
        writeln!(
            obj,
            "v {:?} {:?} {:?} {} {} {}",
            xyz[0], xyz[1], xyz[2], c[0], c[1], c[2]
        )
        .unwrap();
        obj.push_str("vt 0.25 0.75\nvn 0 0 1\n");
    }
    for k in 0..dense.len() / 3 {
        let (a, b, c) = (3 * k + 1, 3 * k + 2, 3 * k + 3);
        writeln!(obj, "f {a}/{a}/{a} {b}/{b}/{b} {c}/{c}/{c}").unwrap();
    }
    std::fs::write(scene.join("texturedMesh.obj"), obj).unwrap();

    let pack = tmp.path().join("seeded.pack");
    let o = gs_pack(&[
        "convert",
        scene.to_str().unwrap(),
        "-o",
        pack.to_str().unwrap(),
        "--points",
        "texturedMesh.obj",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("its 2500 points replace the dataset's 300 SfM points")
            && err.contains("(100.0 % of a sample in view)"),
        "{err}"
    );
    let want: Vec<_> = dense.iter().map(|(xyz, rgb)| (*xyz, *rgb, None)).collect();
    assert_eq!(packed(&pack, 0), want);

    // The mesh alone: a cloud pack named by its stem, told by its extension.
    let cloud = tmp.path().join("cloud.pack");
    let mesh = scene.join("texturedMesh.obj");
    let o = gs_pack(&[
        "convert",
        mesh.to_str().unwrap(),
        "-o",
        cloud.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let p = ramsplat::shard::reader::Pack::open(&cloud).unwrap();
    assert_eq!(p.manifest().source.format, ramsplat::dataset::Format::Obj);
    assert_eq!(p.manifest().clouds[0].name, "texturedMesh");
    assert_eq!(packed(&cloud, 0), want);
}
