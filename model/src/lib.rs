//! A model of the jobqueue protocol (docs/protocol.md, lua/*.lua), checked with
//! [stateright](https://docs.rs/stateright): every interleaving of producers, workers,
//! reapers, lost replies, crashes, a failover and a partition shrink, up to a bound.
//! docs/model.md says what is modelled and what is not.

pub mod redis;

use std::fmt::Write as _;

use stateright::{Model, Property};

pub use redis::{How, Job, Outcome, Redis, Reply, Req, Script, Settle, Time, Token, Worker};

/// A fix of the hardening work (issue 23) reverted in the model, to show the checker finds
/// the defect it fixed; plus two mutations of core rules that show the liveness and
/// fencing properties bite.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Bug {
    /// A request record answers whoever sends its request id (defect 6: a repeat answered
    /// to another worker, or to other arguments).
    ForeignReplay,
    /// A lease replayed to a retry counts its local deadline from that retry's send, not
    /// the first send of its request (defect 3: a local deadline later than the lease).
    LateDeadline,
    /// A claim or settle_claim whose `WAIT` timed out has its reply thrown away, so the
    /// leases it made have no worker (defect 1: a lease stranded after a WAIT timeout).
    StrandOnWaitTimeout,
    /// claim and reap drop an id with no job hash instead of setting it aside.
    DropOrphans,
}

impl Bug {
    pub const ALL: [Bug; 4] = [
        Bug::ForeignReplay,
        Bug::LateDeadline,
        Bug::StrandOnWaitTimeout,
        Bug::DropOrphans,
    ];

    pub fn parse(s: &str) -> Option<Bug> {
        Some(match s {
            "foreign-replay" => Bug::ForeignReplay,
            "late-deadline" => Bug::LateDeadline,
            "strand-on-wait-timeout" => Bug::StrandOnWaitTimeout,
            "drop-orphans" => Bug::DropOrphans,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Bug::ForeignReplay => "foreign-replay",
            Bug::LateDeadline => "late-deadline",
            Bug::StrandOnWaitTimeout => "strand-on-wait-timeout",
            Bug::DropOrphans => "drop-orphans",
        }
    }

    /// The property the checker must find broken.
    pub fn breaks(self) -> &'static str {
        match self {
            Bug::ForeignReplay => NO_OVERLAP,
            Bug::LateDeadline => NO_OVERLAP,
            Bug::StrandOnWaitTimeout => NONE_STRANDED,
            Bug::DropOrphans => NO_JOB_LOST,
        }
    }
}

/// The bounds and settings of one check.
#[derive(Clone, Debug)]
pub struct Params {
    pub bug: Option<Bug>,
    pub jobs: u8,
    pub workers: u8,
    /// partitions at the start; with `shrink`, the route layout can go down to 1
    pub partitions: u8,
    pub shrink: bool,
    /// the clock runs from 0 to this
    pub max_clock: Time,
    /// the visibility every claim and extend asks for (ticks)
    pub vis: Time,
    /// record life: min(visibility, RECORD_MS)
    pub record_life: Time,
    /// a lost claim is sent again with its request id only while now < first send + this
    /// (the client's retry window, shorter than the record's life)
    pub retry_window: Time,
    pub max_attempts: u8,
    /// fail mode retry's policy backoff (0: pending at once)
    pub backoff: Time,
    /// request ids a worker may use (bounds the state space)
    pub max_requests: u8,
    /// faults in one run: lost requests or replies, crashes, foreign request ids,
    /// failovers, hashes away
    pub faults: u8,
    /// requests and replies may be lost (then retried with their request id)
    pub lose: bool,
    /// workers may crash
    pub crash: bool,
    /// steps from the start explored (breadth first): the bound of the check
    pub depth: usize,
    /// `replicated` durability: claim and settle_claim WAIT; a replica that lags makes
    /// the WAIT time out, and a failover promotes the replica
    pub replicated: bool,
    pub failover: bool,
    /// hashes away for a while (slot migration): ids set aside and restored
    pub migration: bool,
    /// a worker may send a request id of another worker (by mistake, or two equal ids)
    pub foreign: bool,
    /// delayed enqueues
    pub delays: bool,
}

/// The scenarios checked: each enables some of the faults (a check with every fault
/// enabled at once grows past what a test can wait for; each fault meets every
/// interleaving of the others' actors in its own scenario, and `all` mixes them at a
/// smaller clock).
pub const SCENARIOS: [&str; 6] = [
    "replies",
    "durability",
    "foreign",
    "migration",
    "partitions",
    "all",
];

impl Params {
    fn base() -> Params {
        Params {
            bug: None,
            jobs: 1,
            workers: 2,
            partitions: 1,
            shrink: false,
            max_clock: 3,
            vis: 2,
            record_life: 2,
            retry_window: 2,
            max_attempts: 2,
            backoff: 1,
            max_requests: 3,
            faults: 1,
            depth: 14,
            lose: false,
            crash: false,
            replicated: false,
            failover: false,
            migration: false,
            foreign: false,
            delays: false,
        }
    }

    /// One scenario at the bound `make test` runs (`large` false) or `make model` runs.
    pub fn scenario(name: &str, large: bool) -> Option<Params> {
        let b = Params::base();
        let mut p = match name {
            // lost requests and replies, retries with the request id, crashes
            "replies" => Params {
                lose: true,
                crash: true,
                faults: 2,
                ..b
            },
            // replicated durability: WAIT timeouts, a failover dropping unreplicated writes
            "durability" => Params {
                replicated: true,
                failover: true,
                lose: true,
                faults: 2,
                ..b
            },
            // a worker sends another worker's request id
            "foreign" => Params {
                foreign: true,
                lose: true,
                faults: 2,
                ..b
            },
            // job hashes away for a while: ids set aside and restored
            "migration" => Params {
                migration: true,
                delays: true,
                faults: 2,
                ..b
            },
            // two jobs over two partitions, the route layout shrinking to one
            "partitions" => Params {
                jobs: 2,
                partitions: 2,
                shrink: true,
                delays: true,
                crash: true,
                faults: 1,
                max_requests: 3,
                ..b
            },
            // no fault: the actors alone
            "none" => b,
            // every fault at once, at a shorter clock
            "all" => Params {
                lose: true,
                crash: true,
                replicated: true,
                failover: true,
                migration: true,
                foreign: true,
                faults: 2,
                max_clock: 3,
                ..b
            },
            _ => return None,
        };
        // the depth each scenario is explored to: all its states within that many steps
        p.depth = match (name, large) {
            ("partitions" | "all", false) => 11,
            ("durability" | "foreign", false) => 13,
            (_, false) => 16,
            ("partitions" | "all", true) => 13,
            ("durability" | "foreign", true) => 15,
            (_, true) => 18,
        };
        if large {
            p.max_clock += 2;
            p.max_requests += 1;
        }
        Some(p)
    }

    pub fn with_bug(mut self, bug: Option<Bug>) -> Params {
        self.bug = bug;
        self
    }
}

pub struct ProtocolModel {
    pub p: Params,
}

/// Where a worker is with one job (the model's workers claim one job at a time).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    Running,
    /// the run ended; the lease is to be acked, failed (retry) or released
    Finished(How),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Lease {
    pub job: Job,
    pub part: u8,
    pub token: Token,
    /// the local deadline, on the worker's clock (the model's clock: no drift)
    pub deadline: Time,
    pub phase: Phase,
    /// the lease came from a record (a retry's reply)
    pub replayed: bool,
    /// the call that made it was not confirmed by the replica (WAIT timed out)
    pub unconfirmed: bool,
    /// a failover undid the write this lease rests on (its claim or its last extend):
    /// docs/operations.md (Durability) says what that leaves; the overlap property
    /// does not hold such a run to the bound
    pub rolled_back: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum CallKind {
    Claim,
    SettleClaim(Vec<Settle>),
    AckOrFail(Settle),
    Extend(Job, Token),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Wire {
    InFlight,
    Replied(Reply),
    Lost,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Call {
    pub req: Req,
    pub part: u8,
    pub kind: CallKind,
    pub first_sent: Time,
    pub last_sent: Time,
    pub wire: Wire,
    /// a failover came between the script and its reply: the WAIT on the old primary
    /// cannot be confirmed, and what the script wrote may be gone
    pub rolled_back: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct WorkerState {
    pub crashed: bool,
    pub requests: u8,
    pub lease: Option<Lease>,
    pub call: Option<Call>,
    /// the request id and script of its last claim or settle_claim
    pub last: Option<(Req, u8, bool)>,
}

/// A lease a reply handed to a worker: while Redis holds it and its local deadline has not
/// passed, the worker (alive) must know it (run it, or be settling it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Handed {
    pub worker: Worker,
    pub job: Job,
    pub token: Token,
    pub deadline: Time,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    pub clock: Time,
    pub redis: Redis,
    /// the replica's copy when it lags the primary (None: in step)
    pub replica: Option<Box<Redis>>,
    pub workers: Vec<WorkerState>,
    pub enqueued: Vec<bool>,
    /// partitions producers route to
    pub route: u8,
    /// partitions workers and reapers cover (route + the ones draining)
    pub cover: u8,
    pub faults_left: u8,
    pub handed: Vec<Handed>,
    /// a stale ack, fail or extend changed the queue
    pub stale_changed: bool,
    /// a worker was told "acked" for a lease whose ack was not applied
    pub false_ack: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// a producer: enqueue.lua (delayed or not), confirmed by the replica
    Enqueue(Job, bool),
    Tick,
    /// the route layout goes from 2 partitions to 1 (docs/partitions.md, shrinking step 2)
    Shrink,
    /// workers and reapers stop covering the partition left out, once it is drained (step 4)
    Retire,
    /// a worker sends claim.lua to a partition
    Claim(Worker, u8),
    /// a worker sends settle_claim.lua: its finished lease's ack/fail (if any) and a claim
    SettleClaim(Worker, u8),
    /// a worker sends ack.lua / fail.lua for its finished lease
    AckOrFail(Worker),
    /// a worker sends extend.lua for its running lease
    Extend(Worker),
    /// the run of a worker's job ends: success, or an error (fail mode retry)
    Finish(Worker, How),
    /// Redis runs the call the worker sent (atomically)
    Exec(Worker),
    /// the request is lost before Redis
    LoseRequest(Worker),
    /// the reply is lost after Redis ran the call
    LoseReply(Worker),
    /// the reply reaches the worker (after WAIT, under replicated)
    Deliver(Worker),
    /// a lost call is sent again with the same request id (and arguments)
    Resend(Worker),
    /// the worker gives up a lost call (past its retry window)
    GiveUp(Worker),
    /// the worker process dies
    Crash(Worker),
    /// a worker sends a claim (or settle_claim) with another worker's request id
    Foreign(Worker, Worker),
    /// reap.lua on a partition (twin reapers: each reap is one atomic step)
    Reap(u8),
    /// the replica catches up
    Replicate,
    /// the replica is promoted: writes not replicated are gone
    Failover,
    /// a job hash goes to another node for a while / comes back
    HashAway(Job),
    HashBack(Job),
}

pub const NO_JOB_LOST: &str =
    "no job is lost: from every state, a fault-free run ends every job acked or dead";
pub const STALE_CHANGES_NOTHING: &str =
    "an ack, fail or extend with a token that is not the current lease's changes nothing";
pub const ONE_LIVE_LEASE: &str = "at most one live lease per job";
pub const ACK_ONCE: &str =
    "a replayed request never applies an ack twice, nor reports an ack that was not applied";
pub const NO_OVERLAP: &str =
    "a worker that honours its local deadline never overlaps another's run of the same job";
pub const NONE_STRANDED: &str =
    "a lease handed to a live worker is run or settled by it, never stranded";

impl ProtocolModel {
    pub fn new(p: Params) -> ProtocolModel {
        ProtocolModel { p }
    }

    fn worker_knows(w: &WorkerState, job: Job, token: Token) -> bool {
        if matches!(w.lease, Some(l) if l.job == job && l.token == token) {
            return true;
        }
        match &w.call {
            Some(c) => match &c.kind {
                CallKind::SettleClaim(s) => s.iter().any(|s| s.job == job && s.token == token),
                CallKind::AckOrFail(s) => s.job == job && s.token == token,
                _ => false,
            },
            None => false,
        }
    }

    /// A fault-free continuation from `s`: the clock passes every lease and backoff, the
    /// reapers run on every covered partition, and a healthy worker claims and acks until
    /// nothing is left. `true` when every enqueued job ends acked or dead.
    pub fn can_finish(&self, s: &State) -> bool {
        let p = &self.p;
        let mut r = s.redis.clone();
        r.away.iter_mut().for_each(|a| *a = false);
        let mut now = s.clock;
        let mut seq = 0u8;
        let rounds = p.jobs as usize * (p.max_attempts as usize + 2) + 4;
        for _ in 0..rounds {
            if self.all_finished(s, &r) {
                return true;
            }
            now = now.saturating_add(p.vis + p.backoff + 1);
            for part in 0..s.cover as usize {
                r.reap(p, part, now);
                loop {
                    seq = seq.wrapping_add(1);
                    let token = Token {
                        at: now,
                        worker: u8::MAX,
                        req: Req {
                            worker: u8::MAX,
                            seq,
                        },
                        slot: true,
                    };
                    let leases = r.claim_steps(p, part, now, token);
                    if leases.is_empty() {
                        break;
                    }
                    for (job, token) in leases {
                        let s = Settle {
                            job,
                            token,
                            how: How::Ack,
                        };
                        r.ack_or_fail(p, part, s, now);
                    }
                }
            }
        }
        self.all_finished(s, &r)
    }

    fn all_finished(&self, s: &State, r: &Redis) -> bool {
        (0..self.p.jobs as usize).all(|j| {
            !s.enqueued[j]
                || r.acked[j].is_some()
                || matches!(&r.hashes[j], Some(h) if h.status == redis::Status::Dead)
        })
    }

    /// The worker ended its lease `token` itself (a reply settled it, a renewal was stale,
    /// or the deadline passed): nothing is stranded.
    fn let_go(s: &mut State, w: usize, token: Token) {
        s.handed
            .retain(|h| !(h.worker as usize == w && h.token == token));
    }

    fn next_req(w: &mut WorkerState, me: Worker) -> Req {
        let req = Req {
            worker: me,
            seq: w.requests,
        };
        w.requests += 1;
        req
    }

    /// Runs the script of worker `w`'s call on Redis (one atomic step).
    fn exec(&self, s: &mut State, w: usize) {
        let now = s.clock;
        let call = s.workers[w].call.clone().expect("a call");
        let before = s.redis.clone();
        let p = call.part as usize;
        let reply = match &call.kind {
            CallKind::Claim => s.redis.claim(&self.p, p, call.req, w as Worker, now),
            CallKind::SettleClaim(settles) => {
                s.redis
                    .settle_claim(&self.p, p, call.req, w as Worker, settles, now)
            }
            CallKind::AckOrFail(settle) => s.redis.ack_or_fail(&self.p, p, *settle, now),
            CallKind::Extend(job, token) => s.redis.extend(&self.p, p, *job, *token, now),
        };
        // properties checked on the step itself: a stale answer changed nothing
        let stale = matches!(
            (&call.kind, &reply),
            (CallKind::AckOrFail(_), Reply::Settled(Outcome::Stale))
                | (CallKind::Extend(..), Reply::Extended(None))
        );
        if stale && s.redis != before {
            s.stale_changed = true;
        }
        let told: Vec<(Settle, Outcome)> = match (&call.kind, &reply) {
            (CallKind::AckOrFail(st), Reply::Settled(o)) => vec![(*st, *o)],
            (CallKind::SettleClaim(sts), Reply::Leases { results, .. }) => {
                sts.iter().copied().zip(results.iter().copied()).collect()
            }
            _ => Vec::new(),
        };
        for (st, o) in told {
            if o == Outcome::Acked && s.redis.acked[st.job as usize] != Some(st.token) {
                s.false_ack = true;
            }
        }
        if s.redis != before && s.replica.is_none() && self.p.failover {
            s.replica = Some(Box::new(before));
        }
        s.workers[w].call.as_mut().unwrap().wire = Wire::Replied(reply);
    }

    /// The worker reads the reply of its call (the Rust worker runtime, src/worker/).
    fn deliver(&self, s: &mut State, w: usize) {
        let now = s.clock;
        let call = s.workers[w].call.take().expect("a call");
        let Wire::Replied(reply) = call.wire else {
            unreachable!()
        };
        // WAIT under replicated: times out while the replica lags
        let confirmed = !self.p.replicated || (s.replica.is_none() && !call.rolled_back);
        let ws = &mut s.workers[w];
        match reply {
            Reply::Invalid => {}
            Reply::Leases {
                leases, replayed, ..
            } => {
                // the settled lease is done with, whatever the outcome
                if let CallKind::SettleClaim(st) = &call.kind {
                    for settled in st {
                        if matches!(ws.lease, Some(l) if l.token == settled.token) {
                            ws.lease = None;
                        }
                        s.handed
                            .retain(|h| !(h.worker as usize == w && h.token == settled.token));
                    }
                }
                let ws = &mut s.workers[w];
                for (job, token) in leases {
                    // docs/reliability.md, The lease's local deadline: from the first send
                    // of the request that made it
                    let from = if self.p.bug == Some(Bug::LateDeadline) {
                        call.last_sent
                    } else {
                        call.first_sent
                    };
                    let deadline = from + self.p.vis;
                    if self.p.replicated {
                        s.handed.push(Handed {
                            worker: w as Worker,
                            job,
                            token,
                            deadline,
                        });
                    }
                    if !confirmed && self.p.bug == Some(Bug::StrandOnWaitTimeout) {
                        continue; // NotReplicated: the reply is thrown away
                    }
                    // a reply past the local deadline is released at once, uncharged
                    let phase = if now >= deadline {
                        Phase::Finished(How::Release)
                    } else {
                        Phase::Running
                    };
                    ws.lease = Some(Lease {
                        job,
                        part: call.part,
                        token,
                        deadline,
                        phase,
                        replayed: replayed && (self.p.lose || self.p.foreign),
                        unconfirmed: !confirmed,
                        rolled_back: call.rolled_back,
                    });
                }
            }
            Reply::Settled(_) => {
                if let CallKind::AckOrFail(st) = &call.kind {
                    if matches!(ws.lease, Some(l) if l.token == st.token) {
                        ws.lease = None;
                    }
                    Self::let_go(s, w, st.token);
                }
            }
            Reply::Extended(until) => {
                if let (CallKind::Extend(job, token), Some(l)) = (&call.kind, ws.lease.as_mut())
                    && l.job == *job
                    && l.token == *token
                {
                    match until {
                        // the deadline moves to the renewal's send + the lease length
                        Some(_) => {
                            l.deadline = l.deadline.max(call.last_sent + self.p.vis);
                            l.rolled_back |= call.rolled_back;
                        }
                        // a stale renewal: the run is cancelled
                        None => {
                            if l.phase == Phase::Running {
                                ws.lease = None;
                                Self::let_go(s, w, *token);
                            }
                        }
                    }
                }
            }
        }
        s.handed.sort_by_key(|h| (h.worker, h.job, h.deadline));
        s.handed.dedup();
    }

    fn claimable(&self, s: &State, part: u8) -> bool {
        part < s.cover
    }

    /// A claim of a partition with nothing pending and nothing due changes nothing but
    /// the worker's request counter: the model's workers claim when there is work (a
    /// real worker's empty claims are such no-op steps).
    fn worth_claiming(&self, s: &State, part: u8) -> bool {
        let q = &s.redis.parts[part as usize];
        !q.pending.is_empty() || q.delayed.iter().any(|&(at, _)| at <= s.clock)
    }
}

impl Model for ProtocolModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let p = &self.p;
        vec![State {
            clock: 0,
            redis: Redis::new(p.jobs, p.partitions),
            replica: None,
            workers: vec![WorkerState::default(); p.workers as usize],
            enqueued: vec![false; p.jobs as usize],
            route: p.partitions,
            cover: p.partitions,
            faults_left: p.faults,
            handed: Vec::new(),
            stale_changed: false,
            false_ack: false,
        }]
    }

    fn actions(&self, s: &State, out: &mut Vec<Action>) {
        let p = &self.p;
        let now = s.clock;
        for j in 0..p.jobs {
            if !s.enqueued[j as usize] {
                out.push(Action::Enqueue(j, false));
                if p.delays {
                    out.push(Action::Enqueue(j, true));
                }
            }
        }
        if now < p.max_clock {
            out.push(Action::Tick);
        }
        if p.shrink && s.route > 1 {
            out.push(Action::Shrink);
        }
        if s.route < s.cover && !s.redis.parts[s.cover as usize - 1].holds_work() {
            out.push(Action::Retire);
        }
        for w in 0..p.workers {
            let ws = &s.workers[w as usize];
            if ws.crashed {
                continue;
            }
            match &ws.call {
                None => {
                    let fresh = ws.requests < p.max_requests;
                    match ws.lease {
                        None => {
                            if fresh {
                                for part in 0..p.partitions {
                                    if self.claimable(s, part) && self.worth_claiming(s, part) {
                                        out.push(Action::Claim(w, part));
                                    }
                                }
                            }
                            if p.foreign && s.faults_left > 0 {
                                for o in 0..p.workers {
                                    if o != w && s.workers[o as usize].last.is_some() {
                                        out.push(Action::Foreign(w, o));
                                    }
                                }
                            }
                        }
                        Some(l) => match l.phase {
                            Phase::Running => {
                                if now < l.deadline {
                                    out.push(Action::Finish(w, How::Ack));
                                    out.push(Action::Finish(w, How::Retry));
                                    out.push(Action::Extend(w));
                                }
                            }
                            Phase::Finished(_) => {
                                out.push(Action::AckOrFail(w));
                                if fresh {
                                    out.push(Action::SettleClaim(w, l.part));
                                }
                            }
                        },
                    }
                }
                Some(c) => match &c.wire {
                    Wire::InFlight => {
                        out.push(Action::Exec(w));
                        if p.lose && s.faults_left > 0 {
                            out.push(Action::LoseRequest(w));
                        }
                    }
                    Wire::Replied(_) => {
                        out.push(Action::Deliver(w));
                        if p.lose && s.faults_left > 0 {
                            out.push(Action::LoseReply(w));
                        }
                    }
                    Wire::Lost => {
                        let with_id = matches!(c.kind, CallKind::Claim | CallKind::SettleClaim(_));
                        let in_window = now < c.first_sent + p.retry_window;
                        if !with_id || in_window {
                            out.push(Action::Resend(w));
                        }
                        out.push(Action::GiveUp(w));
                    }
                },
            }
            if p.crash && s.faults_left > 0 && (ws.lease.is_some() || ws.call.is_some()) {
                out.push(Action::Crash(w));
            }
        }
        for part in 0..s.cover {
            out.push(Action::Reap(part));
        }
        if s.replica.is_some() {
            out.push(Action::Replicate);
            if p.failover && s.faults_left > 0 {
                out.push(Action::Failover);
            }
        }
        if p.migration {
            for j in 0..p.jobs {
                if s.redis.away[j as usize] {
                    out.push(Action::HashBack(j));
                } else if s.faults_left > 0 && s.redis.hashes[j as usize].is_some() {
                    out.push(Action::HashAway(j));
                }
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let p = &self.p;
        let mut s = last.clone();
        let now = s.clock;
        match action {
            Action::Enqueue(j, delayed) => {
                let part = j % s.route;
                let before = s.redis.clone();
                s.redis
                    .enqueue(part as usize, j, if delayed { 1 } else { 0 }, now);
                s.enqueued[j as usize] = true;
                // enqueue WAITs and its producer resends until the replica confirms:
                // the enqueue and everything before it are replicated
                let _ = before;
                s.replica = None;
            }
            Action::Tick => {
                s.clock += 1;
                let now = s.clock;
                s.redis.expire_records(now);
                if let Some(r) = s.replica.as_mut() {
                    r.expire_records(now);
                }
                // the deadline watcher: a run past its local deadline is cancelled
                for ws in &mut s.workers {
                    if matches!(ws.lease, Some(l) if l.phase == Phase::Running && now >= l.deadline)
                    {
                        ws.lease = None;
                    }
                }
                s.handed.retain(|h| h.deadline > now);
            }
            Action::Shrink => s.route -= 1,
            Action::Retire => s.cover -= 1,
            Action::Claim(w, part) | Action::SettleClaim(w, part) => {
                let ws = &mut s.workers[w as usize];
                let req = Self::next_req(ws, w);
                let settles = match ws.lease {
                    Some(Lease {
                        job,
                        token,
                        phase: Phase::Finished(how),
                        ..
                    }) => vec![Settle { job, token, how }],
                    _ => Vec::new(),
                };
                let kind = if matches!(action, Action::Claim(..)) {
                    CallKind::Claim
                } else {
                    CallKind::SettleClaim(settles)
                };
                if p.foreign {
                    ws.last = Some((req, part, matches!(kind, CallKind::Claim)));
                }
                ws.call = Some(Call {
                    req,
                    part,
                    kind,
                    first_sent: now,
                    last_sent: now,
                    wire: Wire::InFlight,
                    rolled_back: false,
                });
            }
            Action::AckOrFail(w) => {
                let ws = &mut s.workers[w as usize];
                let l = ws.lease.expect("a lease");
                let Phase::Finished(how) = l.phase else {
                    return None;
                };
                ws.call = Some(Call {
                    req: Req { worker: w, seq: 0 },
                    part: l.part,
                    kind: CallKind::AckOrFail(Settle {
                        job: l.job,
                        token: l.token,
                        how,
                    }),
                    // no deadline follows from an ack's or fail's send time
                    first_sent: 0,
                    last_sent: 0,
                    wire: Wire::InFlight,
                    rolled_back: false,
                });
            }
            Action::Extend(w) => {
                let ws = &mut s.workers[w as usize];
                let l = ws.lease.expect("a lease");
                ws.call = Some(Call {
                    req: Req { worker: w, seq: 0 },
                    part: l.part,
                    kind: CallKind::Extend(l.job, l.token),
                    first_sent: now,
                    last_sent: now,
                    wire: Wire::InFlight,
                    rolled_back: false,
                });
            }
            Action::Finish(w, how) => {
                let l = s.workers[w as usize].lease.as_mut().expect("a lease");
                l.phase = Phase::Finished(how);
            }
            Action::Exec(w) => self.exec(&mut s, w as usize),
            Action::LoseRequest(w) | Action::LoseReply(w) => {
                if matches!(action, Action::LoseReply(_)) {
                    // the call ran; its reply is lost
                } else {
                    // never reached Redis
                }
                s.faults_left -= 1;
                s.workers[w as usize].call.as_mut().unwrap().wire = Wire::Lost;
            }
            Action::Deliver(w) => self.deliver(&mut s, w as usize),
            Action::Resend(w) => {
                let c = s.workers[w as usize].call.as_mut().unwrap();
                if !matches!(c.kind, CallKind::AckOrFail(_)) {
                    c.last_sent = now;
                }
                c.wire = Wire::InFlight;
            }
            Action::GiveUp(w) => {
                let ws = &mut s.workers[w as usize];
                let c = ws.call.take().unwrap();
                if let CallKind::Extend(..) = c.kind {
                    // the next renewal round tries again; the deadline stays
                }
            }
            Action::Crash(w) => {
                s.faults_left -= 1;
                let ws = &mut s.workers[w as usize];
                ws.crashed = true;
                ws.lease = None;
                ws.call = None;
            }
            Action::Foreign(w, o) => {
                s.faults_left -= 1;
                let (req, part, claim) = s.workers[o as usize].last.expect("a request");
                let ws = &mut s.workers[w as usize];
                ws.call = Some(Call {
                    req,
                    part,
                    kind: if claim {
                        CallKind::Claim
                    } else {
                        CallKind::SettleClaim(Vec::new())
                    },
                    first_sent: now,
                    last_sent: now,
                    wire: Wire::InFlight,
                    rolled_back: false,
                });
            }
            Action::Reap(part) => {
                let before = s.redis.clone();
                s.redis.reap(p, part as usize, now);
                if s.redis == before {
                    return None;
                }
                if s.redis != before && s.replica.is_none() && p.failover {
                    s.replica = Some(Box::new(before));
                }
            }
            Action::Replicate => s.replica = None,
            Action::Failover => {
                s.faults_left -= 1;
                let replica = *s.replica.take().unwrap();
                // the lease as the hash has it, wherever the hash is
                let held = |r: &Redis, job: Job, token: Token| match &r.hashes[job as usize] {
                    Some(h) if h.status == redis::Status::Processing && h.token == Some(token) => {
                        Some(h.lease_until)
                    }
                    _ => None,
                };
                let differs = |job, token| held(&s.redis, job, token) != held(&replica, job, token);
                let mut marks = Vec::new();
                for (w, ws) in s.workers.iter().enumerate() {
                    if let Some(l) = ws.lease
                        && differs(l.job, l.token)
                    {
                        marks.push((w, true));
                    }
                    if let Some(c) = &ws.call
                        && let Wire::Replied(_) = c.wire
                    {
                        marks.push((w, false));
                    }
                }
                for (w, lease) in marks {
                    let ws = &mut s.workers[w];
                    if lease {
                        ws.lease.as_mut().unwrap().rolled_back = true;
                    } else {
                        ws.call.as_mut().unwrap().rolled_back = true;
                    }
                }
                s.redis = replica;
            }
            Action::HashAway(j) => {
                s.faults_left -= 1;
                s.redis.away[j as usize] = true;
            }
            Action::HashBack(j) => s.redis.away[j as usize] = false,
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(NO_JOB_LOST, |m: &ProtocolModel, s: &State| m.can_finish(s)),
            Property::always(STALE_CHANGES_NOTHING, |_, s: &State| !s.stale_changed),
            Property::always(ONE_LIVE_LEASE, |m: &ProtocolModel, s: &State| {
                (0..m.p.jobs).all(|j| {
                    // Redis: one processing entry at most, across the partitions
                    let entries: usize = s
                        .redis
                        .parts
                        .iter()
                        .map(|p| p.processing.iter().filter(|&&(_, x)| x == j).count())
                        .sum();
                    // workers: one at most holds the current lease before its deadline
                    let holders = s
                        .workers
                        .iter()
                        .filter(|w| !w.crashed)
                        .filter_map(|w| w.lease)
                        .filter(|l| {
                            l.job == j
                                && !l.rolled_back
                                && s.clock < l.deadline
                                && s.redis.holds(j, l.token)
                        })
                        .count();
                    entries <= 1 && holders <= 1
                })
            }),
            Property::always(ACK_ONCE, |_, s: &State| {
                !s.false_ack && s.redis.acks.iter().all(|&n| n <= 1)
            }),
            Property::always(NO_OVERLAP, |m: &ProtocolModel, s: &State| {
                (0..m.p.jobs).all(|j| {
                    s.workers
                        .iter()
                        .filter(|w| !w.crashed)
                        .filter_map(|w| w.lease)
                        .filter(|l| {
                            l.job == j
                                && l.phase == Phase::Running
                                && s.clock < l.deadline
                                && !l.rolled_back
                        })
                        .count()
                        <= 1
                })
            }),
            Property::always(NONE_STRANDED, |_, s: &State| {
                s.handed.iter().all(|h| {
                    let w = &s.workers[h.worker as usize];
                    w.crashed
                        || s.clock >= h.deadline
                        || !s.redis.holds(h.job, h.token)
                        || Self::worker_knows(w, h.job, h.token)
                })
            }),
            // the model is not vacuous: each of these is reached
            Property::sometimes("a job is acked", |_, s: &State| {
                s.redis.acked.iter().any(Option::is_some)
            }),
            Property::sometimes("a retry is answered from its record", |_, s: &State| {
                s.workers
                    .iter()
                    .any(|w| matches!(w.lease, Some(l) if l.replayed))
            }),
            Property::sometimes(
                "a lease the replica did not confirm runs",
                |_, s: &State| {
                    s.workers
                    .iter()
                    .any(|w| matches!(w.lease, Some(l) if l.unconfirmed && l.phase == Phase::Running))
                },
            ),
            Property::sometimes("a job is dead-lettered", |_, s: &State| {
                s.redis
                    .hashes
                    .iter()
                    .any(|h| matches!(h, Some(h) if h.status == redis::Status::Dead))
            }),
            Property::sometimes("an id is set aside", |_, s: &State| {
                s.redis.parts.iter().any(|p| !p.orphans.is_empty())
            }),
            Property::sometimes(
                "a partition left out by a shrink is drained and retired",
                |m: &ProtocolModel, s: &State| {
                    s.cover < m.p.partitions && s.enqueued.iter().all(|&e| e)
                },
            ),
        ]
    }

    fn within_boundary(&self, s: &State) -> bool {
        s.clock <= self.p.max_clock
    }
}

impl ProtocolModel {
    /// What a step is, in the words of the protocol: the script it runs and the sections of
    /// docs/protocol.md it follows.
    pub fn describe(&self, s: &State, a: Action) -> String {
        let call = |w: Worker| s.workers[w as usize].call.clone();
        match a {
            Action::Exec(w) => {
                let c = call(w).unwrap();
                let what = match &c.kind {
                    CallKind::Claim => format!(
                        "claim.lua (protocol.md #claim steps 1–4, #retrying-a-claim) request {}/{}",
                        c.req.worker, c.req.seq
                    ),
                    CallKind::SettleClaim(st) => format!(
                        "settle_claim.lua (#settle_claim, #request-records) request {}/{} settles {:?}",
                        c.req.worker,
                        c.req.seq,
                        st.iter().map(|s| (s.job, s.how)).collect::<Vec<_>>()
                    ),
                    CallKind::AckOrFail(st) => match st.how {
                        How::Ack => "ack.lua (#ack, #tokens-and-fencing)".to_string(),
                        How::Retry => "fail.lua mode retry (#fail)".to_string(),
                        How::Release => "fail.lua mode release (#fail)".to_string(),
                    },
                    CallKind::Extend(..) => "extend.lua (#extend)".to_string(),
                };
                format!("Redis runs worker {w}'s {what}")
            }
            Action::Reap(p) => format!("a reaper runs reap.lua on partition {p} (#reap, #orphans)"),
            Action::Enqueue(j, d) => format!(
                "a producer runs enqueue.lua for job {j}{} (#enqueue)",
                if d { " delayed 1" } else { "" }
            ),
            Action::Claim(w, p) => format!(
                "worker {w} sends claim to partition {p} (request {w}/{})",
                s.workers[w as usize].requests
            ),
            Action::SettleClaim(w, p) => format!(
                "worker {w} sends settle_claim to partition {p} (request {w}/{})",
                s.workers[w as usize].requests
            ),
            Action::Foreign(w, o) => {
                let (req, _, _) = s.workers[o as usize].last.unwrap();
                format!(
                    "worker {w} sends a claim with worker {o}'s request id {}/{}",
                    req.worker, req.seq
                )
            }
            Action::Deliver(w) => {
                let c = call(w).unwrap();
                let wait = if !self.p.replicated {
                    ""
                } else if s.replica.is_none() && !c.rolled_back {
                    " (WAIT confirmed)"
                } else {
                    " (WAIT timed out: not confirmed by the replica)"
                };
                format!("worker {w} gets the reply{wait}")
            }
            Action::LoseReply(w) => format!("worker {w}'s reply is lost"),
            Action::LoseRequest(w) => format!("worker {w}'s request is lost before Redis"),
            Action::Resend(w) => {
                let c = call(w).unwrap();
                format!(
                    "worker {w} sends the call again (request {}/{}, first sent at t={})",
                    c.req.worker, c.req.seq, c.first_sent
                )
            }
            Action::Finish(w, how) => format!("worker {w}'s run ends ({how:?})"),
            Action::Failover => {
                "failover: the replica is promoted, unreplicated writes are gone".into()
            }
            Action::Replicate => "the replica catches up".into(),
            other => format!("{other:?}"),
        }
    }

    /// A counterexample as lines: clock, step, and what the workers hold after it.
    pub fn trace(&self, path: &stateright::Path<State, Action>) -> String {
        let mut out = String::new();
        let steps = path.clone().into_vec();
        for (i, (state, action)) in steps.iter().enumerate() {
            let Some(a) = action else { continue };
            let next = &steps[i + 1].0;
            let leases: Vec<String> = next
                .workers
                .iter()
                .enumerate()
                .filter_map(|(w, ws)| {
                    ws.lease.map(|l| {
                        format!(
                            "w{w}: job {} {:?}, local deadline {} (token of w{} at t={})",
                            l.job, l.phase, l.deadline, l.token.worker, l.token.at
                        )
                    })
                })
                .collect();
            let redis_leases: Vec<String> = next
                .redis
                .parts
                .iter()
                .flat_map(|p| p.processing.iter())
                .map(|(at, j)| format!("job {j} lease ends at {at}"))
                .collect();
            let _ = writeln!(
                out,
                "t={} {}\n      workers [{}] redis [{}]",
                state.clock,
                self.describe(state, *a),
                leases.join("; "),
                redis_leases.join("; ")
            );
        }
        out
    }
}
