//! Fuzz target for the SOG reader: the input is either a whole `.sog` archive (when it starts
//! with `PK`) or, so that mutations reach past the archive's CRC-32s, the members of one:
//! `meta.json` and the images in the order of [`MEMBERS`], each preceded by its length as a
//! little-endian u32 (a member the input runs out before is left out). Either way the reader
//! must give a model or a typed error, never a panic, a hang or an allocation the input cannot
//! back; a decoded model must be consistent, finite and free of zero rotations, and re-encode.
//!
//! Run: `RUSTC_BOOTSTRAP=1 cargo fuzz run sog corpus/sog seeds/sog` from `fuzz/` (see
//! fuzz/README.md).
#![no_main]

use libfuzzer_sys::fuzz_target;
use ramsplat::export::{sog, validate_model, zip};

const MEMBERS: [&str; 8] = [
    "meta.json",
    "means_l.webp",
    "means_u.webp",
    "quats.webp",
    "scales.webp",
    "sh0.webp",
    "shN_centroids.webp",
    "shN_labels.webp",
];

fuzz_target!(|data: &[u8]| {
    let bundle;
    let bytes = if data.starts_with(b"PK") {
        data
    } else {
        let mut parts: Vec<(&str, &[u8])> = Vec::new();
        let mut rest = data;
        for name in MEMBERS {
            let Some((len, tail)) = rest.split_first_chunk::<4>() else { break };
            let len = (u32::from_le_bytes(*len) as usize).min(tail.len());
            parts.push((name, &tail[..len]));
            rest = &tail[len..];
        }
        let mut out = Vec::new();
        zip::write_stored(&mut out, &parts).expect("small members");
        bundle = out;
        &bundle
    };
    if let Ok(g) = sog::decode(bytes) {
        validate_model(&g).expect("a decoded model is consistent and finite");
        assert!(
            g.rotations.iter().all(|q| q.iter().any(|&c| c != 0.0)),
            "a decoded rotation is all zero"
        );
        let _ = sog::encode(&g);
    }
});
