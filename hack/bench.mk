# Benchmarks (hack/bench). Included from the main Makefile.
#
#   make bench                       # default scale, a few minutes on 2 cores
#   make bench BENCH_FLAGS=-full     # the issue's scale
#   make bench BENCH_FLAGS='-scenarios=memory,startup -configmaps=5000 -secrets=5000'
#   make bench-smoke                 # make test runs it: the memory scenario, small, ~1 min
#
# Results: the table on stdout, in $(BENCH_OUT)/results.md and as JSON in
# $(BENCH_OUT)/results.json; configstamp's
# logs and the control planes' logs stay in $(BENCH_OUT).

BENCH_FLAGS ?=
BENCH_OUT ?= $(CURDIR)/_output/bench
# The bench and the floor manager it measures against, built (bench-build)
# before a run, so that a run compiles nothing.
BENCH_BIN ?= $(CURDIR)/_output/bench-bin
BENCH_RUN = $(BENCH_BIN)/bench -configstamp=$(LOCALBIN)/configstamp -floor-manager=$(BENCH_BIN)/floormanager

##@ Benchmarks

.PHONY: bench
bench: build controlplane bench-build ## Memory, size sweep, latency, fan-out, webhook and start-up benchmarks (BENCH_FLAGS=-full: the issue's scale).
	$(BENCH_RUN) -out=$(BENCH_OUT) $(BENCH_FLAGS)

.PHONY: bench-build
bench-build: ## Build the bench and its floor manager into $(BENCH_BIN).
	$(GO) build -o $(BENCH_BIN)/bench ./hack/bench
	$(GO) build -o $(BENCH_BIN)/floormanager ./hack/bench/floormanager

# The smoke run make test runs, so that the bench cannot break unseen: the
# memory scenario (the control plane, configstamp, its webhook, the floor
# manager) at a small scale. It fails when the bench fails or prints no floor;
# its figures are too small to mean anything and no goal fails it.
BENCH_SMOKE_FLAGS ?= -scenarios=memory -namespaces=2 -configmaps=200 -secrets=200 -deployments=50 -heap-profile=false -timeout=5m
BENCH_SMOKE_OUT ?= $(CURDIR)/_output/bench-smoke

.PHONY: bench-smoke
bench-smoke: build controlplane bench-build ## A small run of the bench's memory scenario and its floor (make test runs it; ~1 min).
	@rm -f $(BENCH_SMOKE_OUT)/results.md
	$(BENCH_RUN) -out=$(BENCH_SMOKE_OUT) $(BENCH_SMOKE_FLAGS)
	@grep -q "the floor's peak RSS" $(BENCH_SMOKE_OUT)/results.md \
		|| { echo "bench-smoke: $(BENCH_SMOKE_OUT)/results.md has no memory floor" >&2; exit 1; }
