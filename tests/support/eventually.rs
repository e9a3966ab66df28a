//! Waiting for a condition with a bounded deadline: the one poll loop the tests share.
//! It fails with what was awaited and, where the test gives one, what explains it (a
//! process's log, the last value seen).

use std::time::Duration;

use tokio::time::Instant;

/// What a condition returns: `true`, or `Some(value)`, once it holds.
pub trait Outcome {
    type Value;
    fn holds(self) -> Option<Self::Value>;
}

impl Outcome for bool {
    type Value = ();
    fn holds(self) -> Option<()> {
        self.then_some(())
    }
}

impl<T> Outcome for Option<T> {
    type Value = T;
    fn holds(self) -> Option<T> {
        self
    }
}

/// Await `check` until it holds; fail the test naming `what` after 30 s.
pub async fn eventually<R: Outcome>(what: &str, check: impl AsyncFnMut() -> R) -> R::Value {
    Wait::for_(what).until(check).await
}

/// A wait for something: 30 s, polled every 10 ms, unless told otherwise.
pub struct Wait<'a> {
    what: String,
    within: Duration,
    every: Duration,
    explain: Option<Box<dyn Fn() -> String + Send + Sync + 'a>>,
}

impl<'a> Wait<'a> {
    pub fn for_(what: impl Into<String>) -> Wait<'a> {
        Wait {
            what: what.into(),
            within: Duration::from_secs(30),
            every: Duration::from_millis(10),
            explain: None,
        }
    }

    /// The deadline.
    pub fn within(mut self, within: Duration) -> Self {
        self.within = within;
        self
    }

    /// The pause between two checks.
    pub fn every(mut self, every: Duration) -> Self {
        self.every = every;
        self
    }

    /// Text the failure adds, read when it happens (e.g. a process's log).
    pub fn explained_by(mut self, explain: impl Fn() -> String + Send + Sync + 'a) -> Self {
        self.explain = Some(Box::new(explain));
        self
    }

    /// Await `check` until it holds, in a test's runtime.
    pub async fn until<R: Outcome>(self, mut check: impl AsyncFnMut() -> R) -> R::Value {
        let start = Instant::now();
        loop {
            if let Some(value) = check().await.holds() {
                return value;
            }
            self.fail_if_late(start);
            tokio::time::sleep(self.every).await;
        }
    }

    /// Block on `check` until it holds, outside a runtime (or in set-up code that is
    /// synchronous anyway).
    pub fn until_blocking<R: Outcome>(self, mut check: impl FnMut() -> R) -> R::Value {
        let start = Instant::now();
        loop {
            if let Some(value) = check().holds() {
                return value;
            }
            self.fail_if_late(start);
            std::thread::sleep(self.every);
        }
    }

    fn fail_if_late(&self, start: Instant) {
        if start.elapsed() < self.within {
            return;
        }
        let explanation = self.explain.as_ref().map(|f| f()).unwrap_or_default();
        let sep = if explanation.is_empty() { "" } else { "; " };
        panic!(
            "timed out after {:?} waiting for {}{sep}{explanation}",
            self.within, self.what
        );
    }
}
