//! jobqueue: Redis reliable job queues with visibility timeouts, and the Kubernetes
//! operator that keeps them healthy.
//!
//! - [`queue`]: the protocol client (enqueue, claim, ack, extend, fail, reap, stats, ...).
//! - [`cli`]: the `jobqueue` command line.

pub mod cli;
pub mod queue;
