//! `free_port`: one source of ports for every server this crate starts.
//!
//! A port is probed by binding `127.0.0.1:0` and closing the socket again, so the kernel may
//! hand the same number to the next probe. Two servers started side by side (a Redlock test
//! starts five at once) could then be given one port: the second fails to bind, but the
//! first already answers on it, and a readiness check that only knocks on the port takes the
//! first server for the second. Every port handed out here is remembered for the life of the
//! process and never handed out again, so servers of one process never share a port.

use std::collections::HashSet;
use std::io;
use std::net::TcpListener;
use std::sync::{Mutex, PoisonError};

static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// How many probes may return an already handed-out port before giving up.
const PROBES: usize = 1_000;

/// A port of 127.0.0.1 that was free a moment ago and that no earlier call in this process
/// returned.
pub fn free_port() -> io::Result<u16> {
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(PoisonError::into_inner);
    let handed_out = handed_out.get_or_insert_with(HashSet::new);
    for _ in 0..PROBES {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        if handed_out.insert(port) {
            return Ok(port);
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AddrInUse,
        format!(
            "no unused port of 127.0.0.1 in {PROBES} probes ({} already handed out by this process)",
            handed_out.len()
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without the record of handed-out ports, the kernel repeats a number within a few
    /// hundred probes (about 14,000 even ephemeral ports to choose from).
    #[test]
    fn no_port_is_handed_out_twice() {
        let ports: Vec<u16> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    scope.spawn(|| {
                        (0..500)
                            .map(|_| free_port().expect("a free port"))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().expect("probe thread"))
                .collect()
        });
        let distinct: HashSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len(), "a port was handed out twice");
    }
}
