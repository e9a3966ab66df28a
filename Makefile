# jobqueue: the targets users and CI run. `make demo` and `make test` set up what they
# need on a fresh machine.
CARGO ?= cargo
export REDIS_SERVER ?= redis-server

.PHONY: all build test lint fmt demo chaos model bench bench-instructions bench-peers crds lua chart-check conformance python-client node-client clean redis browser screenshots

all: build

build:
	$(CARGO) build --release

redis:
	@./scripts/ensure-redis.sh

## The console's browser tests (tests/console.rs): Debian's Chromium and its driver, and
## playwright-core (pinned) under tests/console/node_modules; installed when missing.
browser:
	@./scripts/ensure-browser.sh

## Retake the console's screenshots that README and docs/console.md show (docs/images/),
## with the browser tests that take them (and the other browser tests of the console).
screenshots: redis browser
	JOBQUEUE_SCREENSHOTS=docs/images $(CARGO) test --test console -- browser kubernetes
	JOBQUEUE_SCREENSHOTS=docs/images $(CARGO) test --test console_cleanup -- browser told_apart
	JOBQUEUE_SCREENSHOTS=docs/images $(CARGO) test --test console_live -- in_a_browser
	JOBQUEUE_SCREENSHOTS=docs/images $(CARGO) test --test console_ops -- in_a_browser
	JOBQUEUE_SCREENSHOTS=docs/images $(CARGO) test --test console_hardening -- 1280_px

## The full test suite: formatting, lints, the Helm chart checks, unit and integration tests (real Redis,
## standalone and a 3-master Cluster, started by the tests themselves), and the web console
## in a headless Chromium.
test: redis browser
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets -- -D warnings
	./scripts/chart-check.sh
	./scripts/conformance.sh
	$(CARGO) test --all-targets
	./scripts/python-client.sh
	./scripts/node-client.sh
	$(CARGO) fmt --manifest-path model/Cargo.toml -- --check
	$(CARGO) test --manifest-path model/Cargo.toml --release

## The chaos and durability suite at full size: worker processes SIGKILLed, two reapers,
## connections cut, Redis SIGKILLed and restarted with an AOF, a 3-master Cluster, and
## behind Sentinel the primary SIGKILLed and a manual failover (tests/support/sentinel.rs);
## `replicated` durability whose WAIT times out (no replica, a SIGSTOPped replica); 1024-byte
## and non-UTF-8 ids through the exec worker; then a queue of 6 partitions on the Cluster
## shrunk to 3 under SIGKILLed workers, and 3 partitions shrunk to 1 with claim and renewal
## replies lost (tests/partitions.rs); and the job features through the same faults
## (tests/chaos_features.rs): unique keys, priorities, the rate limit, waits and events,
## checked against Redis's own history of its writes (its AOF). Prints one tally per scenario (runs counted from the
## workers' own records: lost, dead_without_running and overlap_beyond_grace must be 0);
## `make test` runs the same suite CI-sized. JOBQUEUE_CHAOS_REPORT=FILE appends the tallies.
CHAOS_SCALE ?= 10
chaos: redis
	JOBQUEUE_CHAOS_SCALE=$(CHAOS_SCALE) $(CARGO) test --test chaos -- --nocapture --test-threads=1
	JOBQUEUE_CHAOS_SCALE=$(CHAOS_SCALE) $(CARGO) test --test chaos_features -- --nocapture --test-threads=1
	JOBQUEUE_CHAOS_SCALE=$(CHAOS_SCALE) $(CARGO) test --test partitions -- six_partitions three_partitions --nocapture --test-threads=1

## Throughput, Redis cost per job, reaper speed, memory per job and the operator's cost
## per reconcile, each next to redis-benchmark's figure for the primitive it is bound by,
## on a private redis-server (see docs/benchmarks.md). Options go through BENCH_ARGS:
## `--quick` (a tenth of the data) or `--only claim_ack,reaper`. Then the operator at scale
## (500 JobQueues against the stand-in API server); its options go through
## SCALE_BENCH_ARGS, e.g. `--queues 200 --interval 5 --window 60`. Then one queue over 1, 3 and
## 6 partitions on a 3-master Cluster: jobs/s, Redis CPU per node and its spread
## (PARTITIONS_BENCH_ARGS: `--quick`). Last, the web console's
## Redis cost (`stats` calls per queue per refresh, counted by INFO commandstats) with 1,
## 10 and 50 API pollers over 200 queues, and the bytes Redis sends for one queue-page poll
## of 10 jobs of 4 MiB, now and as before previews (docs/benchmarks.md); options through
## CONSOLE_BENCH_ARGS. Then the
## visibility timeout's scenario runner: fixed 5 s, fixed 60 s and `auto` side by side (a
## private redis-server each) on jobs of 2 s, then 20 s, then 2 s, with worker processes
## SIGKILLed in each phase: jobs run twice, time from a worker's death to its job running
## again (p50/p99) and Redis calls per job, phase by phase (docs/benchmarks.md). Time is
## scaled (default `--scale 0.1`: about 3 minutes; `--scale 1` is the workload's real
## 30 minutes); options through VISIBILITY_BENCH_ARGS, e.g. `--scale 0.5 --kills 5`.
PARTITIONS_BENCH_ARGS ?=
BENCH_ARGS ?=
SCALE_BENCH_ARGS ?=
CONSOLE_BENCH_ARGS ?=
VISIBILITY_BENCH_ARGS ?=
bench: redis
	$(CARGO) bench --bench throughput -- $(BENCH_ARGS)
	$(CARGO) bench --bench partitions -- $(PARTITIONS_BENCH_ARGS)
	$(CARGO) bench --bench operator_scale -- $(SCALE_BENCH_ARGS)
	$(CARGO) bench --bench console -- $(CONSOLE_BENCH_ARGS)
	$(CARGO) bench --bench visibility -- $(VISIBILITY_BENCH_ARGS)

## The instructions redis-server executes per job, counted by valgrind's callgrind (they do
## not drift with the machine as wall-clock figures do): claim+ack at batch 1 and 32,
## the same with each feature of a job or a queue in use (`features`), enqueue at 1 and 1000, reap at 250, the combined ack+claim when the protocol has it, the
## worker runtime; each also in units of the claim-shaped script. Installs valgrind with
## apt-get when missing. Options through INSTR_ARGS: `--quick`, `--only claim_ack,reap`.
INSTR_ARGS ?=
bench-instructions: redis
	@./scripts/ensure-valgrind.sh
	$(CARGO) bench --bench instructions -- $(INSTR_ARGS)

## jobqueue and BullMQ side by side on one private redis-server: enqueue, processing at
## concurrency 1, 16 and 64 with an empty handler, bytes per waiting job, and the ratios.
## Installs the pinned BullMQ (benches/peers/package-lock.json) into benches/peers/node_modules;
## needs Node.js 18+ and npm. Then the Python worker (clients/python) beside arq (pinned in
## scripts/python-peers.sh, from PyPI) on the same workload, each in a venv under .tools/.
## Options through PEERS_ARGS: `--jobs N` (default 50000), `--quick`.
PEERS_ARGS ?=
bench-peers: redis
	@./scripts/ensure-peers.sh
	$(CARGO) bench --bench peers -- $(PEERS_ARGS)
	./scripts/python-peers.sh $(PEERS_ARGS)

## The embedded demo: a private redis-server on a free loopback port, worker processes of
## which some are SIGKILLed mid-job, the reaper, live counts, and a check that no job was
## lost. It builds the release profile, as `make build` does: target/release/jobqueue is the
## binary README's and the docs' commands run. Options go through DEMO_ARGS, e.g. `make demo DEMO_ARGS="--jobs 10000 --workers 8"`.
DEMO_ARGS ?=
demo: redis
	@echo "make demo: building jobqueue with cargo in the release profile, target/release/jobqueue, the binary the docs' commands run (a first build compiles every dependency: about 5 to 10 minutes on 2 cores; cargo's progress follows), then the demo runs on a private redis-server"
	$(CARGO) build --release --bin jobqueue
	$(CARGO) run --release --quiet --bin jobqueue -- demo $(DEMO_ARGS)

## The protocol's model (model/, docs/model.md): every interleaving of producers, workers,
## reapers, lost replies, crashes, a failover, hashes away and a partition shrink, checked
## with stateright at the large bound (millions of states; the small bound runs in
## `make test`). Options through MODEL_ARGS: `--small`, `--scenario NAME`, `--threads N`,
## `--bug foreign-replay|late-deadline|strand-on-wait-timeout|drop-orphans` (a fix reverted:
## prints its counterexample).
MODEL_ARGS ?=
model:
	$(CARGO) run --release --manifest-path model/Cargo.toml -- $(MODEL_ARGS)

## Regenerate crds/jobqueue.yaml from the code, and the Helm chart's template of it
## (templates/crd.yaml, under crds.install; tests fail when either drifts).
crds:
	$(CARGO) run --release --quiet --bin jobqueue -- crd > crds/jobqueue.yaml
	python3 scripts/chart-crd.py

## Rewrite the shared blocks of lua/*.lua from lua/include/ (each script stays loadable on
## its own; tests/lua_includes.rs fails when a block drifts, as does `gen-lua.py --check`).
lua:
	python3 scripts/gen-lua.py

## Check the Helm chart with real tools (helm lint, helm template, kubernetes-validate, the
## RBAC rules, the CRD copy); installs them into .tools/ on first use.
chart-check:
	./scripts/chart-check.sh

## lua/ checked against the protocol by a client in another language (Python, redis-py
## only, on a private redis-server); installs redis-py into .tools/ on first use.
conformance: redis
	./scripts/conformance.sh

## The Python package (clients/python, docs/clients.md): pip-installed into .tools/, then
## its pytest suite: producer and worker against private redis-servers (a 3-master Cluster,
## ACL users), the conformance cases through its script layer, interop with the Rust CLI.
python-client: redis
	./scripts/python-client.sh

## The Node.js package (clients/node): npm ci, build, its tests (private redis-servers, a
## 3-master Cluster, jobs passed to and from the jobqueue binary), and the conformance
## cases through its script-calling layer (scripts/conformance-node.sh). Needs Node.js 18+.
node-client: redis
	./scripts/node-client.sh

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets -- -D warnings
	$(CARGO) fmt --manifest-path model/Cargo.toml -- --check
	$(CARGO) clippy --manifest-path model/Cargo.toml --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all
	$(CARGO) fmt --manifest-path model/Cargo.toml

clean:
	$(CARGO) clean
