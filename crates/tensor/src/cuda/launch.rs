//! Kernel launches: [`launch!`] looks a kernel up by name in the compiled modules, pushes
//! its arguments and launches it on the device's compute stream, the sequence every
//! kernel's launch code repeated; [`launched`] maps a launch's result to ours, naming the
//! kernel.

use super::device::cuda_err;
use crate::Result;

/// `unsafe { launch!(dev, name, cfg; arg, ...) }`: launches the kernel `name` (a `&str`)
/// of `dev` (a `CudaDevice`) on its compute stream with launch configuration `cfg` and the
/// arguments in the kernel's parameter order (`&mut` for what it writes); a `Result<()>`
/// whose error names the kernel.
///
/// The launch itself is cudarc's unsafe `launch`, which the macro leaves to the caller's
/// `unsafe` block (it does not compile outside one): the caller promises that the
/// arguments are the kernel's parameters in order, type and mutability, and that every
/// buffer holds all the elements the threads of `cfg` address, and says why in a
/// `// SAFETY:` line above.
macro_rules! launch {
    ($dev:expr, $name:expr, $cfg:expr; $($arg:expr),+ $(,)?) => {{
        let name: &str = $name;
        let cfg = $cfg;
        match $dev.func(name) {
            Ok(f) => {
                let mut b = $dev.stream.launch_builder(&f);
                $( cudarc::driver::PushKernelArg::arg(&mut b, $arg); )+
                $crate::cuda::launch::launched(name, b.launch(cfg))
            }
            Err(e) => Err(e),
        }
    }};
}
pub(crate) use launch;

/// Maps a kernel launch's result to ours, naming the kernel.
pub(crate) fn launched<T>(
    name: &str,
    r: std::result::Result<T, cudarc::driver::DriverError>,
) -> Result<()> {
    r.map(|_| ()).map_err(cuda_err(name))
}
