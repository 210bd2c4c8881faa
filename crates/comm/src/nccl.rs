//! The NCCL backend: collectives on GPU tensors through NVIDIA's NCCL (cudarc's `nccl`
//! module, loaded at run time, so the workspace builds and runs without NCCL).
//!
//! An [`NcclCommunicator`] is made from a joined TCP [`Communicator`]: the TCP job is the
//! rendezvous. Every rank first checks locally that it can run NCCL (a CUDA device, the
//! library), then one `allgather_v` carries every rank's verdict and rank 0's NCCL unique
//! id; if any rank cannot take part, every rank returns an error naming it, instead of
//! some ranks waiting in `ncclCommInitRank` for a peer that will never come.
//!
//! Collectives take tensors on the communicator's device (contiguous f32; u32 too where
//! they only move bits: broadcast, allgather, send/recv) and are queued
//! on that device's compute stream, so they are ordered with the tensor ops around them;
//! they return when queued, and [`NcclCommunicator::synchronize`] waits for them.
//!
//! Byte counters: NCCL does not report what it puts on the wire, so the counters hold the
//! payload a ring algorithm sends per rank (allreduce 2(P−1)/P·n values, allgather
//! (P−1)·n, broadcast n at the root, send n), the same convention as the TCP backend's;
//! a one-rank job and a message to oneself count nothing.
//!
//! No hangs: NCCL waits for a dead or silent peer forever, in `ncclCommInitRank` and in
//! its kernels alike. Every call is watched ([`crate::watchdog`]) from when it is made
//! (set-up, or a collective whose first use connects to its peers) until the CUDA event
//! recorded after its kernels completes; one still pending after the TCP
//! communicator's timeout (`GRADEX_TIMEOUT_SECS`) is reported by name — with the label the
//! owner set, the trainer's step and parameter — and by default ends the process with that
//! message (exit status 3), as PyTorch's NCCL watchdog does: a thread inside NCCL cannot
//! be unwound, and `ncclCommAbort` is out of reach behind cudarc's `Comm`, which keeps
//! its handle private (the process's exit releases what an abort would).
//!
//! One process per GPU: NCCL refuses two ranks on one device, so on a one-GPU machine the
//! backend runs with world size 1 (its collectives then are local copies, still through
//! NCCL's kernels).
//!
//! NCCL's library is looked up as `libnccl.so` (cudarc's naming); pip's `nvidia-nccl-cu13`
//! ships only `libnccl.so.2`, so a directory with a `libnccl.so` link to it goes on
//! `LD_LIBRARY_PATH` (scripts/gpu-check.sh makes one).

use crate::counters::{ByteCounters, Collective};
use crate::watchdog::{OnStall, Watchdog};
use crate::{CommError, Communicator, ReduceOp, Result};
use cudarc::driver::CudaEvent;
use cudarc::nccl::safe::{self as nccl, Comm, Id};
use std::sync::{Arc, Mutex};
use tensor::{cuda, DType, Device, Tensor};

/// Whether the NCCL library can be loaded (a plain dlopen; never panics).
pub fn nccl_library_present() -> bool {
    // SAFETY: only dlopen()s candidate names.
    std::panic::catch_unwind(|| unsafe { cudarc::nccl::sys::is_culib_present() }).unwrap_or(false)
}

/// NCCL's version as "major.minor.patch", when the library loads.
pub fn nccl_version() -> Option<String> {
    if !nccl_library_present() {
        return None;
    }
    let mut v: std::ffi::c_int = 0;
    // SAFETY: the library is present; ncclGetVersion writes one int.
    let r = unsafe { cudarc::nccl::sys::ncclGetVersion(&mut v) };
    if r != cudarc::nccl::sys::ncclResult_t::ncclSuccess {
        return None;
    }
    // NCCL_VERSION_CODE since 2.9: major*10000 + minor*100 + patch.
    Some(format!("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100))
}

fn nccl_err(op: &'static str) -> impl Fn(cudarc::nccl::result::NcclError) -> CommError {
    move |e| {
        // SAFETY: ncclGetErrorString returns a static C string for any result code.
        let text = unsafe {
            let p = cudarc::nccl::sys::ncclGetErrorString(e.0);
            if p.is_null() {
                String::new()
            } else {
                std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        CommError::Nccl(format!("{op}: {:?} ({text})", e.0))
    }
}

/// Runs `$body` with `$v` a read-only typed view of `$t` (F32 or U32, checked before):
/// NCCL's copies (broadcast, send, receive) move either as bits.
macro_rules! with_view {
    ($t:expr, |$v:ident| $body:expr) => {
        match $t.dtype() {
            DType::U32 => cuda::raw::with_u32_view($t, |$v| $body),
            _ => cuda::raw::with_f32_view($t, |$v, _| $body),
        }
    };
}
/// [`with_view!`] with a writable view.
macro_rules! with_view_mut {
    ($t:expr, |$v:ident| $body:expr) => {
        match $t.dtype() {
            DType::U32 => cuda::raw::with_u32_view_mut($t, |$v| $body),
            _ => cuda::raw::with_f32_view_mut($t, |$v, _| $body),
        }
    };
}

fn tensor_err(op: &'static str) -> impl Fn(tensor::Error) -> CommError {
    move |e| CommError::Nccl(format!("{op}: {e}"))
}

pub struct NcclCommunicator {
    comm: Comm,
    device: Device,
    rank: usize,
    world: usize,
    counters: ByteCounters,
    watchdog: Watchdog,
    /// What the owner is doing, named in a stalled call's message.
    label: String,
}

/// Where a watched call is: inside NCCL, queued on the stream until its event, or over.
enum Call {
    Inside,
    Queued(CudaEvent),
    Over,
}

impl Call {
    fn done(&self) -> bool {
        match self {
            Call::Inside => false,
            // The context is bound for the query; a query error (not "not ready") reads
            // as not done, which the timeout then reports.
            Call::Queued(e) => e.context().bind_to_thread().is_ok() && e.is_complete(),
            Call::Over => true,
        }
    }
}

/// A watched call's state, shared with the watchdog's completion check.
type Watched = Arc<Mutex<Call>>;

fn watched_call(w: &Watchdog, what: String) -> Watched {
    let call: Watched = Arc::new(Mutex::new(Call::Inside));
    let c = call.clone();
    w.watch(what, move || c.lock().map(|c| c.done()).unwrap_or(true));
    call
}

fn set_call(call: &Watched, state: Call) {
    if let Ok(mut c) = call.lock() {
        *c = state;
    }
}

/// The default reaction to a stalled NCCL call (see the module comment): the message on
/// standard error, then the process ends at once with status 3.
pub fn exit_on_stall(rank: usize) -> OnStall {
    Arc::new(move |msg| {
        eprintln!("error: rank {rank}: {msg}; ending the process (NCCL cannot be interrupted)");
        // _exit, not exit: exit would run the libraries' destructors (NCCL's, CUDA's)
        // while another thread is still inside NCCL. Standard error is unbuffered.
        // SAFETY: ends the process at once; nothing after it runs.
        unsafe { libc::_exit(3) }
    })
}

/// What a rank can say about itself before NCCL starts: ready, with the device's compute
/// stream bound to this thread, or why not. Everything that can fail locally happens
/// here, before the ranks' verdicts are exchanged: a rank failing after that exchange
/// would leave the others in `ncclCommInitRank`, which waits for it without a timeout.
fn local_check(device: Device) -> std::result::Result<Arc<cudarc::driver::CudaStream>, String> {
    let Device::Cuda(ordinal) = device else {
        return Err("the NCCL backend needs a CUDA device (got the CPU)".into());
    };
    cuda::device(ordinal).map_err(|e| e.to_string())?;
    let stream = cuda::raw::compute_stream(device).map_err(|e| format!("compute stream: {e}"))?;
    bind(&stream).map_err(|e| e.to_string())?;
    if !nccl_library_present() {
        return Err(
            "the NCCL library (libnccl.so) is not on the library path (pip install \
             nvidia-nccl-cu13 and put a libnccl.so link to its libnccl.so.2 on \
             LD_LIBRARY_PATH; see crates/comm/src/nccl.rs)"
                .into(),
        );
    }
    Ok(stream)
}

impl NcclCommunicator {
    /// Starts NCCL on `device` for the ranks of `tcp`'s job (collective: every rank calls
    /// it). A call pending for longer than `tcp`'s timeout ends the process
    /// ([`exit_on_stall`]).
    pub fn new(tcp: &mut Communicator, device: Device) -> Result<NcclCommunicator> {
        let on_stall = exit_on_stall(tcp.rank());
        Self::with_watchdog(tcp, device, on_stall)
    }

    /// [`NcclCommunicator::new`] with `on_stall` called (once, with the message naming the
    /// call) when a call is pending for longer than `tcp`'s timeout.
    pub fn with_watchdog(
        tcp: &mut Communicator,
        device: Device,
        on_stall: OnStall,
    ) -> Result<NcclCommunicator> {
        let (rank, world) = (tcp.rank(), tcp.world_size());
        let watchdog = Watchdog::new(tcp.timeout(), on_stall)
            .map_err(|e| CommError::Nccl(format!("starting NCCL's watchdog thread: {e}")))?;
        let mut mine = Vec::new();
        let mut ready = None;
        match local_check(device) {
            Ok(stream) => {
                ready = Some(stream);
                mine.push(1u8);
                if rank == 0 {
                    match Id::new() {
                        Ok(id) => mine.extend(id.internal().iter().map(|&c| c as u8)),
                        Err(e) => {
                            mine = vec![0u8];
                            mine.extend(nccl_err("ncclGetUniqueId")(e).to_string().bytes());
                        }
                    }
                }
            }
            Err(why) => {
                mine.push(0u8);
                mine.extend(why.bytes());
            }
        }
        let all = tcp.allgather_v(&mine)?;
        let refusals: Vec<String> = all
            .iter()
            .enumerate()
            .filter(|(_, m)| m.first() != Some(&1))
            .map(|(r, m)| {
                format!(
                    "rank {r}: {}",
                    String::from_utf8_lossy(m.get(1..).unwrap_or_default())
                )
            })
            .collect();
        if !refusals.is_empty() {
            return Err(CommError::Nccl(format!(
                "cannot start NCCL: {}",
                refusals.join("; ")
            )));
        }
        let id_bytes = &all[0][1..];
        let internal: [std::ffi::c_char; 128] = id_bytes
            .try_into()
            .map(|a: [u8; 128]| a.map(|b| b as std::ffi::c_char))
            .map_err(|_| {
                CommError::Nccl(format!(
                    "rank 0 sent an NCCL unique id of {} bytes, not 128",
                    id_bytes.len()
                ))
            })?;
        let stream = ready.ok_or_else(|| {
            CommError::Nccl("every rank reported ready, this one included, without a stream".into())
        })?;
        let setup = watched_call(
            &watchdog,
            format!("NCCL set-up (ncclCommInitRank, rank {rank} of {world})"),
        );
        let comm = Comm::from_rank(stream, rank, world, Id::uninit(internal));
        set_call(&setup, Call::Over);
        Ok(NcclCommunicator {
            comm: comm.map_err(nccl_err("ncclCommInitRank"))?,
            device,
            rank,
            world,
            counters: ByteCounters::default(),
            watchdog,
            label: String::new(),
        })
    }

    /// What the owner is doing from now on, named in the message of a call that stalls
    /// (the trainer: "step 12, exchanging parameter 3 (conv2.bias)").
    pub fn set_label(&mut self, label: impl Into<String>) {
        self.label = label.into();
    }

    /// Runs the NCCL call `op` under the watchdog: pending from now until the event
    /// recorded on the stream after it completes.
    fn watched<T>(&self, op: &'static str, f: impl FnOnce(&Comm) -> Result<T>) -> Result<T> {
        let what = match self.label.as_str() {
            "" => op.to_string(),
            label => format!("{op} ({label})"),
        };
        let call = watched_call(&self.watchdog, what);
        let out = f(&self.comm);
        if out.is_err() {
            set_call(&call, Call::Over);
            return out;
        }
        match self.comm.stream().record_event(None) {
            Ok(event) => set_call(&call, Call::Queued(event)),
            Err(e) => {
                set_call(&call, Call::Over);
                return Err(CommError::Nccl(format!(
                    "{op}: recording the watchdog's event: {e:?}"
                )));
            }
        }
        out
    }

    pub fn rank(&self) -> usize {
        self.rank
    }
    pub fn world_size(&self) -> usize {
        self.world
    }
    pub fn device(&self) -> Device {
        self.device
    }
    /// Nominal ring payload per collective kind (see the module comment).
    pub fn counters(&self) -> &ByteCounters {
        &self.counters
    }
    pub(crate) fn counters_mut(&mut self) -> &mut ByteCounters {
        &mut self.counters
    }

    /// `t` is on this communicator's device, contiguous, F32 (or U32 unless `f32_only`).
    fn check(&self, op: &'static str, t: &Tensor, f32_only: bool) -> Result<()> {
        crate::group::check_tensor(op, self.device, t, f32_only)?;
        bind(&self.comm.stream())
    }

    fn count(&mut self, kind: Collective, sent: usize, received: usize) {
        self.counters.sent(kind, sent, 0);
        self.counters.received(kind, received, 0);
    }

    /// Sums (or averages) `t` over the ranks, in place.
    pub fn allreduce(&mut self, t: &Tensor, op: ReduceOp) -> Result<()> {
        const OP: &str = "nccl allreduce";
        self.check(OP, t, true)?;
        let red = match op {
            ReduceOp::Sum => nccl::ReduceOp::Sum,
            ReduceOp::Average => nccl::ReduceOp::Avg,
        };
        self.watched(OP, |comm| {
            cuda::raw::with_f32_view_mut(t, |v, _| comm.all_reduce_in_place(v, &red))
                .map_err(tensor_err(OP))?
                .map_err(nccl_err(OP))
        })?;
        let ring = 2 * (self.world - 1) * t.elem_count() * 4 / self.world;
        self.count(Collective::Allreduce, ring, ring);
        Ok(())
    }

    /// Copies `root`'s `t` into every rank's `t`.
    pub fn broadcast(&mut self, t: &Tensor, root: usize) -> Result<()> {
        const OP: &str = "nccl broadcast";
        self.check(OP, t, false)?;
        self.check_peer(OP, root)?;
        self.watched(OP, |comm| {
            with_view_mut!(t, |v| comm.broadcast_in_place(v, root as i32))
                .map_err(tensor_err(OP))?
                .map_err(nccl_err(OP))
        })?;
        // Nothing leaves the GPU in a one-rank job.
        let bytes = if self.world > 1 {
            t.elem_count() * 4
        } else {
            0
        };
        if self.rank == root {
            self.count(Collective::Broadcast, bytes, 0);
        } else {
            self.count(Collective::Broadcast, 0, bytes);
        }
        Ok(())
    }

    /// Every rank's `t`, stacked: shape `[world, ..t's shape]`.
    pub fn allgather(&mut self, t: &Tensor) -> Result<Tensor> {
        const OP: &str = "nccl allgather";
        self.check(OP, t, false)?;
        let mut dims = vec![self.world];
        dims.extend_from_slice(t.dims());
        let out = Tensor::zeros(dims, t.dtype(), self.device).map_err(tensor_err(OP))?;
        self.watched(OP, |comm| {
            match t.dtype() {
                DType::U32 => cuda::raw::with_u32_view(t, |src| {
                    cuda::raw::with_u32_view_mut(&out, |dst| comm.all_gather(src, dst))
                }),
                _ => cuda::raw::with_f32_view(t, |src, _| {
                    cuda::raw::with_f32_view_mut(&out, |dst, _| comm.all_gather(src, dst))
                }),
            }
            .map_err(tensor_err(OP))?
            .map_err(tensor_err(OP))?
            .map_err(nccl_err(OP))
        })?;
        let bytes = t.elem_count() * 4;
        self.count(
            Collective::AllgatherV,
            (self.world - 1) * bytes,
            (self.world - 1) * bytes,
        );
        Ok(out)
    }

    /// Sends `send` to rank `to` and receives rank `from`'s message into `recv`, as one
    /// NCCL group (so a ring step cannot deadlock). Either side may be left out.
    ///
    /// Read `recv` on the compute stream (every tensor op is) or after
    /// [`NcclCommunicator::synchronize`]: cudarc records each buffer's "written" event when
    /// `send`/`recv` return, but inside a group NCCL queues the transfer only at
    /// `ncclGroupEnd`, after that event, so a reader on another stream that waited on the
    /// event alone could see the buffer before the transfer.
    pub fn send_recv(
        &mut self,
        send: Option<(&Tensor, usize)>,
        recv: Option<(&Tensor, usize)>,
    ) -> Result<()> {
        const OP: &str = "nccl send/recv";
        if let Some((t, peer)) = send {
            self.check(OP, t, false)?;
            self.check_peer(OP, peer)?;
        }
        if let Some((t, peer)) = recv {
            self.check(OP, t, false)?;
            self.check_peer(OP, peer)?;
        }
        self.watched(OP, |comm| {
            nccl::group_start().map_err(nccl_err("ncclGroupStart"))?;
            // The group must be closed whatever happens inside it, or NCCL stays in group
            // mode.
            let inner = (|| -> Result<()> {
                if let Some((t, peer)) = send {
                    let peer = peer as i32;
                    with_view!(t, |v| comm.send(v, peer))
                        .map_err(tensor_err(OP))?
                        .map_err(nccl_err("ncclSend"))?;
                }
                if let Some((t, peer)) = recv {
                    let peer = peer as i32;
                    with_view_mut!(t, |v| comm.recv(v, peer))
                        .map_err(tensor_err(OP))?
                        .map_err(nccl_err("ncclRecv"))?;
                }
                Ok(())
            })();
            let end = nccl::group_end().map_err(nccl_err("ncclGroupEnd"));
            inner?;
            end
        })?;
        // A message to this rank itself is a copy on the GPU, not traffic.
        let bytes = |side: Option<(&Tensor, usize)>| match side {
            Some((t, peer)) if peer != self.rank => t.elem_count() * 4,
            _ => 0,
        };
        let (sent, received) = (bytes(send), bytes(recv));
        self.count(Collective::SendRecv, sent, received);
        Ok(())
    }

    /// Waits until every collective queued so far has finished.
    pub fn synchronize(&self) -> Result<()> {
        cuda::synchronize(self.device).map_err(tensor_err("synchronize"))
    }

    fn check_peer(&self, op: &'static str, peer: usize) -> Result<()> {
        if peer >= self.world {
            return Err(CommError::Config(format!(
                "{op}: rank {peer} is outside a job of {} ranks",
                self.world
            )));
        }
        Ok(())
    }
}

/// NCCL finds its device through the calling thread's current CUDA context.
fn bind(stream: &Arc<cudarc::driver::CudaStream>) -> Result<()> {
    stream
        .context()
        .bind_to_thread()
        .map_err(|e| CommError::Nccl(format!("binding the CUDA context: {e:?}")))
}
