//! The abstract Redis of one queue layout, and the scripts of `lua/` as atomic steps over it.
//!
//! Each script is one function that runs to completion on a `&mut Redis`, as
//! `EVALSHA` runs a script atomically. Every function names the script it models and the
//! sections (and step numbers) of `docs/protocol.md` it follows; when a script changes,
//! the function that names it changes with it (see docs/model.md, "Keeping the model in
//! step with lua/").
//!
//! Abstractions: ids are small integers, times are ticks of the Redis clock (`TIME`),
//! every call asks for one job (n = 1) and an explicit visibility, counters and wake
//! markers are left out (they decide nothing), and `completed_retention_ms` is 0 (an acked
//! job's hash is deleted, the common setting and the one where a late call finds nothing).

use crate::{Bug, Params};

pub type Job = u8;
pub type Worker = u8;
pub type Time = u8;

/// A request id: fresh per call (the worker's counter), sent again unchanged by every
/// retry of that call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Req {
    pub worker: Worker,
    pub seq: u8,
}

/// A lease's `claim_token`, `<claimed_at>:<#worker>:<worker>:<token>`: compared whole,
/// byte for byte. `slot` is a claim lease (its last part is claim's slot token, which
/// names no record); otherwise the last part is `@` and the settle_claim request id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Token {
    pub at: Time,
    pub worker: Worker,
    pub req: Req,
    pub slot: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    Pending,
    Processing,
    Delayed,
    Dead,
}

/// `P:{T}:job:<id>` (docs/protocol.md, Job hash). Done jobs have no hash: retention 0.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct JobHash {
    pub status: Status,
    pub attempts: u8,
    pub token: Option<Token>,
    pub lease_until: Option<Time>,
    pub run_at: Time,
    pub died_at: Time,
}

/// How a worker ends a lease: ack, fail mode `retry` (policy backoff), fail mode `release`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum How {
    Ack,
    Retry,
    Release,
}

/// One ack or fail carried by a call: `id, token` (+ mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Settle {
    pub job: Job,
    pub token: Token,
    pub how: How,
}

/// What an ack or fail answered: ack's 1/0, fail's new status or `stale`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    Acked,
    Pending,
    Delayed,
    Dead,
    Stale,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Script {
    Claim,
    SettleClaim,
}

/// `P:{T}:claimreq:<request>` (docs/protocol.md, Request records): whose call made it
/// (worker, and its arguments: for settle_claim the digest of every argument, here the
/// settles themselves; claim's n and visibility are fixed in the model), and its answer.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Record {
    pub script: Script,
    pub worker: Worker,
    pub args: Vec<Settle>,
    pub leases: Vec<(Job, Token)>,
    pub results: Vec<Outcome>,
    pub expires: Time,
}

/// The keys of one queue (one partition): pending (index 0 is the end claim pops, the
/// "front"; the back is the end LPUSH adds to), processing, delayed, dead, orphans, and
/// the request records.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Part {
    pub pending: Vec<Job>,
    pub processing: Vec<(Time, Job)>,
    pub delayed: Vec<(Time, Job)>,
    pub dead: Vec<Job>,
    pub orphans: Vec<Job>,
    pub records: Vec<(Req, Record)>,
}

impl Part {
    pub fn holds_work(&self) -> bool {
        !(self.pending.is_empty()
            && self.processing.is_empty()
            && self.delayed.is_empty()
            && self.dead.is_empty()
            && self.orphans.is_empty())
    }
}

/// The whole Redis of the queue: its partitions' keys, the job hashes, and two ghost
/// fields no script reads (`acked`, `acks`: which lease each job was acked under and how
/// many acks were applied), kept in Redis so that a failover rolls them back with the
/// writes they describe.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Redis {
    pub parts: Vec<Part>,
    pub hashes: Vec<Option<JobHash>>,
    /// The hash is on another node for a while (a Cluster slot migration, or an eviction
    /// undone): scripts see no hash.
    pub away: Vec<bool>,
    pub acked: Vec<Option<Token>>,
    pub acks: Vec<u8>,
}

/// A script's reply, as the worker gets it (before WAIT).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Reply {
    /// claim / settle_claim: the leases, the settle results, and whether it was answered
    /// from the record.
    Leases {
        leases: Vec<(Job, Token)>,
        results: Vec<Outcome>,
        replayed: bool,
    },
    /// `ERR jobqueue: invalid request`: nothing changed.
    Invalid,
    /// ack / fail
    Settled(Outcome),
    /// extend: the new lease_until, or None (stale)
    Extended(Option<Time>),
}

fn zadd(set: &mut Vec<(Time, Job)>, job: Job, score: Time) {
    set.retain(|&(_, j)| j != job);
    set.push((score, job));
    set.sort();
}

fn zadd_nx(set: &mut Vec<(Time, Job)>, job: Job, score: Time) {
    if !set.iter().any(|&(_, j)| j == job) {
        zadd(set, job, score);
    }
}

fn zrem(set: &mut Vec<(Time, Job)>, job: Job) {
    set.retain(|&(_, j)| j != job);
}

fn sadd(set: &mut Vec<Job>, job: Job) {
    if !set.contains(&job) {
        set.push(job);
        set.sort();
    }
}

impl Redis {
    pub fn new(jobs: u8, parts: u8) -> Redis {
        Redis {
            parts: vec![Part::default(); parts as usize],
            hashes: vec![None; jobs as usize],
            away: vec![false; jobs as usize],
            acked: vec![None; jobs as usize],
            acks: vec![0; jobs as usize],
        }
    }

    /// The hash as a script sees it: none when the key is absent or on another node.
    pub fn hash(&self, job: Job) -> Option<&JobHash> {
        if self.away[job as usize] {
            None
        } else {
            self.hashes[job as usize].as_ref()
        }
    }

    fn hash_mut(&mut self, job: Job) -> &mut JobHash {
        self.hashes[job as usize].as_mut().expect("a hash")
    }

    /// docs/protocol.md, Tokens and fencing: the caller holds the lease when the job's
    /// status is `processing` and its claim_token equals the token, byte for byte.
    pub fn holds(&self, job: Job, token: Token) -> bool {
        matches!(self.hash(job), Some(h) if h.status == Status::Processing && h.token == Some(token))
    }

    /// docs/protocol.md, Orphans: an id whose hash is absent is set aside, never dropped.
    fn set_aside(&mut self, p: usize, job: Job, bug: Option<Bug>) {
        if bug == Some(Bug::DropOrphans) {
            return;
        }
        sadd(&mut self.parts[p].orphans, job);
    }

    /// ack.lua's and settle_claim.lua's `forget`: a call that ends a lease deletes the record
    /// of the request its token names (docs/protocol.md, Request records, "Life"). A claim
    /// lease's token names a slot token: no record has that name.
    fn forget(&mut self, p: usize, token: Token) {
        if !token.slot {
            self.parts[p].records.retain(|(r, _)| *r != token.req);
        }
    }

    /// claim.lua (include/claim_jobs.lua), docs/protocol.md #claim steps 1–3, with n = 1:
    /// (1) due delayed jobs to the back of pending (no hash: set aside; another status:
    /// dropped); (2) ids from the front of pending (no hash: set aside; `pending`: claimed;
    /// another status: dropped); (3) the claimed job gets `processing`, the token,
    /// attempts + 1, lease_until = now + visibility, and its processing entry.
    pub fn claim_steps(
        &mut self,
        prm: &Params,
        p: usize,
        now: Time,
        token: Token,
    ) -> Vec<(Job, Token)> {
        // step 1
        self.promote(prm, p, now);
        // step 2
        let mut leases = Vec::new();
        while leases.is_empty() && !self.parts[p].pending.is_empty() {
            let job = self.parts[p].pending.remove(0);
            match self.hash(job).map(|h| h.status) {
                None => self.set_aside(p, job, prm.bug),
                Some(Status::Pending) => {
                    // step 3
                    let h = self.hash_mut(job);
                    h.status = Status::Processing;
                    h.token = Some(token);
                    h.attempts += 1;
                    h.lease_until = Some(now + prm.vis);
                    zadd(&mut self.parts[p].processing, job, now + prm.vis);
                    leases.push((job, token));
                }
                Some(_) => {}
            }
        }
        leases
    }

    /// claim step 1 and reap's promotion: due delayed jobs (run_at ≤ now), earliest first,
    /// LPUSHed to the back of pending with status `pending`.
    fn promote(&mut self, prm: &Params, p: usize, now: Time) {
        while let Some(&(at, job)) = self.parts[p].delayed.first() {
            if at > now {
                break;
            }
            self.parts[p].delayed.remove(0);
            match self.hash(job).map(|h| h.status) {
                None => self.set_aside(p, job, prm.bug),
                Some(Status::Delayed) => {
                    self.hash_mut(job).status = Status::Pending;
                    self.parts[p].pending.push(job);
                }
                Some(_) => {}
            }
        }
    }

    /// include/request_record.lua and docs/protocol.md #retrying-a-claim, settle_claim
    /// "Retries", Request records: a live record answers only its own call (same script,
    /// same worker, same arguments); any other call naming the request id fails with
    /// `invalid request` and changes nothing. `Bug::ForeignReplay` reverts that: the record
    /// answers whoever sends its id (issue 23, defect 6).
    #[allow(clippy::too_many_arguments)] // the script's own inputs: KEYS[9] and ARGV
    fn record_check(
        &self,
        prm: &Params,
        p: usize,
        req: Req,
        script: Script,
        caller: Worker,
        args: &[Settle],
        now: Time,
    ) -> Option<Reply> {
        let (_, rec) = self.parts[p].records.iter().find(|(r, _)| *r == req)?;
        if rec.expires <= now {
            return None;
        }
        if rec.script != script {
            return Some(Reply::Invalid);
        }
        let ours = rec.worker == caller && rec.args == args;
        if !ours && prm.bug != Some(Bug::ForeignReplay) {
            return Some(Reply::Invalid);
        }
        // the recorded leases this request still holds, the recorded results
        let leases = rec
            .leases
            .iter()
            .copied()
            .filter(|&(j, t)| self.holds(j, t))
            .collect();
        Some(Reply::Leases {
            leases,
            results: rec.results.clone(),
            replayed: true,
        })
    }

    fn write_record(&mut self, p: usize, req: Req, rec: Record) {
        let records = &mut self.parts[p].records;
        records.retain(|(r, _)| *r != req);
        records.push((req, rec));
        records.sort_by_key(|(r, _)| *r);
    }

    /// claim.lua: docs/protocol.md #claim steps 1–4 and #retrying-a-claim.
    pub fn claim(&mut self, prm: &Params, p: usize, req: Req, worker: Worker, now: Time) -> Reply {
        if let Some(reply) = self.record_check(prm, p, req, Script::Claim, worker, &[], now) {
            return reply;
        }
        let token = Token {
            at: now,
            worker,
            req,
            slot: true,
        };
        let leases = self.claim_steps(prm, p, now, token);
        // step 4: a claim that leased something records its answer for the record's life
        if !leases.is_empty() {
            let rec = Record {
                script: Script::Claim,
                worker,
                args: Vec::new(),
                leases: leases.clone(),
                results: Vec::new(),
                expires: now + prm.vis.min(prm.record_life),
            };
            self.write_record(p, req, rec);
        }
        Reply::Leases {
            leases,
            results: Vec::new(),
            replayed: false,
        }
    }

    /// settle_claim.lua: docs/protocol.md #settle_claim (its settle part is #ack and #fail,
    /// its claim part #claim steps 1–3 with the request id as token, run after the settle
    /// part was read and before failed jobs are written back to pending), and "Retries".
    pub fn settle_claim(
        &mut self,
        prm: &Params,
        p: usize,
        req: Req,
        worker: Worker,
        settles: &[Settle],
        now: Time,
    ) -> Reply {
        if let Some(reply) =
            self.record_check(prm, p, req, Script::SettleClaim, worker, settles, now)
        {
            return reply;
        }
        let mut results = Vec::new();
        let mut later = Vec::new();
        for s in settles {
            let (out, push) = self.settle_one(prm, p, *s, now);
            results.push(out);
            later.extend(push);
        }
        let token = Token {
            at: now,
            worker,
            req,
            slot: false,
        };
        let leases = self.claim_steps(prm, p, now, token);
        for (job, front) in later {
            self.push_pending(p, job, front);
        }
        if !leases.is_empty() || !settles.is_empty() {
            let rec = Record {
                script: Script::SettleClaim,
                worker,
                args: settles.to_vec(),
                leases: leases.clone(),
                results: results.clone(),
                expires: now + prm.vis.min(prm.record_life),
            };
            self.write_record(p, req, rec);
        }
        Reply::Leases {
            leases,
            results,
            replayed: false,
        }
    }

    fn push_pending(&mut self, p: usize, job: Job, front: bool) {
        if front {
            self.parts[p].pending.insert(0, job); // RPUSH: served next
        } else {
            self.parts[p].pending.push(job); // LPUSH: back of the line
        }
    }

    /// One ack or fail, as ack.lua and fail.lua do it (settle_claim's settle part too);
    /// a job to put in pending is returned (front = RPUSH) so settle_claim can write it
    /// after its claim part.
    fn settle_one(
        &mut self,
        prm: &Params,
        p: usize,
        s: Settle,
        now: Time,
    ) -> (Outcome, Option<(Job, bool)>) {
        // docs/protocol.md, Tokens and fencing
        if !self.holds(s.job, s.token) {
            return (Outcome::Stale, None);
        }
        zrem(&mut self.parts[p].processing, s.job);
        self.forget(p, s.token);
        let ji = s.job as usize;
        match s.how {
            // docs/protocol.md #ack: done, retention 0: the hash is deleted
            How::Ack => {
                self.hashes[ji] = None;
                self.acked[ji] = Some(s.token);
                self.acks[ji] += 1;
                (Outcome::Acked, None)
            }
            // docs/protocol.md #fail, mode retry: policy backoff, or dead at max_attempts
            How::Retry => {
                let h = self.hash_mut(s.job);
                h.lease_until = None;
                if h.attempts < prm.max_attempts {
                    if prm.backoff == 0 {
                        h.status = Status::Pending;
                        (Outcome::Pending, Some((s.job, false)))
                    } else {
                        h.status = Status::Delayed;
                        h.run_at = now + prm.backoff;
                        zadd(&mut self.parts[p].delayed, s.job, now + prm.backoff);
                        (Outcome::Delayed, None)
                    }
                } else {
                    h.status = Status::Dead;
                    // died_at: dead trimming is not modelled, so its value decides nothing
                    sadd(&mut self.parts[p].dead, s.job);
                    (Outcome::Dead, None)
                }
            }
            // docs/protocol.md #fail, mode release: front of pending, attempt given back
            How::Release => {
                let h = self.hash_mut(s.job);
                h.lease_until = None;
                h.status = Status::Pending;
                h.attempts = h.attempts.saturating_sub(1);
                (Outcome::Pending, Some((s.job, true)))
            }
        }
    }

    /// ack.lua (n = 1) and fail.lua: docs/protocol.md #ack, #fail, Tokens and fencing.
    pub fn ack_or_fail(&mut self, prm: &Params, p: usize, s: Settle, now: Time) -> Reply {
        let (out, push) = self.settle_one(prm, p, s, now);
        if let Some((job, front)) = push {
            self.push_pending(p, job, front);
        }
        Reply::Settled(out)
    }

    /// extend.lua (n = 1): docs/protocol.md #extend: lease_until = now + ms in the hash and
    /// as the processing score, for a caller that holds the lease.
    pub fn extend(&mut self, prm: &Params, p: usize, job: Job, token: Token, now: Time) -> Reply {
        if !self.holds(job, token) {
            return Reply::Extended(None);
        }
        self.hash_mut(job).lease_until = Some(now + prm.vis);
        zadd(&mut self.parts[p].processing, job, now + prm.vis);
        Reply::Extended(Some(now + prm.vis))
    }

    /// enqueue.lua (one triple): docs/protocol.md #enqueue. Returns whether it was added
    /// (0: already there, while the hash exists).
    pub fn enqueue(&mut self, p: usize, job: Job, delay: Time, now: Time) -> bool {
        if self.hashes[job as usize].is_some() {
            return false;
        }
        let (status, run_at) = if delay == 0 {
            (Status::Pending, 0)
        } else {
            (Status::Delayed, now + delay)
        };
        self.hashes[job as usize] = Some(JobHash {
            status,
            attempts: 0,
            token: None,
            lease_until: None,
            run_at,
            died_at: 0,
        });
        if delay == 0 {
            self.parts[p].pending.push(job);
        } else {
            zadd(&mut self.parts[p].delayed, job, now + delay);
        }
        true
    }

    /// reap.lua: docs/protocol.md #reap: expired leases (score ≤ now, earliest first) end
    /// (no hash: set aside; not `processing`: dropped; lease_until in the future: re-scored;
    /// attempts ≥ max_attempts: dead; else RPUSHed, the earliest served first); then due
    /// delayed jobs are promoted; then set-aside ids whose hash is back are restored where
    /// their status says, with the job's own time (ZADD NX). Dead trimming is left out
    /// (retention longer than the model's clock).
    pub fn reap(&mut self, prm: &Params, p: usize, now: Time) {
        let looked: Vec<Job> = self.parts[p].orphans.clone();
        let expired: Vec<(Time, Job)> = self.parts[p]
            .processing
            .iter()
            .copied()
            .filter(|&(at, _)| at <= now)
            .collect();
        let mut requeued = Vec::new();
        for (_, job) in expired {
            match self
                .hash(job)
                .map(|h| (h.status, h.lease_until, h.attempts))
            {
                None => {
                    zrem(&mut self.parts[p].processing, job);
                    self.set_aside(p, job, prm.bug);
                }
                Some((Status::Processing, Some(until), _)) if until > now => {
                    zadd(&mut self.parts[p].processing, job, until);
                }
                Some((Status::Processing, _, attempts)) => {
                    zrem(&mut self.parts[p].processing, job);
                    let h = self.hash_mut(job);
                    h.lease_until = None;
                    if attempts >= prm.max_attempts {
                        h.status = Status::Dead;
                        // died_at: dead trimming is not modelled, so its value decides nothing
                        sadd(&mut self.parts[p].dead, job);
                    } else {
                        h.status = Status::Pending;
                        requeued.push(job);
                    }
                }
                Some(_) => zrem(&mut self.parts[p].processing, job),
            }
        }
        for job in requeued.into_iter().rev() {
            self.parts[p].pending.insert(0, job);
        }
        self.promote(prm, p, now);
        // restore: the ids set aside before this call whose hash is there again
        for job in looked {
            let Some(h) = self.hash(job).cloned() else {
                continue;
            };
            self.parts[p].orphans.retain(|&j| j != job);
            match h.status {
                Status::Pending => self.parts[p].pending.insert(0, job),
                Status::Processing => zadd_nx(
                    &mut self.parts[p].processing,
                    job,
                    h.lease_until.unwrap_or(now),
                ),
                Status::Delayed => zadd_nx(&mut self.parts[p].delayed, job, h.run_at),
                Status::Dead => sadd(&mut self.parts[p].dead, job),
            }
        }
    }

    /// Records past their life are gone (Redis expires them; PXAT).
    pub fn expire_records(&mut self, now: Time) {
        for part in &mut self.parts {
            part.records.retain(|(_, r)| r.expires > now);
        }
    }
}
