//! A watchdog for calls that may wait forever: NCCL waits for a peer that died or stopped
//! answering without any timeout, in `ncclCommInitRank` and inside its kernels alike,
//! where the TCP communicator gives up after `GRADEX_TIMEOUT_SECS`. Each call is watched
//! from when it was issued until its completion check says it is done (a flag set after
//! set-up returns, or a CUDA event recorded after a collective's kernels); one still not
//! done after the timeout is reported once, by name, to the owner's `on_stall`, which
//! decides what to do (the NCCL communicator's default ends the process with the message:
//! a thread stuck in NCCL cannot be unwound).
//!
//! The thread is independent of CUDA: the completion checks are closures, so the timing
//! and the message are tested on the CPU.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What the owner does with a stalled call's message (called once, on the watchdog's
/// thread).
pub type OnStall = Arc<dyn Fn(String) + Send + Sync>;

/// A check of whether a watched call has completed (called on the watchdog's thread).
type Done = Box<dyn Fn() -> bool + Send>;

struct Pending {
    what: String,
    since: Instant,
    done: Done,
}

#[derive(Default)]
struct State {
    pending: VecDeque<Pending>,
    stop: bool,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

pub struct Watchdog {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Watchdog {
    /// Starts the watchdog's thread: a call pending for `timeout` is reported to
    /// `on_stall` as "`what` has not completed after N s" (with the timeout's name).
    pub fn new(timeout: Duration, on_stall: OnStall) -> std::io::Result<Watchdog> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
        });
        let s = shared.clone();
        // Often enough to report within a tenth of the timeout, and at most every 100 ms.
        let poll = (timeout / 10).clamp(Duration::from_millis(1), Duration::from_millis(100));
        let thread = std::thread::Builder::new()
            .name("watchdog".into())
            .spawn(move || watch(&s, timeout, poll, on_stall))?;
        Ok(Watchdog {
            shared,
            thread: Some(thread),
        })
    }

    /// Watches the call `what` from now until `done` returns true.
    pub fn watch(&self, what: impl Into<String>, done: impl Fn() -> bool + Send + 'static) {
        let mut st = self.lock();
        st.pending.push_back(Pending {
            what: what.into(),
            since: Instant::now(),
            done: Box::new(done),
        });
        self.shared.wake.notify_one();
    }

    /// How many watched calls have not completed (as of the thread's last look).
    pub fn pending(&self) -> usize {
        self.lock().pending.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.lock().stop = true;
        self.shared.wake.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The watchdog's loop: drops completed calls, reports the oldest one past the timeout
/// (once: whatever the owner does, the job is over), sleeps `poll`.
fn watch(shared: &Shared, timeout: Duration, poll: Duration, on_stall: OnStall) {
    let mut st = shared.state.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        if st.stop {
            return;
        }
        st.pending.retain(|p| !(p.done)());
        if let Some(p) = st.pending.iter().find(|p| p.since.elapsed() >= timeout) {
            let msg = format!(
                "{} has not completed after {:.0} s (GRADEX_TIMEOUT_SECS): a peer died or \
                 stopped answering",
                p.what,
                p.since.elapsed().as_secs_f64()
            );
            drop(st);
            on_stall(msg);
            return;
        }
        let wait = if st.pending.is_empty() {
            // Nothing to time: sleep until a call is watched or the owner stops.
            Duration::from_secs(3600)
        } else {
            poll
        };
        st = shared
            .wake
            .wait_timeout(st, wait)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc;

    fn reporting(timeout: Duration) -> (Watchdog, mpsc::Receiver<(String, Instant)>) {
        let (tx, rx) = mpsc::channel();
        let tx = Mutex::new(tx);
        let on_stall: OnStall = Arc::new(move |msg| {
            let _ = tx.lock().map(|t| t.send((msg, Instant::now())));
        });
        (Watchdog::new(timeout, on_stall).expect("the thread"), rx)
    }

    /// A call that never completes is reported once, by name, after the timeout (not
    /// before it, and within a few polls after it); completed calls are forgotten.
    #[test]
    fn a_call_that_never_completes_is_reported_once_after_the_timeout() {
        let timeout = Duration::from_millis(300);
        let (w, rx) = reporting(timeout);
        w.watch("nccl allreduce (step 3)", || true);
        let start = Instant::now();
        w.watch("nccl allgather (step 4, bucket 2)", || false);
        let (msg, at) = rx.recv_timeout(Duration::from_secs(10)).expect("a report");
        let after = at - start;
        assert!(after >= timeout, "reported after {after:?}");
        assert!(after < timeout * 4, "reported after {after:?}");
        assert!(
            msg.starts_with("nccl allgather (step 4, bucket 2) has not completed"),
            "{msg}"
        );
        assert!(msg.contains("GRADEX_TIMEOUT_SECS"), "{msg}");
        assert!(rx.recv_timeout(timeout * 2).is_err(), "a second report");
    }

    /// Calls that complete within the timeout, however many, are never reported.
    #[test]
    fn calls_that_complete_in_time_are_not_reported() {
        let (w, rx) = reporting(Duration::from_millis(200));
        for i in 0..50 {
            let done = Arc::new(AtomicBool::new(false));
            let d = done.clone();
            w.watch(format!("call {i}"), move || d.load(Ordering::SeqCst));
            std::thread::sleep(Duration::from_millis(10));
            done.store(true, Ordering::SeqCst);
        }
        assert!(rx.recv_timeout(Duration::from_millis(600)).is_err());
        assert_eq!(w.pending(), 0);
        // Dropping the watchdog stops its thread at once.
        let t = Instant::now();
        drop(w);
        assert!(t.elapsed() < Duration::from_secs(2));
    }
}
