//! Happens-before between streams, and the races it rules out: two operations on different
//! streams that touch the same allocation, at least one of them writing, with no chain of
//! event waits or host synchronisations ordering them. Whatever schedule a GPU picks, such a
//! pair may run in either order, or at once: a race, reported when the second one is queued,
//! which makes it independent of the schedule the stand-in runs.
//!
//! Vector clocks: every stream counts the operations queued on it, and each stream and the
//! host keep the latest count of every stream they are ordered after. Queueing on a stream
//! first takes in what the host knows (the host queues it after everything it waited for);
//! `cuStreamWaitEvent` takes in the event's clock, recorded with it; a host synchronisation
//! (stream, event, context, a copy into pageable memory, `cuMemFree`) takes the stream's
//! clock into the host's.
//!
//! Accesses are per allocation (not per byte): a copy or memset writes its destination
//! allocation and reads its source; a kernel is taken to read and write every allocation its
//! pointer arguments point into (the stand-in cannot tell which it only reads), so two
//! kernels on different streams sharing a buffer must be ordered too. Operations on one stream
//! are ordered by the stream and never race.

use std::collections::HashMap;

/// Stream → operations of it that are ordered before this point.
pub type Clock = HashMap<usize, u64>;

fn join(into: &mut Clock, from: &Clock) {
    for (&s, &t) in from {
        let e = into.entry(s).or_insert(0);
        *e = (*e).max(t);
    }
}

/// One operation's access, for the report.
#[derive(Clone)]
struct Access {
    stream: usize,
    tick: u64,
    what: String,
}

#[derive(Default)]
struct History {
    write: Option<Access>,
    /// The last read from each stream since the last write.
    reads: HashMap<usize, Access>,
}

#[derive(Default)]
pub struct Tracker {
    host: Clock,
    streams: HashMap<usize, Clock>,
    /// Allocation base → its accesses.
    history: HashMap<u64, History>,
}

impl Tracker {
    /// An operation queued on `stream`: ordered after what the host knows and after the
    /// stream's earlier operations. Returns its tick.
    pub fn issue(&mut self, stream: usize) -> u64 {
        let c = self.streams.entry(stream).or_default();
        join(c, &self.host);
        let t = c.entry(stream).or_insert(0);
        *t += 1;
        *t
    }

    /// `stream`'s clock now (what an event recorded on it at this point carries).
    pub fn clock(&self, stream: usize) -> Clock {
        self.streams.get(&stream).cloned().unwrap_or_default()
    }

    /// `stream` waits for everything `clock` covers.
    pub fn wait(&mut self, stream: usize, clock: &Clock) {
        join(self.streams.entry(stream).or_default(), clock);
    }

    /// The host has waited for everything `clock` covers.
    pub fn host_waited(&mut self, clock: &Clock) {
        join(&mut self.host, clock);
    }

    /// The allocation at `base` is freed: its history goes (a new allocation may reuse it).
    pub fn forget(&mut self, base: u64) {
        self.history.remove(&base);
    }

    /// Records that the operation `tick` of `stream` (`what`) reads or writes the allocation at
    /// `base`; the earlier access it races with, described, if any.
    pub fn access(
        &mut self,
        stream: usize,
        tick: u64,
        base: u64,
        write: bool,
        what: &str,
    ) -> Result<(), String> {
        let clock = self.clock(stream);
        let ordered =
            |a: &Access| a.stream == stream || clock.get(&a.stream).is_some_and(|&t| t >= a.tick);
        let h = self.history.entry(base).or_default();
        let mut earlier: Vec<&Access> = h.write.iter().collect();
        if write {
            earlier.extend(h.reads.values());
        }
        if let Some(a) = earlier.into_iter().find(|a| !ordered(a)) {
            return Err(format!(
                "race on the allocation at {base:#x}: {what} (stream {stream:#x}) and {} \
                 (stream {:#x}) are not ordered by any event wait or host synchronisation, and \
                 one of them writes it",
                a.what, a.stream
            ));
        }
        let me = Access {
            stream,
            tick,
            what: what.to_string(),
        };
        if write {
            h.write = Some(me);
            h.reads.clear();
        } else {
            h.reads.insert(stream, me);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tracker in which a copy on stream `copy` has written allocation B.
    fn after_a_copy_into_b(copy: usize) -> Tracker {
        let mut t = Tracker::default();
        let c = t.issue(copy);
        t.access(copy, c, 0xB, true, "copy").unwrap();
        t
    }

    #[test]
    fn only_unordered_conflicting_accesses_race() {
        let (main, copy) = (1, 2);
        // A copy writes B on the copy stream; a kernel on the main queue reads it unordered.
        let mut t = after_a_copy_into_b(copy);
        let k = t.issue(main);
        assert!(t.access(main, k, 0xB, true, "kernel").is_err());

        // Ordered by an event: the kernel waits for the copy's clock.
        let mut t = after_a_copy_into_b(copy);
        let ev = t.clock(copy);
        t.wait(main, &ev);
        let k = t.issue(main);
        t.access(main, k, 0xB, true, "kernel").unwrap();
        // The next copy into B must wait for the kernel (rule 1 of the transfers).
        let c = t.issue(copy);
        assert!(t.access(copy, c, 0xB, true, "copy").is_err());

        // Ordered through the host: it synchronised the copy stream before queueing.
        let mut t = after_a_copy_into_b(copy);
        let clock = t.clock(copy);
        t.host_waited(&clock);
        let k = t.issue(main);
        t.access(main, k, 0xB, true, "kernel").unwrap();

        // Two reads never race; other allocations never race.
        let mut t = Tracker::default();
        let a = t.issue(copy);
        t.access(copy, a, 0xB, false, "read").unwrap();
        let b = t.issue(main);
        t.access(main, b, 0xB, false, "read").unwrap();
        t.access(main, b, 0xC, true, "write").unwrap();
        let w = t.issue(main);
        assert!(
            t.access(main, w, 0xB, true, "write").is_err(),
            "write after an unordered read"
        );
    }
}
