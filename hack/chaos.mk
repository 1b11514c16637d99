# The fault suite (test/chaos). Included from the main Makefile.
#
#   make chaos                  # 5 repetitions of every fault, in a random order
#   make chaos CHAOS_REPS=10 CHAOS_SEED=42
#
# `make test` runs each fault once. The table (fault, repetitions, workloads,
# rollouts required and seen, lost, duplicate, surprise, fail-open admissions,
# time to converge) is printed and written to $(CHAOS_OUT).

CHAOS_REPS ?= 5
CHAOS_SEED ?= 0
CHAOS_OUT ?= $(CURDIR)/_output/chaos/results.md

##@ Faults

.PHONY: chaos
chaos: build controlplane ## Fault suite: every fault CHAOS_REPS times (default 5) in a random order; prints one table.
	@mkdir -p $(dir $(CHAOS_OUT))
	CHAOS_RESULTS=$(CHAOS_OUT) $(GO) test -count=1 -timeout 90m -v -run TestFaults ./test/chaos/ -args -chaos.reps=$(CHAOS_REPS) -chaos.seed=$(CHAOS_SEED)
	@cat $(CHAOS_OUT)
