//! Fuzz target for JPEG view payloads (`shard::jpeg`): arbitrary bytes as a stored JPEG must
//! give pixels or an error, never a panic or a hang, and decoding must stay within the scratch
//! bound the frame gives (the pack's memory plan reserves it). Stripping is idempotent: the
//! kept bytes have the same frame and strip to themselves.
//!
//! Run: `RUSTC_BOOTSTRAP=1 cargo fuzz run jpeg corpus/jpeg seeds/jpeg` from `fuzz/` (see
//! fuzz/README.md).
#![no_main]

use libfuzzer_sys::fuzz_target;
use ramsplat::shard::jpeg;

fuzz_target!(|data: &[u8]| {
    let Ok((frame, kept)) = jpeg::strip(data) else {
        return;
    };
    assert_eq!(jpeg::frame(&kept).as_ref(), Ok(&frame));
    assert_eq!(jpeg::strip(&kept).map(|(_, k)| k).as_deref(), Ok(&kept[..]));
    // Views are at most a few thousand pixels a side; larger frames only cost the fuzzer time.
    if frame.width as u64 * frame.height as u64 > 1 << 20 {
        return;
    }
    let mut out = vec![0u8; frame.width as usize * frame.height as usize * 3];
    let _ = jpeg::decode_rgb_into(
        &kept,
        frame.width,
        frame.height,
        jpeg::decode_scratch(&frame),
        &mut out,
    );
});
