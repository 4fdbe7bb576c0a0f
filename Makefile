# Chime developer entry points. `make help` lists them.
SHELL := /bin/bash
CARGO ?= cargo
TEST_SERVICES := scripts/with-test-services.sh

# The commit the binaries report (`--version`, `/healthz`, `chime_build_info`); only the
# binaries' own crates read it, so a new commit relinks them and rebuilds nothing under them.
ifeq ($(origin CHIME_COMMIT),undefined)
CHIME_COMMIT := $(shell git describe --always --dirty --abbrev=40 2>/dev/null)
endif
export CHIME_COMMIT

# nextest runs each test in its own process (parallel, isolated); plain cargo test otherwise.
# The end-to-end tests (package chime-e2e) run after the rest and need the binaries built.
# They run E2E_THREADS at a time: most of their time is waiting for fire times, and they
# judge outcomes, not lateness figures, so a busy machine does not fail them.
E2E_THREADS ?= 4

# Clippy is the compiler of the workspace's own crates (RUSTC_WORKSPACE_WRAPPER) in every
# build here, so linting and building are one compilation: `make lint` builds what `make
# test` runs, and no dependency is compiled twice (checked for clippy, then built). Warnings
# are denied in every build, as in the lint. Without clippy installed, builds go without it.
CLIPPY_DRIVER := $(shell rustc --print sysroot 2>/dev/null)/bin/clippy-driver
ifneq ($(wildcard $(CLIPPY_DRIVER)),)
LINTED := env RUSTC_WORKSPACE_WRAPPER=$(CLIPPY_DRIVER) CLIPPY_ARGS=-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__
endif
# Every debug build is this one command (`make build`): building one package (`-p chime`)
# resolves other features for the shared dependencies and compiles most of the tree again.
BUILD := $(LINTED) $(CARGO) build --workspace --bins

UPGRADE_TEST := durability::an_upgrade_from_the_previous_build_under_load_loses_nothing
ifeq ($(shell command -v cargo-nextest 2>/dev/null),)
TEST_CMD := $(LINTED) $(CARGO) test --workspace --all-targets --exclude chime-e2e
E2E_CMD := $(LINTED) $(CARGO) test --workspace --test e2e -- --test-threads $(E2E_THREADS)
UPGRADE_CMD := $(LINTED) $(CARGO) test --workspace --test e2e -- --ignored --exact $(UPGRADE_TEST)
else
TEST_CMD := $(LINTED) $(CARGO) nextest run --workspace --all-targets --exclude chime-e2e
# --workspace keeps the feature set of the build above (nothing recompiles).
E2E_CMD := $(LINTED) $(CARGO) nextest run --workspace --all-targets -E 'package(chime-e2e)' --test-threads $(E2E_THREADS)
UPGRADE_CMD := $(LINTED) $(CARGO) nextest run --workspace --all-targets --run-ignored only -E 'package(chime-e2e) & test(=$(UPGRADE_TEST))'
endif

.PHONY: help build run test lint fmt api-release upgrade-check bench bench-compare bench-smoke bench-peers peers-packages bench-storage api-fuzz e2e e2e-thrice console-test quickstart-check k8s-check k8s-play

help: ## List the targets
	@grep -hE '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "} {printf "  %-10s %s\n", $$1, $$2}'

build: ## Build every debug binary, as the tests and scripts use them
	$(BUILD)

run: ## Start `chime dev`: every service in one process, REST :8080, gRPC :50051 (DEV_ARGS=--memory)
	@$(BUILD) -q
	exec target/debug/chime dev $(DEV_ARGS)

test: ## Run every test, against real PostgreSQL and Redis (started here if none is reachable)
	$(BUILD)
	$(TEST_SERVICES) $(TEST_CMD)
	python3 -m unittest discover -s scripts/bench-compare -p 'test_*.py'
	python3 -m unittest discover -s scripts/profile -p 'test_*.py'
	@# The browser tests wait for what a page shows, not for the clock, and use ports of their
	@# own: they run beside the end-to-end tests, their output after them.
	@mkdir -p target; scripts/console-test.sh > target/console-test.log 2>&1 & console=$$!; \
	  $(TEST_SERVICES) $(E2E_CMD); e2e=$$?; \
	  wait $$console; browser=$$?; echo "--- scripts/console-test.sh (exit $$browser)"; \
	  cat target/console-test.log; [ $$e2e -eq 0 ] && [ $$browser -eq 0 ]
	scripts/quickstart-check.sh

lint: ## rustfmt check, clippy with warnings denied (building every target), and k8s-check
	$(CARGO) fmt --all -- --check
	@test -n "$(LINTED)" || { echo "make lint needs clippy: rustup component add clippy" >&2; exit 1; }
	@# Clippy lints what it compiles: touching the sources has every crate compiled, and so
	@# linted, even where an earlier plain `cargo build` left it fresh.
	@git ls-files -z '*.rs' | xargs -0 touch
	$(LINTED) $(CARGO) build --workspace --all-targets
	scripts/k8s-check.sh

fmt: ## Format the code
	$(CARGO) fmt --all

bench: ## Pipeline benchmark on release binaries: burst, callbacks alone (callback-floor), callbacks each recorded by one row update (durable-floor), every-second beside a burst, steady (10 min), every-second, overload, sparse, materialize, api, purge, workers, population (10M timers) (BENCH_ARGS); writes target/bench/pipeline.json
	$(CARGO) build --release --workspace --bins
	$(TEST_SERVICES) target/release/chime-bench pipeline $(BENCH_ARGS)

bench-compare: peers-packages ## The pipeline benchmark alternated with another build the same day, medians side by side (COMPARE_ARGS="--base REV --runs 3 --variant NAME:CHIME_X=v", BENCH_ARGS for chime-bench); writes target/bench/compare/compare.json
	$(CARGO) build --release --workspace --bins
	scripts/bench-compare/run.sh $(COMPARE_ARGS) -- $(BENCH_ARGS)

# Small sizes on the debug binaries `make test` built: checks that every scenario completes
# and delivers everything, not the targets.
SMOKE_SIZES := --burst 2000 --beside-rate 100 --beside-duration 6 --workers-rate 50 --workers-duration 4 --rate 300 --duration 10 --sparse-rate 50 --sparse-duration 5 \
	--fast-rate 200 --fast-duration 5 --floor-duration 3 --materialize 50000 --api-requests 500 --api-concurrency 8 \
	--purge-rows 20000 --purge-rate 50 --purge-duration 5 --population 20000 --population-window 10 \
	--overload-kept 100 --overload-dropped 300 --overload-duration 5 --overload-recovery 5
bench-smoke: peers-packages ## The pipeline benchmark at small sizes (CI), peers included: everything delivered, no targets
	$(BUILD)
	$(TEST_SERVICES) target/debug/chime-bench pipeline --smoke $(SMOKE_SIZES) \
		--peers bullmq,graphile-worker --out target/bench/pipeline-smoke.json

bench-peers: peers-packages ## Burst, steady and sparse on Chime, BullMQ (same Redis) and Graphile Worker (same PostgreSQL), one table of Chime's ratios; writes target/bench/peers.json
	$(CARGO) build --release --workspace --bins
	$(TEST_SERVICES) target/release/chime-bench pipeline --scenarios burst,steady,sparse \
		--duration 60 --peers bullmq,graphile-worker --out target/bench/peers.json $(BENCH_ARGS)

# The peers' npm packages, pinned by crates/bench/peers/package-lock.json.
peers-packages:
	@command -v node >/dev/null || { echo "bench-peers needs Node.js and npm (Debian: nodejs, npm)" >&2; exit 1; }
	@if [ ! -f crates/bench/peers/node_modules/.package-lock.json ] || \
	    [ crates/bench/peers/package-lock.json -nt crates/bench/peers/node_modules/.package-lock.json ]; then \
	  cd crates/bench/peers && npm ci --no-audit --no-fund --loglevel=error; fi

bench-stores: ## The three setups side by side (PostgreSQL + Redis, PostgreSQL alone, MariaDB + Redis): pipeline burst/steady/sparse/api and storage; writes target/bench/stores.json and stores-storage.json
	$(CARGO) build --release --workspace --bins
	$(TEST_SERVICES) target/release/chime-bench pipeline --setups postgres+redis,postgres,mariadb+redis --scenarios burst,steady,sparse,api --duration 60 --out target/bench/stores.json $(BENCH_ARGS)
	$(TEST_SERVICES) target/release/chime-bench storage --databases postgres,mariadb --out target/bench/stores-storage.json

bench-storage: ## Storage throughput on its own (PostgreSQL inserts and claims, Redis adds); writes target/bench/storage.json
	$(CARGO) build --release -p chime-bench
	$(TEST_SERVICES) target/release/chime-bench storage $(BENCH_ARGS)

api-fuzz: ## Fuzz the REST API from its OpenAPI document (schemathesis from PyPI; FUZZ_EXAMPLES=100)
	$(TEST_SERVICES) scripts/api-fuzz.sh

e2e: ## Only the end-to-end tests: the real binaries as processes (logs under target/e2e/; E2E_THREADS=4 at a time)
	$(BUILD)
	$(TEST_SERVICES) $(E2E_CMD)

e2e-thrice: ## The end-to-end tests three full runs in a row; fails on the first failing run
	$(BUILD)
	for run in 1 2 3; do echo "e2e-thrice: run $$run of 3"; $(TEST_SERVICES) $(E2E_CMD) || exit 1; done
	@echo "e2e-thrice: 3 of 3 runs passed"

console-test: ## Browser tests of the web console in headless Chromium (installed if missing); screenshots in target/console-screenshots/
	scripts/console-test.sh

quickstart-check: ## The README quickstart, scripted: `make run` + its command must give echo callbacks in 5 s
	scripts/quickstart-check.sh

upgrade-check: ## A rolling upgrade under load from the build of PREV (default: the release in deploy/upgrade-from; built once, cached in ~/.cache/chime/upgrade) to this one; IF_CHANGED=1 runs it only when migrations/, proto/ or the config changed since
	$(BUILD)
	scripts/upgrade-check.sh $(if $(IF_CHANGED),--if-changed) $(PREV) -- $(UPGRADE_CMD)

api-release: ## At a release: record the gRPC and REST APIs' surfaces (proto/releases/, crates/api-gateway/releases/), which later versions may only add to
	@test -n "$(VERSION)" || { echo "usage: make api-release VERSION=x.y.z" >&2; exit 1; }
	CHIME_RELEASE=$(VERSION) $(LINTED) $(CARGO) test --workspace --lib -- --ignored write_release_surface
	CHIME_RELEASE=$(VERSION) $(TEST_SERVICES) $(LINTED) $(CARGO) test --workspace --test it -- --ignored compat::write_release_surface

k8s-check: ## Render every k8s/ overlay and validate it (strict schemas), lint deploy/Dockerfile, check and test the alert rules
	scripts/k8s-check.sh

k8s-play: ## Run the manifests (k8s/overlays/dev) under podman kube play with an image of this tree's binaries: readiness, a callback, 500 one-shots while executors scale 2 -> 3 and one pod is deleted, 0 lost
	$(BUILD)
	$(TEST_SERVICES) scripts/k8s-play.sh
