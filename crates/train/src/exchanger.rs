//! The compression thread. It owns the communicator and the method; the training thread
//! hands it jobs over a channel — above all, from the gradient-ready hooks, each
//! parameter's gradient the moment backward has finished it — and it runs them in
//! arrival order. Hooks fire in the same order on every rank (the same graph, walked the
//! same way), so every rank issues the same collectives in the same order.
//!
//! Every gradient arrives as the tensor itself (`Job::Exchange`: a parameter's own, or a
//! bucket's concatenation), and every update goes back as a tensor on the gradient's
//! device; the weights after the step are synchronised in place (`Job::After`). Which
//! of the method's two entry points runs depends only on the collectives:
//!
//! - over the flat TCP communicator, its host code (`Method::exchange` and
//!   `Method::after_step` on the tensor's values, copied from the GPU where the tensors
//!   live there): the same results bit for bit as its tensor code (compress's
//!   `tests/exchange_tensor.rs`), the faster of the two wherever both were measured, on
//!   the CPU and on a GPU, and in the method's own wire format (DGC's zero-run records of
//!   6 bytes an entry, where its tensor code sends 8-byte pairs), so a job's bytes are
//!   the same on every device; the measurements are in docs/train.md;
//! - over NCCL (`--backend nccl`, started over the TCP communicator before any other
//!   job) and in the hierarchical exchange, its tensor code (`Method::exchange_tensor`,
//!   `Method::after_step_tensor`) over a `ProcessGroup`, the method's state on the
//!   gradients' device and its kernels queued on the device's compute stream after those
//!   that produced the gradient: the gradient leaves the GPU only as the compressed
//!   message.
//!
//! The TCP communicator also carries the trainer's own collectives (model broadcast, loss
//! and evaluation sums).
//!
//! An error in a collective (a dead peer, a timeout, a malformed message) is sent back
//! as a reply naming the rank and ends the thread; the training thread turns it into
//! the worker's error.

use crate::progress::say_err;
use anyhow::Result;
use comm::{Communicator, NcclCommunicator, ProcessGroup, ReduceOp, Traffic};
use compress::{
    Exchange, HostAfterStep, HostExchange, Method, StepInfo, TensorAfterStep, TensorExchange,
    TensorUpdate, UpdateKind, WireStats,
};
use crossbeam_channel::{bounded, unbounded, Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tensor::{Device, Tensor};

pub enum Job {
    Begin(StepInfo),
    /// A bucket's gradient (a parameter's own tensor, or several parameters'
    /// concatenated), with its weights when the method reads them, for the method's
    /// exchange (its host code or its tensor code: see the module comment).
    Exchange {
        index: usize,
        grad: Tensor,
        weights: Option<Tensor>,
    },
    /// The method's synchronisation after the step of a bucket's weights, which it
    /// overwrites in place where it synchronises them.
    After {
        index: usize,
        weights: Tensor,
    },
    /// Ends the thread with this error (a bucket that could not be put together).
    Fail(String),
    /// A sum over ranks (evaluation counts, the loss).
    Allreduce(Vec<f32>),
    Broadcast(Vec<u8>),
    /// Every rank's bytes, in rank order (the resume's checkpoint steps).
    Allgather(Vec<u8>),
    State,
    LoadState(compress::StateTensors),
    Counters,
    /// The hierarchical exchange's bytes sent inside and across nodes.
    NodeBytes,
    Stop,
}

pub enum Reply {
    /// The update of an `Exchange` job, on the gradient's device.
    Update {
        index: usize,
        update: Tensor,
        kind: UpdateKind,
        stats: WireStats,
        started: Instant,
    },
    After {
        index: usize,
        stats: Option<WireStats>,
        /// Positions (in the bucket's coordinates) whose optimizer momentum to zero.
        momentum_mask: Vec<u32>,
    },
    Reduced(Vec<f32>),
    Broadcast(Vec<u8>),
    Gathered(Vec<Vec<u8>>),
    State(compress::StateTensors),
    Loaded,
    Counters(Traffic),
    NodeBytes(Option<(u64, u64)>),
    Failed(String),
}

pub struct Exchanger {
    pub jobs: Sender<Job>,
    pub replies: Receiver<Reply>,
    handle: Option<JoinHandle<()>>,
    /// Disconnected when the thread has ended, however it ended (its sender is dropped
    /// with the thread's closure, panics included).
    ended: Receiver<()>,
    /// How long dropping the exchanger waits for the thread before leaving it behind.
    stop_within: Duration,
    /// Every how many steps the method communicates after the optimizer step.
    pub after_step_every: Option<u64>,
    /// Whether the method's exchange reads the weights (otherwise none are copied out).
    pub reads_weights: bool,
    /// Why the thread stopped, once a reply has said so: a later job's error repeats it
    /// (a failed checkpoint load is otherwise reported by the next collective as only
    /// "the compression thread has stopped").
    failure: std::sync::Mutex<Option<String>>,
}

impl Exchanger {
    /// Starts the thread; with `nccl`, it first joins the ranks' NCCL communicator on
    /// `device` (a failure there is the first reply). The gradients and updates are
    /// tensors on `device`; the method's state is placed there when its tensor code runs
    /// (see the module comment). `labels` names each job index in messages.
    pub fn spawn(
        mut comm: Communicator,
        mut method: Box<dyn Method>,
        device: Device,
        nccl: bool,
        local_world_size: usize,
        labels: Vec<String>,
    ) -> Result<Exchanger> {
        comm.set_device(device);
        // A method's state is placed only for its tensor code.
        if !runs_host_code(nccl, local_world_size > 0) {
            method.place(device).map_err(|e| {
                anyhow::anyhow!("keeping {}'s state on {device:?}: {e}", method.name())
            })?;
        }
        let nccl = nccl.then_some(device);
        let (jobs, rx) = unbounded::<Job>();
        let (tx, replies) = unbounded::<Reply>();
        let after_step_every = method.after_step_every();
        let reads_weights = method.reads_weights();
        // A TCP collective in flight fails within the communicator's timeout (per
        // blocking call); twice that lets one that was mid-way give up cleanly.
        let stop_within = comm.timeout().saturating_mul(2);
        let (ended_tx, ended) = bounded::<()>(0);
        let handle = std::thread::Builder::new()
            .name("compression".into())
            .spawn(move || {
                // Declared first, so dropped last: captured values are dropped after the
                // closure's locals, so everything the thread owns is moved into locals
                // below, and the channel disconnects only once they are gone.
                let _ended = ended_tx;
                let (rx, tx) = (rx, tx);
                // The methods' tensor code runs kernels here, on this thread alone: the
                // training thread's pool is busy with backward (tensor's `cpu::threads`).
                if let Err(e) = tensor::cpu::run_kernels_here(Some(1)) {
                    let _ = tx.send(Reply::Failed(format!("{e}")));
                    return;
                }
                match Thread::start(comm, method, labels, nccl, local_world_size) {
                    Ok(mut thread) => thread.serve(&rx, &tx),
                    Err(msg) => {
                        let _ = tx.send(Reply::Failed(msg));
                    }
                }
            })
            .map_err(|e| anyhow::anyhow!("starting the compression thread: {e}"))?;
        Ok(Exchanger {
            jobs,
            replies,
            handle: Some(handle),
            ended,
            stop_within,
            after_step_every,
            reads_weights,
            failure: std::sync::Mutex::new(None),
        })
    }

    pub fn send(&self, job: Job) -> Result<()> {
        if self.jobs.send(job).is_ok() {
            return Ok(());
        }
        // The thread has stopped; its last reply says why (a failed exchange, or NCCL
        // failing to start before the first job).
        while let Ok(r) = self.replies.try_recv() {
            if let Reply::Failed(msg) = r {
                return Err(self.failed(msg));
            }
        }
        match self.failure.lock().ok().and_then(|f| f.clone()) {
            Some(why) => Err(anyhow::anyhow!(
                "the compression thread has stopped after: {why}"
            )),
            None => Err(anyhow::anyhow!("the compression thread has stopped")),
        }
    }

    /// The error of a `Failed` reply, remembered for the jobs after it.
    fn failed(&self, msg: String) -> anyhow::Error {
        if let Ok(mut f) = self.failure.lock() {
            f.get_or_insert_with(|| msg.clone());
        }
        anyhow::anyhow!(msg)
    }

    /// The next reply; a failure of the thread becomes an error.
    pub fn recv(&self) -> Result<Reply> {
        match self.replies.recv() {
            Ok(Reply::Failed(msg)) => Err(self.failed(msg)),
            Ok(r) => Ok(r),
            Err(_) => Err(anyhow::anyhow!("the compression thread ended unexpectedly")),
        }
    }

    pub fn allreduce(&self, v: Vec<f32>) -> Result<Vec<f32>> {
        self.send(Job::Allreduce(v))?;
        match self.recv()? {
            Reply::Reduced(v) => Ok(v),
            _ => anyhow::bail!("compression thread: unexpected reply to an allreduce"),
        }
    }
    pub fn broadcast(&self, b: Vec<u8>) -> Result<Vec<u8>> {
        self.send(Job::Broadcast(b))?;
        match self.recv()? {
            Reply::Broadcast(v) => Ok(v),
            _ => anyhow::bail!("compression thread: unexpected reply to a broadcast"),
        }
    }
    pub fn allgather(&self, b: Vec<u8>) -> Result<Vec<Vec<u8>>> {
        self.send(Job::Allgather(b))?;
        match self.recv()? {
            Reply::Gathered(v) => Ok(v),
            _ => anyhow::bail!("compression thread: unexpected reply to an allgather"),
        }
    }
    pub fn counters(&self) -> Result<Traffic> {
        self.send(Job::Counters)?;
        match self.recv()? {
            Reply::Counters(t) => Ok(t),
            _ => anyhow::bail!("compression thread: unexpected reply to a counter request"),
        }
    }
    /// With `--local-world-size`, the payload bytes this rank sent inside its node and
    /// across nodes.
    pub fn node_bytes(&self) -> Result<Option<(u64, u64)>> {
        self.send(Job::NodeBytes)?;
        match self.recv()? {
            Reply::NodeBytes(b) => Ok(b),
            _ => anyhow::bail!("compression thread: unexpected reply to a node-bytes request"),
        }
    }
    pub fn state(&self) -> Result<compress::StateTensors> {
        self.send(Job::State)?;
        match self.recv()? {
            Reply::State(s) => Ok(s),
            _ => anyhow::bail!("compression thread: unexpected reply to a state request"),
        }
    }
    pub fn load_state(&self, s: compress::StateTensors) -> Result<()> {
        self.send(Job::LoadState(s))?;
        match self.recv()? {
            Reply::Loaded => Ok(()),
            _ => anyhow::bail!("compression thread: unexpected reply to a state load"),
        }
    }
}

/// Adds the traffic between two counter readings to `acc`.
fn add_traffic(acc: &mut Traffic, before: &Traffic, after: &Traffic) {
    acc.payload_sent += after.payload_sent - before.payload_sent;
    acc.payload_received += after.payload_received - before.payload_received;
    acc.total_sent += after.total_sent - before.total_sent;
    acc.total_received += after.total_received - before.total_received;
}

/// Stops the thread and joins it, but not forever: a collective that can block without
/// a timeout (an NCCL call, or NCCL's start-up, waiting on a rank that died) must not
/// keep this process from exiting with its error. After `stop_within` the thread is
/// left behind, with a warning, and dies with the process.
impl Drop for Exchanger {
    fn drop(&mut self) {
        let _ = self.jobs.send(Job::Stop);
        let Some(h) = self.handle.take() else { return };
        match self.ended.recv_timeout(self.stop_within) {
            Err(RecvTimeoutError::Timeout) => say_err(&format!(
                "warning: the compression thread did not stop within {:.0} s (a collective \
                 blocked on a peer); leaving it to end with the process",
                self.stop_within.as_secs_f64()
            )),
            // Ended (the channel never carries a message).
            Ok(()) | Err(RecvTimeoutError::Disconnected) => {
                let _ = h.join();
            }
        }
    }
}

/// Whether a method's host code runs (see the module comment): over the flat TCP
/// communicator, that is without NCCL and without nodes.
fn runs_host_code(nccl: bool, nodes: bool) -> bool {
    !nccl && !nodes
}

/// The compression thread's own: the TCP communicator, the method, NCCL's communicator
/// where started, the hierarchical exchange's node structure, and the bytes of the
/// trainer's own collectives.
struct Thread {
    comm: Communicator,
    method: Box<dyn Method>,
    /// Each job index's name in messages (`Exchanger::spawn`'s `labels`).
    labels: Vec<String>,
    /// The step under way (named in a stalled NCCL call's message).
    step: u64,
    nccl: Option<NcclCommunicator>,
    hierarchy: Option<crate::hierarchy::Hierarchy>,
    /// Bytes of the trainer's own collectives (initial broadcast, loss and evaluation
    /// sums, NCCL's start-up), kept out of the method's traffic.
    overhead: Traffic,
}

/// What a job asks of the thread's loop.
enum Next {
    Reply(std::result::Result<Reply, String>),
    Continue,
    Stop,
}

impl Thread {
    /// With `nccl`, joins the ranks' NCCL communicator on that device first.
    fn start(
        mut comm: Communicator,
        method: Box<dyn Method>,
        labels: Vec<String>,
        nccl: Option<Device>,
        local_world_size: usize,
    ) -> std::result::Result<Thread, String> {
        let mut overhead = Traffic::default();
        let nccl = match nccl {
            None => None,
            Some(device) => {
                let before = comm.counters().total();
                let n = NcclCommunicator::new(&mut comm, device)
                    .map_err(|e| format!("starting NCCL: {e}"))?;
                add_traffic(&mut overhead, &before, &comm.counters().total());
                Some(n)
            }
        };
        Ok(Thread {
            comm,
            method,
            labels,
            step: 0,
            nccl,
            hierarchy: (local_world_size > 0)
                .then(|| crate::hierarchy::Hierarchy::new(local_world_size)),
            overhead,
        })
    }

    /// Answers jobs until `Stop`, a failure (its reply is the last), or the trainer's end.
    fn serve(&mut self, rx: &Receiver<Job>, tx: &Sender<Reply>) {
        for job in rx.iter() {
            let bookkeeping = matches!(
                job,
                Job::Allreduce(_) | Job::Broadcast(_) | Job::Allgather(_)
            );
            let before = self.comm.counters().total();
            let reply = match self.handle(job) {
                Next::Stop => return,
                Next::Continue => continue,
                Next::Reply(r) => r,
            };
            if bookkeeping {
                add_traffic(&mut self.overhead, &before, &self.comm.counters().total());
            }
            match reply {
                Ok(r) => {
                    if tx.send(r).is_err() {
                        return;
                    }
                }
                Err(msg) => {
                    let _ = tx.send(Reply::Failed(msg));
                    return;
                }
            }
        }
    }

    fn handle(&mut self, job: Job) -> Next {
        let (comm, method) = (&mut self.comm, &mut self.method);
        Next::Reply(match job {
            Job::Stop => return Next::Stop,
            Job::Begin(info) => {
                self.step = info.step;
                method.begin_step(info);
                return Next::Continue;
            }
            Job::Exchange {
                index,
                grad,
                weights,
            } => self.exchange(index, &grad, weights.as_ref()),
            Job::After { index, weights } => self.after_step(index, &weights),
            Job::Fail(why) => Err(why),
            Job::Allreduce(mut v) => comm
                .allreduce(&mut v, ReduceOp::Sum)
                .map(|_| Reply::Reduced(v))
                .map_err(|e| format!("allreduce: {e}")),
            Job::Broadcast(b) => comm
                .broadcast(0, &b)
                .map(Reply::Broadcast)
                .map_err(|e| format!("broadcast: {e}")),
            Job::Allgather(b) => comm
                .allgather_v(&b)
                .map(Reply::Gathered)
                .map_err(|e| format!("allgather: {e}")),
            Job::State => method
                .state()
                .map(Reply::State)
                .map_err(|e| format!("copying the method's state: {e}")),
            Job::LoadState(s) => method.load_state(&s).map(|_| Reply::Loaded).map_err(|e| {
                format!(
                    "restoring the method's state: {e} (a checkpoint resumes with the --method and options that wrote it; this run's is {})",
                    method.describe()
                )
            }),
            Job::NodeBytes => Ok(Reply::NodeBytes(self.hierarchy.as_ref().map(|h| h.bytes()))),
            Job::Counters => Ok(self.counters()),
        })
    }

    /// What a tensor job uses: the group it runs over (NCCL where started, else TCP) with
    /// its name for messages, the method, and the nodes of a hierarchical exchange.
    fn tensor_parts(
        &mut self,
    ) -> (
        &mut dyn ProcessGroup,
        &'static str,
        &mut dyn Method,
        Option<&mut crate::hierarchy::Hierarchy>,
    ) {
        let (group, over): (&mut dyn ProcessGroup, _) = match self.nccl.as_mut() {
            Some(n) => (n, "NCCL"),
            None => (&mut self.comm, "TCP"),
        };
        (group, over, self.method.as_mut(), self.hierarchy.as_mut())
    }

    /// Job index `index` in messages: "parameter 7 (fc2.bias)" or, with buckets,
    /// "bucket 1 (conv1.weight+conv1.bias)".
    fn what(&self, index: usize) -> String {
        match self.labels.get(index) {
            Some(l) => l.clone(),
            None => format!("bucket {index}"),
        }
    }

    /// Runs a job on parameter or bucket `index`: `host` (the method's host code) over
    /// flat TCP, else `tensors` (its tensor code) over NCCL where started, else TCP
    /// through the nodes of a hierarchical job; an error names what was `doing` and on
    /// what ("exchanging parameter 7 (fc2.bias) over NCCL: …").
    fn run<T>(
        &mut self,
        index: usize,
        doing: &str,
        host: impl FnOnce(&mut Self) -> anyhow::Result<T>,
        tensors: impl FnOnce(
            &mut dyn ProcessGroup,
            &mut dyn Method,
            Option<&mut crate::hierarchy::Hierarchy>,
        ) -> compress::Result<T>,
    ) -> std::result::Result<T, String> {
        let what = self.what(index);
        if runs_host_code(self.nccl.is_some(), self.hierarchy.is_some()) {
            return host(self).map_err(|e| format!("{doing} {what}: {e}"));
        }
        if let Some(n) = self.nccl.as_mut() {
            n.set_label(format!("step {}, {doing} {what}", self.step));
        }
        let (group, over, method, hierarchy) = self.tensor_parts();
        tensors(group, method, hierarchy).map_err(|e| format!("{doing} {what} over {over}: {e}"))
    }

    /// A gradient tensor's exchange (see [`Thread::run`]).
    fn exchange(
        &mut self,
        index: usize,
        grad: &Tensor,
        weights: Option<&Tensor>,
    ) -> std::result::Result<Reply, String> {
        let started = Instant::now();
        let update = self.run(
            index,
            "exchanging",
            |t| t.exchange_on_host(index, grad, weights),
            |group, method, hierarchy| {
                let x = Exchange {
                    weights,
                    ..TensorExchange::new(group, index, grad)
                };
                match hierarchy {
                    Some(h) => h.exchange(method, x),
                    None => method.exchange_tensor(x),
                }
            },
        )?;
        Ok(Reply::Update {
            index,
            update: update.values,
            kind: update.kind,
            stats: update.stats,
            started,
        })
    }

    /// `Method::exchange` on the gradient's values on the host, the update made a tensor
    /// of the gradient's shape on its device.
    fn exchange_on_host(
        &mut self,
        index: usize,
        grad: &Tensor,
        weights: Option<&Tensor>,
    ) -> anyhow::Result<TensorUpdate> {
        let g = grad.to_vec::<f32>()?;
        let w = weights.map(Tensor::to_vec::<f32>).transpose()?;
        let x = Exchange {
            weights: w.as_deref(),
            ..HostExchange::new(&mut self.comm, index, &g)
        };
        let u = self.method.exchange(x)?;
        Ok(TensorUpdate {
            values: Tensor::from_vec(u.values, grad.dims(), grad.device())?,
            kind: u.kind,
            stats: u.stats,
        })
    }

    /// A method's synchronisation after the step, of the weights' tensor in place (see
    /// [`Thread::run`]).
    fn after_step(&mut self, index: usize, weights: &Tensor) -> std::result::Result<Reply, String> {
        let (stats, momentum_mask) = self.run(
            index,
            "synchronising",
            |t| t.after_step_on_host(index, weights),
            |group, method, hierarchy| {
                let x = TensorAfterStep::new(group, index, weights);
                match hierarchy {
                    Some(h) => h.after_step(method, x),
                    None => method
                        .after_step_tensor(x)
                        .map(|stats| (stats, method.take_momentum_mask(index))),
                }
            },
        )?;
        Ok(Reply::After {
            index,
            stats,
            momentum_mask,
        })
    }

    /// `Method::after_step` on the host values of `weights`, written back to its device.
    fn after_step_on_host(
        &mut self,
        index: usize,
        weights: &Tensor,
    ) -> anyhow::Result<crate::hierarchy::Synced> {
        let mut w = weights.to_vec::<f32>()?;
        let stats = self
            .method
            .after_step(HostAfterStep::new(&mut self.comm, index, &mut w))?;
        let synced = Tensor::from_vec(w, weights.dims(), weights.device())?;
        tensor::no_grad(|| weights.assign(&synced))?;
        Ok((stats, self.method.take_momentum_mask(index)))
    }

    /// The method's traffic so far: TCP's and NCCL's, less the trainer's own collectives.
    fn counters(&self) -> Reply {
        let mut t = self.comm.counters().total();
        if let Some(n) = &self.nccl {
            // The method's NCCL traffic: the nominal ring payload.
            add_traffic(&mut t, &Traffic::default(), &n.counters().total());
        }
        let o = &self.overhead;
        Reply::Counters(Traffic {
            payload_sent: t.payload_sent - o.payload_sent,
            payload_received: t.payload_received - o.payload_received,
            total_sent: t.total_sent - o.total_sent,
            total_received: t.total_received - o.total_received,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-rank job whose thread is asked to start NCCL on the CPU, which fails.
    fn nccl_on_the_cpu() -> Exchanger {
        let comm = Communicator::connect(&comm::CommConfig {
            timeout: std::time::Duration::from_secs(10),
            max_frame: 1 << 20,
            ..comm::CommConfig::loopback(0, 1, 0, b"t")
        })
        .expect("a one-rank communicator");
        Exchanger::spawn(comm, dense(1), Device::Cpu, true, 0, Vec::new())
            .expect("the compression thread")
    }

    /// The dense method for rank 0 of `world`.
    fn dense(world: usize) -> Box<dyn Method> {
        let ctx = compress::Context {
            rank: 0,
            world,
            seed: 1,
            momentum: 0.0,
            nesterov: false,
            weight_decay: 0.0,
        };
        let spec = compress::MethodSpec::parse("dense", &[]).expect("dense");
        compress::build(&spec, &ctx).expect("the method")
    }

    /// The first job, whatever it is, reports why NCCL did not start rather than "the
    /// compression thread has stopped": whether it is sent before the thread stopped
    /// (the reply is the failure) or after (the send fails and finds the reply).
    #[test]
    fn a_failed_nccl_start_is_the_error_of_the_first_job() {
        let err = nccl_on_the_cpu()
            .broadcast(vec![1, 2, 3])
            .expect_err("NCCL on the CPU must fail");
        assert!(err.to_string().contains("starting NCCL"), "{err}");
        let ex = nccl_on_the_cpu();
        std::thread::sleep(std::time::Duration::from_millis(300));
        let err = ex.send(Job::Counters).expect_err("the thread has stopped");
        assert!(err.to_string().contains("starting NCCL"), "{err}");
    }

    /// A thread stuck in a collective (here a TCP allreduce whose peer never answers,
    /// standing in for an NCCL call that has no timeout) does not keep `drop` waiting
    /// past `stop_within`; a thread that is idle is joined at once.
    #[test]
    fn dropping_the_exchanger_does_not_wait_for_a_stuck_collective() {
        let configs = comm::CommConfig::loopback_job(2, b"t").expect("a master listener");
        let cfg = |rank: usize| comm::CommConfig {
            timeout: Duration::from_secs(20),
            ..configs[rank].clone()
        };
        // Rank 1 joins and then stays silent, holding its connection open.
        let (hold_tx, hold_rx) = bounded::<()>(0);
        let cfg1 = cfg(1);
        let silent = std::thread::spawn(move || {
            let c = Communicator::connect(&cfg1).expect("rank 1");
            let _ = hold_rx.recv();
            drop(c);
        });
        let comm = Communicator::connect(&cfg(0)).expect("rank 0");
        let mut ex = Exchanger::spawn(comm, dense(2), Device::Cpu, false, 0, Vec::new())
            .expect("the thread");
        assert_eq!(ex.stop_within, Duration::from_secs(40));
        ex.stop_within = Duration::from_millis(300);
        ex.jobs.send(Job::Allreduce(vec![1.0; 4])).expect("queued");
        std::thread::sleep(Duration::from_millis(100));
        let t = Instant::now();
        drop(ex);
        let waited = t.elapsed();
        assert!(
            waited >= Duration::from_millis(300) && waited < Duration::from_secs(5),
            "drop waited {waited:?}"
        );
        let _ = hold_tx.send(());
        silent.join().expect("rank 1");

        // An idle thread stops and is joined well within the bound.
        let one =
            Communicator::connect(&comm::CommConfig::loopback(0, 1, 0, b"t")).expect("rank 0");
        let ex =
            Exchanger::spawn(one, dense(1), Device::Cpu, false, 0, Vec::new()).expect("the thread");
        let t = Instant::now();
        drop(ex);
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    }
}
