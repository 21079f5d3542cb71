//! `fencelock._fencelock`: the Rust half of the `fencelock` Python package.
//!
//! The asyncio API ([`aio`]) runs on the tokio runtime of `pyo3-async-runtimes`; the blocking
//! API ([`sync`]) on `fencelock::blocking`'s own runtime, with the GIL released while it waits.
//! Every error crosses as an exception of `fencelock._errors` ([`errors`]), never as a panic.

use pyo3::prelude::*;

mod aio;
mod args;
mod errors;
mod fence;
mod sync;

#[pymodule]
fn _fencelock(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<fence::Fence>()?;
    m.add_class::<aio::Locker>()?;
    m.add_class::<aio::Guard>()?;
    m.add_class::<aio::Storage>()?;
    let py = m.py();
    m.add("SyncLocker", py.get_type::<sync::Locker>())?;
    m.add("SyncGuard", py.get_type::<sync::Guard>())?;
    m.add("SyncStorage", py.get_type::<sync::Storage>())?;
    m.add("DEFAULT_WAIT", args::DEFAULT_WAIT_SECS)?;
    Ok(())
}
