//! The methods, one file each, and the helpers they share for checkpoint state.

pub mod dense;
mod device_state;
pub mod dgc;
pub mod draws;
pub mod dropping;
pub mod fedavg;
pub mod gtopk;
pub mod onebit;
pub mod powersgd;
pub mod qsgd;
pub mod randomk;
pub mod sbc;
pub mod sign;
pub mod terngrad;
pub mod threshold;

pub(crate) use device_state::{DeviceVecs, PerParam};

use crate::method::StateTensors;
use crate::{CompressError, Result};
use tensor::Rng;

/// A generator's state as 16 f32 values, each a 16-bit piece (exact in f32).
pub(crate) fn rng_to_state(rng: &Rng) -> Vec<f32> {
    rng.state()
        .iter()
        .flat_map(|w| (0..4).map(move |k| ((w >> (16 * k)) & 0xFFFF) as f32))
        .collect()
}

/// Takes the `rng` entry out of `state`; the rest is returned for [`load_named`].
pub(crate) fn split_rng(method: &str, state: &StateTensors) -> Result<(Rng, StateTensors)> {
    let bad = || CompressError::Usage(format!("{method}: the checkpoint's rng state is malformed"));
    let (rng, rest): (Vec<_>, Vec<_>) = state.iter().cloned().partition(|(k, _)| k == "rng");
    let words = rng.first().map(|(_, v)| v).ok_or_else(bad)?;
    if words.len() != 16
        || words
            .iter()
            .any(|&x| !(0.0..65536.0).contains(&x) || x.fract() != 0.0)
    {
        return Err(bad());
    }
    let mut s = [0u64; 4];
    for (i, w) in s.iter_mut().enumerate() {
        *w = (0..4).fold(0, |acc, k| acc | ((words[4 * i + k] as u64) << (16 * k)));
    }
    Ok((Rng::from_state(s).ok_or_else(bad)?, rest))
}

/// Per-parameter vectors as state entries named `{name}.{index}` (what [`load_named`]
/// reads back).
pub(crate) fn named_state(name: &str, vecs: &[Vec<f32>]) -> StateTensors {
    vecs.iter()
        .enumerate()
        .map(|(i, v)| (format!("{name}.{i}"), v.clone()))
        .collect()
}

/// `load_state` of a method whose draws are counter-based (QSGD, TernGrad): it keeps no
/// state, but a checkpoint written when it drew from a sequential generator holds an
/// `rng` entry, which is accepted and dropped (its draws cannot be continued); anything
/// else is an error.
pub(crate) fn load_drawing_state(method: &str, state: &StateTensors) -> Result<()> {
    let rest: StateTensors = state.iter().filter(|(k, _)| k != "rng").cloned().collect();
    load_named(method, &rest, &mut [])
}

/// Fills each slot's per-parameter vectors from entries named `{slot}.{index}`, checking
/// that every entry is used and every length matches what `init` allocated.
pub(crate) fn load_named(
    method: &str,
    state: &StateTensors,
    slots: &mut [(&str, &mut Vec<Vec<f32>>)],
) -> Result<()> {
    let mut used = 0;
    for (name, vecs) in slots.iter_mut() {
        for (i, v) in vecs.iter_mut().enumerate() {
            let key = format!("{name}.{i}");
            let saved = state.iter().find(|(k, _)| *k == key).ok_or_else(|| {
                CompressError::Usage(format!("{method}: the checkpoint has no state '{key}'"))
            })?;
            if saved.1.len() != v.len() {
                return Err(CompressError::Usage(format!(
                    "{method}: state '{key}' has {} values in the checkpoint, {} in this model",
                    saved.1.len(),
                    v.len()
                )));
            }
            v.copy_from_slice(&saved.1);
            used += 1;
        }
    }
    if used != state.len() {
        return Err(CompressError::Usage(format!(
            "{method}: the checkpoint holds {} state tensors, this configuration {used}",
            state.len()
        )));
    }
    Ok(())
}
