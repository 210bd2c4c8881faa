//! Test hooks, compiled only with the `fault-injection` feature, which train's own tests
//! turn on (through their dev-dependency on the crate itself): a rank that dies at a step
//! (`GRADEX_FAULT_RANK=r`, `GRADEX_FAULT_STEP=s`) and a rank interrupted before a step
//! (`GRADEX_INTERRUPT_STEP=RANK:STEP`). A build without the feature (the release binary)
//! reads neither variable.

/// With GRADEX_FAULT_RANK=r and GRADEX_FAULT_STEP=s, rank r dies abruptly (no cleanup,
/// like a killed process) when it reaches step s. The tests use it to check that a dead
/// worker ends the job with an error naming it and leaves a checkpoint that resumes.
#[cfg(feature = "fault-injection")]
pub(super) fn die_if_asked(rank: usize, step: usize) {
    let var = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<usize>().ok());
    if var("GRADEX_FAULT_RANK") == Some(rank) && var("GRADEX_FAULT_STEP") == Some(step) {
        crate::progress::say_err(&format!(
            "rank {rank}: GRADEX_FAULT_STEP={step} reached, exiting abruptly"
        ));
        std::process::exit(17);
    }
}

#[cfg(not(feature = "fault-injection"))]
pub(super) fn die_if_asked(_rank: usize, _step: usize) {}

/// The step before which `GRADEX_INTERRUPT_STEP=RANK:STEP` interrupts rank `rank`, as a
/// Ctrl-C would.
#[cfg(feature = "fault-injection")]
pub(super) fn interrupt_step(rank: usize) -> Option<usize> {
    let v = std::env::var("GRADEX_INTERRUPT_STEP").ok()?;
    let (r, s) = v.split_once(':')?;
    (r.parse::<usize>().ok()? == rank).then(|| s.parse::<usize>().ok())?
}

#[cfg(not(feature = "fault-injection"))]
pub(super) fn interrupt_step(_rank: usize) -> Option<usize> {
    None
}
