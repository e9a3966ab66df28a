//! jobqueue: Redis reliable job queues with visibility timeouts, and the Kubernetes
//! operator that keeps them healthy.
//!
//! - [`queue`]: the protocol client (enqueue, claim, ack, extend, fail, reap, stats, ...).
//! - [`worker`]: the worker runtime (claim, renew, ack or fail) and the exec handler.
//! - [`cli`]: the `jobqueue` command line.

pub mod cli;
pub mod queue;
pub mod worker;
