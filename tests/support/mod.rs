//! Test support shared by the integration tests, one file per kind of stand-in: the
//! Redis harness (`redis`), the history of a server's writes read back from its AOF
//! (`aof`), what the chaos scenarios share (`chaos`), certificates and a redis-server that asks for them
//! (`certs`), the one poll loop with a deadline (`eventually`), the objects the operator
//! tests build (`fixtures`), kube's mock API for exact-request tests (`mock_api`), the
//! stand-in API server over real HTTP (`standin`), TCP proxies that cut a connection the
//! way a partition does (`proxy`) or lose the replies of chosen requests
//! (`reply_dropper`), moving a Cluster slot between nodes key by key (`slot_migration`),
//! the web console and its browser scenarios (`console`), `jobqueue worker --exec` as a
//! child process (`exec`), worker processes killed and restarted at will (`fleet`), every
//! process that fires schedules, workers and operators, stopped and started together
//! (`firers`), the outcomes scenarios: exec and library workers that report progress and
//! results (`outcomes`), the process table (`procs`), a fleet of in-process workers under
//! a rate limit (`rate_limits`), and the workers' own records of the runs of jobs that the
//! chaos tallies count (`runs`).
//! Every test binary includes it with `mod support;` and uses a part.
#![allow(dead_code)]

pub mod aof;
pub mod certs;
pub mod chaos;
pub mod console;
pub mod eventually;
pub mod exec;
pub mod firers;
pub mod fixtures;
pub mod fleet;
pub mod mock_api;
pub mod outcomes;
pub mod procs;
pub mod proxy;
pub mod rate_limits;
pub mod redis;
pub mod reply_dropper;
pub mod runs;
pub mod sentinel;
pub mod slot_migration;
pub mod standin;
