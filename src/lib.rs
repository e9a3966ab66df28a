//! jobqueue: Redis reliable job queues with visibility timeouts, and the Kubernetes
//! operator that keeps them healthy.
//!
//! - [`queue`]: the protocol client (enqueue, claim, ack, extend, fail, reap, stats, ...).
//! - [`worker`]: the worker runtime (claim, renew, ack or fail) and the exec handler.
//! - [`crd`]: the `JobQueue` custom resource.
//! - [`controller`]: the operator that reaps queues and publishes their status.
//! - [`cli`]: the `jobqueue` command line.
//! - [`console`]: the web console (`jobqueue ui`).
//! - [`duration`]: how durations are typed and printed, everywhere.
//! - [`shutdown`]: waiting for SIGTERM or Ctrl-C.
//! - [`telemetry`]: the logs of the long-running commands (operator, worker).

pub mod cli;
pub mod console;
pub mod controller;
pub mod crd;
pub mod duration;
pub mod queue;
pub mod shutdown;
pub mod telemetry;
pub mod worker;
