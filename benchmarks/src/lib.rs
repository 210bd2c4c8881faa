//! Shared helpers for the benchmark binaries (timing, reference scripts).
