//! A watchdog for calls that may wait forever: NCCL waits for a peer that died or stopped
//! answering without any timeout, in `ncclCommInitRank` and inside its kernels alike,
//! where the TCP communicator gives up after `GRADEX_TIMEOUT_SECS`. Each call is watched
//! from when it was issued until its completion check says it is done (a flag set after
//! set-up returns, or a CUDA event recorded after a collective's kernels); one still not
//! done after the timeout is reported once, by name, to the owner's `on_stall`, which
//! decides what to do (the NCCL communicator's default ends the process with the message:
//! a thread stuck in NCCL cannot be unwound).
//!
//! The checks run with no lock held, so a thread watching a new call never waits for
//! one; and since a check can itself hang (a CUDA driver call stuck behind a hung kernel,
//! the failure PyTorch's NCCL watchdog met and answered with a heartbeat monitor), a
//! second thread reports a round of checks that has not returned within the timeout.
//!
//! Both threads are independent of CUDA: the completion checks are closures, so the
//! timing and the messages are tested on the CPU.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// What the owner does with a stalled call's message (called once, on a watchdog thread).
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
    /// When the checker began the round of completion checks under way, and the oldest
    /// call it checks (None between rounds): a check that never returns (a CUDA driver
    /// stuck behind a hung kernel) is reported by the monitor from this.
    round: Mutex<Option<(Instant, String)>>,
    /// Set by the first report, by either thread: there is only one.
    fired: AtomicBool,
    timeout: Duration,
    on_stall: OnStall,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Calls `on_stall` with `msg` unless a report was made already.
    fn report(&self, msg: String) {
        if !self.fired.swap(true, Ordering::SeqCst) {
            (self.on_stall)(msg);
        }
    }
}

/// Watches calls on two threads of its own: a checker, which runs the completion checks
/// and reports a call pending past the timeout, and a monitor, which reports a checker
/// round that has not returned within the timeout (see the module comment).
pub struct Watchdog {
    shared: Arc<Shared>,
}

impl Watchdog {
    /// Starts the watchdog's threads: a call pending for `timeout` is reported to
    /// `on_stall` as "`what` has not completed after N s" (with the timeout's name).
    pub fn new(timeout: Duration, on_stall: OnStall) -> std::io::Result<Watchdog> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            round: Mutex::new(None),
            fired: AtomicBool::new(false),
            timeout,
            on_stall,
        });
        // Often enough to report within a tenth of the timeout, and at most every 100 ms.
        let poll = (timeout / 10).clamp(Duration::from_millis(1), Duration::from_millis(100));
        let s = shared.clone();
        std::thread::Builder::new()
            .name("watchdog".into())
            .spawn(move || check(&s, poll))?;
        let s = shared.clone();
        std::thread::Builder::new()
            .name("watchdog-monitor".into())
            .spawn(move || monitor(&s, poll))?;
        Ok(Watchdog { shared })
    }

    /// Watches the call `what` from now until `done` returns true.
    pub fn watch(&self, what: impl Into<String>, done: impl Fn() -> bool + Send + 'static) {
        let mut st = self.shared.lock();
        st.pending.push_back(Pending {
            what: what.into(),
            since: Instant::now(),
            done: Box::new(done),
        });
        self.shared.wake.notify_all();
    }

    /// How many watched calls have not completed (as of the checker's last round): for
    /// the tests, which check that completed calls are forgotten.
    #[cfg(test)]
    fn pending(&self) -> usize {
        self.shared.lock().pending.len()
    }
}

/// Stops both threads within a poll; neither is joined, so that an owner is never held
/// by a completion check stuck in the driver (the threads hold only what they share).
impl Drop for Watchdog {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.wake.notify_all();
    }
}

/// The checker's loop: takes the pending calls out (so that `watch` never waits for a
/// check), drops the completed ones, reports the oldest past the timeout, puts the rest
/// back ahead of any watched meanwhile, and sleeps a poll (or until a call is watched).
fn check(shared: &Shared, poll: Duration) {
    loop {
        let mut batch = {
            let mut st = shared.lock();
            if st.stop {
                return;
            }
            std::mem::take(&mut st.pending)
        };
        if let Some(oldest) = batch.front() {
            *shared.round.lock().unwrap_or_else(|e| e.into_inner()) =
                Some((Instant::now(), oldest.what.clone()));
            batch.retain(|p| !(p.done)());
            *shared.round.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
        if let Some(p) = batch.iter().find(|p| p.since.elapsed() >= shared.timeout) {
            shared.report(format!(
                "{} has not completed after {} (GRADEX_TIMEOUT_SECS): a peer died or \
                 stopped answering",
                p.what,
                seconds(shared.timeout)
            ));
        }
        let mut st = shared.lock();
        let added = std::mem::replace(&mut st.pending, batch);
        st.pending.extend(added);
        if st.stop {
            return;
        }
        // Nothing to time: sleep until a call is watched or the owner stops.
        let wait = if st.pending.is_empty() {
            Duration::from_secs(3600)
        } else {
            poll
        };
        drop(shared.wake.wait_timeout(st, wait));
    }
}

/// A timeout as the messages print it: whole seconds where it is whole ("60 s"), else
/// to a tenth ("0.3 s").
fn seconds(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{s:.0} s")
    } else {
        format!("{s:.1} s")
    }
}

/// The monitor's loop: a round of completion checks that has run for the timeout means
/// a check is stuck (in the driver, behind a hung kernel); that is reported too.
fn monitor(shared: &Shared, poll: Duration) {
    loop {
        std::thread::sleep(poll);
        if shared.lock().stop {
            return;
        }
        let stuck = shared
            .round
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .filter(|(since, _)| since.elapsed() >= shared.timeout)
            .map(|(_, what)| what.clone());
        if let Some(what) = stuck {
            shared.report(format!(
                "checking whether {what} has completed has not returned after {} \
                 (GRADEX_TIMEOUT_SECS): the GPU's driver is stuck",
                seconds(shared.timeout)
            ));
        }
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

    /// Calls that complete within the timeout, however many, are never reported, and
    /// are forgotten once they have.
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
    }

    /// A completion check that does not return (a driver stuck behind a hung kernel) is
    /// reported by the monitor after the timeout, and `watch` does not wait for it.
    #[test]
    fn a_check_that_does_not_return_is_reported_by_the_monitor() {
        let timeout = Duration::from_millis(300);
        let (w, rx) = reporting(timeout);
        let start = Instant::now();
        w.watch("nccl broadcast (step 1, parameter 0)", || {
            std::thread::sleep(Duration::from_secs(2));
            false
        });
        std::thread::sleep(Duration::from_millis(50));
        let t = Instant::now();
        w.watch("nccl allreduce", || true);
        assert!(
            t.elapsed() < Duration::from_millis(100),
            "watch waited {:?}",
            t.elapsed()
        );
        let (msg, at) = rx.recv_timeout(Duration::from_secs(10)).expect("a report");
        assert!(
            at - start >= timeout && at - start < Duration::from_secs(2),
            "{:?}",
            at - start
        );
        assert!(
            msg.starts_with(
                "checking whether nccl broadcast (step 1, parameter 0) has completed has not \
                 returned after 0.3 s"
            ),
            "{msg}"
        );
    }
}
