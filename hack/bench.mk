# Benchmarks (hack/bench). Included from the main Makefile.
#
#   make bench                       # default scale, a few minutes on 2 cores
#   make bench BENCH_FLAGS=-full     # the issue's scale
#   make bench BENCH_FLAGS='-scenarios=memory,startup -configmaps=5000 -secrets=5000'
#
# Results: the table on stdout, in $(BENCH_OUT)/results.md and as JSON in
# $(BENCH_OUT)/results.json; configstamp's
# logs and the control planes' logs stay in $(BENCH_OUT).

BENCH_FLAGS ?=
BENCH_OUT ?= $(CURDIR)/_output/bench

##@ Benchmarks

.PHONY: bench
bench: build controlplane ## Memory, size sweep, latency, fan-out, webhook and start-up benchmarks (BENCH_FLAGS=-full: the issue's scale).
	$(GO) run ./hack/bench -configstamp=$(LOCALBIN)/configstamp -out=$(BENCH_OUT) $(BENCH_FLAGS)
