//! What the libraries log (takeovers, cleared claims, retired waiters, pauses, a fleet lease
//! lost), shown on stderr as `worklane: LEVEL target: message` when asked: `-v` (info), `-vv`
//! (debug), `-vvv` (trace), or `WORKLANE_LOG=error|warn|info|debug|trace|off`, which wins.
//! Without either, warnings and errors are shown.

use log::{LevelFilter, Log, Metadata, Record};

struct Stderr;

impl Log for Stderr {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &Record<'_>) {
        if self.enabled(record.metadata()) {
            crate::out::errln!(
                "worklane: {} {}: {}",
                record.level().as_str().to_ascii_lowercase(),
                record.target(),
                record.args()
            );
        }
    }

    fn flush(&self) {}
}

/// The level `-v` given `count` times asks for, or `WORKLANE_LOG` (`env`), which wins; `Err`
/// names a `WORKLANE_LOG` that is not a level.
pub(crate) fn level(count: u8, env: Option<&str>) -> Result<LevelFilter, String> {
    if let Some(text) = env.filter(|t| !t.is_empty()) {
        return text.parse::<LevelFilter>().map_err(|_| {
            format!(
                "WORKLANE_LOG={text:?} is not a level: use error, warn, info, debug, trace or off"
            )
        });
    }
    Ok(match count {
        0 => LevelFilter::Warn,
        1 => LevelFilter::Info,
        2 => LevelFilter::Debug,
        _ => LevelFilter::Trace,
    })
}

/// Installs the logger at `level` (once, at start).
pub(crate) fn init(level: LevelFilter) {
    static LOGGER: Stderr = Stderr;
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(level);
    }
}

#[cfg(test)]
mod tests {
    use super::level;
    use log::LevelFilter;

    #[test]
    fn the_variable_wins_over_v_and_is_checked() {
        assert_eq!(level(0, None), Ok(LevelFilter::Warn));
        assert_eq!(level(1, None), Ok(LevelFilter::Info));
        assert_eq!(level(2, None), Ok(LevelFilter::Debug));
        assert_eq!(level(5, None), Ok(LevelFilter::Trace));
        assert_eq!(level(2, Some("error")), Ok(LevelFilter::Error));
        assert_eq!(level(0, Some("OFF")), Ok(LevelFilter::Off));
        assert_eq!(level(1, Some("")), Ok(LevelFilter::Info), "empty: unset");
        assert!(level(0, Some("loud")).is_err_and(|e| e.contains("loud")));
    }
}
