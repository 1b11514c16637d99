package controllers

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	rolloutsStarted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "configstamp_rollouts_started_total", Help: "Rollouts configstamp started by stamping a pod template.",
	}, []string{"kind"})
	rolloutsCompleted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "configstamp_rollouts_completed_total", Help: "Rollouts configstamp started that completed.",
	}, []string{"kind"})
	rolloutsFailed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "configstamp_rollouts_failed_total", Help: "Rollouts configstamp started that failed (progress deadline).",
	}, []string{"kind"})
	rolloutsHalted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "configstamp_rollouts_halted_total", Help: "Rollouts not started because their change failed on another workload.",
	})
	haltedWorkloads = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "configstamp_halted_workloads", Help: "Workloads currently waiting on a halted change.",
	})
	waitingWorkloads = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "configstamp_rollouts_waiting", Help: "Workloads waiting for a rollout slot or their turn in the wave.",
	})
	debouncedChanges = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "configstamp_debounced_changes_total", Help: "Changes folded into a pending rollout by the debounce window.",
	})
)

func init() {
	metrics.Registry.MustRegister(rolloutsStarted, rolloutsCompleted, rolloutsFailed, rolloutsHalted,
		haltedWorkloads, waitingWorkloads, debouncedChanges)
}
