//! The command's messages show durations as core's errors do:
//! [`fencelock::duration::shown`]. JSON keeps exact milliseconds.

pub(crate) use fencelock::duration::shown;

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Core's errors show their durations the same way.
    #[test]
    fn core_errors_agree() {
        for duration in [
            Duration::from_nanos(2_027_819),
            Duration::from_millis(500),
            Duration::from_secs(10),
            Duration::from_secs(90),
        ] {
            let error = fencelock::Error::Timeout {
                key: "k".into(),
                waited: duration,
            };
            assert_eq!(
                error.to_string(),
                format!("lock \"k\" not obtained within {}", shown(duration))
            );
        }
    }
}
