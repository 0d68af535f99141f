//! Timing a device's queue: [`Device::mark`] puts a [`TimeMark`] into the main queue after the
//! work queued so far, and [`TimeMark::ms_since`] gives the milliseconds the queue spent
//! between two marks. On CUDA a mark is a timing event (`cuEventElapsedTime`: the GPU's own
//! clock, so the host's launch overhead counts only where the queue waited for it); on the
//! emulation every launch runs when it is made, so the host clock at the mark is the queue's.
//!
//! Invariants: a mark belongs to the device that made it, and the two marks of a measurement
//! must come from one device, the earlier one recorded first (both checked). Marks cost an
//! event each and make the host wait for the later one: profilers place them in a few steps,
//! never in every one.

use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::sys;

use super::{Device, DeviceError, Driver};

/// A point in a device's main queue (see the module docs).
pub struct TimeMark {
    dev: Device,
    at: At,
}

enum At {
    Cuda(sys::CUevent),
    Host(Instant),
}

impl Device {
    /// A mark after every operation queued on this device so far.
    pub fn mark(&self) -> Result<TimeMark, DeviceError> {
        let at = match self.driver() {
            Driver::Cuda(d) => At::Cuda(d.record_timed()?),
            Driver::Emulated(_) => At::Host(Instant::now()),
        };
        Ok(TimeMark {
            dev: self.clone(),
            at,
        })
    }
}

impl TimeMark {
    /// Milliseconds of queue time from `earlier` to this mark; waits until this mark is
    /// reached.
    pub fn ms_since(&self, earlier: &TimeMark) -> Result<f64, DeviceError> {
        if !Arc::ptr_eq(&self.dev.0, &earlier.dev.0) {
            return Err(DeviceError::Timing {
                message: "the two marks belong to different devices".into(),
            });
        }
        let ms = match (&self.dev.driver(), &earlier.at, &self.at) {
            (Driver::Cuda(d), At::Cuda(a), At::Cuda(b)) => d.elapsed_ms(*a, *b)? as f64,
            // Signed, as CUDA's: negative when `earlier` is the later mark.
            (_, At::Host(a), At::Host(b)) if b >= a => b.duration_since(*a).as_secs_f64() * 1e3,
            (_, At::Host(a), At::Host(b)) => -(a.duration_since(*b).as_secs_f64() * 1e3),
            _ => unreachable!("a device's marks are all of its driver's kind"),
        };
        if ms < 0.0 {
            return Err(DeviceError::Timing {
                message: format!("the later mark was recorded first ({ms} ms)"),
            });
        }
        Ok(ms)
    }
}

impl Drop for TimeMark {
    fn drop(&mut self) {
        if let (Driver::Cuda(d), At::Cuda(ev)) = (self.dev.driver(), &self.at) {
            d.destroy_event(*ev);
        }
    }
}

impl std::fmt::Debug for TimeMark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TimeMark")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Marks measure the queue between them, in order, on one device only.
    #[test]
    fn marks_measure_the_queue_between_them() {
        for dev in crate::device::test_devices() {
            let a = dev.mark().unwrap();
            // Work between the marks: a copy in and out of a buffer of 4 MiB.
            let host = vec![1.5f32; 1 << 20];
            let mut buf = dev.alloc::<f32>(host.len()).unwrap();
            dev.upload(&host, &mut buf).unwrap();
            assert_eq!(dev.download_vec(&buf, 3).unwrap(), vec![1.5; 3]);
            let b = dev.mark().unwrap();
            let ms = b.ms_since(&a).unwrap();
            assert!(ms >= 0.0 && ms.is_finite(), "{}: {ms}", dev.name());
            assert!(a.ms_since(&b).is_err(), "{}: the marks' order", dev.name());
            let other = Device::emulated().unwrap();
            let c = other.mark().unwrap();
            assert!(matches!(c.ms_since(&a), Err(DeviceError::Timing { .. })));
        }
    }
}
