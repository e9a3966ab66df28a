//! Progress of long operations (`enqueue --stdin`, `dead redrive/purge --all`) on
//! stderr, redrawn in place, and only when stderr is a terminal: logs and pipes stay
//! quiet.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use super::format::progress_line;

/// Nothing is drawn for operations shorter than this, nor redrawn more often.
const EVERY: Duration = Duration::from_millis(200);

pub struct Progress {
    doing: &'static str,
    noun: &'static str,
    total: Option<u64>,
    started: Instant,
    drawn: Option<Instant>,
    enabled: bool,
}

impl Progress {
    /// Shown when stderr is a terminal.
    pub fn on_stderr(doing: &'static str, noun: &'static str, total: Option<u64>) -> Progress {
        Progress::new(doing, noun, total, std::io::stderr().is_terminal())
    }

    pub fn new(
        doing: &'static str,
        noun: &'static str,
        total: Option<u64>,
        enabled: bool,
    ) -> Progress {
        Progress {
            doing,
            noun,
            total,
            started: Instant::now(),
            drawn: None,
            enabled,
        }
    }

    /// `done` so far: redraws the line at most every [`EVERY`].
    pub fn update(&mut self, done: u64) {
        let now = Instant::now();
        let due = self.drawn.unwrap_or(self.started) + EVERY;
        if !self.enabled || now < due {
            return;
        }
        self.drawn = Some(now);
        let line = progress_line(self.doing, done, self.total, self.noun, now - self.started);
        // A closed stderr must not stop the work: errors are ignored.
        let _ = write!(std::io::stderr().lock(), "\r\x1b[2K{line}");
    }

    /// Clears the line, so the summary that follows starts on a clean one.
    pub fn finish(&mut self) {
        if self.drawn.take().is_some() {
            let _ = write!(std::io::stderr().lock(), "\r\x1b[2K");
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quiet_when_not_a_terminal() {
        let mut progress = Progress::new("enqueueing", "job", None, false);
        progress.started -= EVERY * 10;
        progress.update(5_000);
        assert!(progress.drawn.is_none());
    }

    #[test]
    fn draws_once_an_operation_is_long() {
        let mut progress = Progress::new("purging", "dead job", Some(10), true);
        progress.update(1);
        assert!(progress.drawn.is_none(), "nothing before {EVERY:?}");
        progress.started -= EVERY * 2;
        progress.update(2);
        assert!(progress.drawn.is_some());
        progress.finish();
        assert!(progress.drawn.is_none());
    }
}
