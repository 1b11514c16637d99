package rollout

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/configstamp/configstamp/controllers/workload"
)

// Names of the rollout counters a Decision increments (Count).
const (
	MetricStarted            = "configstamp_rollouts_started_total"
	MetricCompleted          = "configstamp_rollouts_completed_total"
	MetricFailed             = "configstamp_rollouts_failed_total"
	MetricFailedVerification = "configstamp_rollouts_failed_verification_total"
	MetricCanaries           = "configstamp_canaries_total"
	MetricUndos              = "configstamp_undos_total"
	MetricRingRollouts       = "configstamp_ring_rollouts_total"
)

// Count is one increment of a rollout counter, by its name and label values.
type Count struct {
	Metric string
	Labels []string
}

// Inc increments the counter.
func (c Count) Inc() { counters[c.Metric].WithLabelValues(c.Labels...).Inc() }

// String is the counter's name with its label values other than the kind.
func (c Count) String() string {
	if len(c.Labels) > 1 {
		return c.Metric + "{" + c.Labels[0] + "}"
	}
	return c.Metric
}

var counters = map[string]*prometheus.CounterVec{MetricStarted: StartedTotal, MetricCompleted: CompletedTotal, MetricFailed: FailedTotal,
	MetricFailedVerification: FailedVerificationTotal, MetricCanaries: CanariesTotal, MetricUndos: UndosTotal, MetricRingRollouts: RingRolloutsTotal}

var (
	// StartedTotal counts rollouts configstamp started by stamping a pod template, by kind.
	StartedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricStarted, Help: "Rollouts configstamp started by stamping a pod template.",
	}, []string{"kind"})
	// Completed counts rollouts configstamp started that completed, by kind.
	CompletedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricCompleted, Help: "Rollouts configstamp started that completed.",
	}, []string{"kind"})
	// FailedTotal counts rollouts configstamp started that failed, by kind.
	FailedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricFailed, Help: "Rollouts configstamp started that failed (progress deadline, or in their verification window).",
	}, []string{"kind"})
	// FailedVerificationTotal counts the failed rollouts that had completed as
	// `kubectl rollout status` says and then failed in their verification
	// window (a container restarted, a pod lost its readiness), by kind.
	FailedVerificationTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricFailedVerification,
		Help: "Rollouts configstamp started that completed and then failed in their verification window (a container restarted or crashed, a pod lost its readiness).",
	}, []string{"kind"})
	// ReconcilesTotal counts the workload controller's reconciles by kind:
	// one controller, one queue for every kind, so controller-runtime's
	// reconcile counts (by controller) no longer tell the kinds apart.
	ReconcilesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "configstamp_reconciles_total", Help: "Reconciles of workloads, by kind.",
	}, []string{"kind"})
	// RingRolloutsTotal counts the rollouts of workloads in ringed namespaces
	// by ring and how they ended (completed, failed): how far a change got.
	RingRolloutsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricRingRollouts,
		Help: "Rollouts configstamp started in namespaces of a ring (label configstamp.io/ring), by ring and result (completed, failed).",
	}, []string{"ring", "result"})
	// CanariesTotal counts canaries by how they ended (passed, failed) and kind.
	CanariesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricCanaries,
		Help: "Canaries of a change (its first workload, held at one new pod where its kind allows), by result (passed, failed; unheld: its hold rejected by the API server, stamped without it) and kind.",
	}, []string{"result", "kind"})
	// UndosTotal counts configstamp's undos of failed rollouts by result:
	// undone (the template returned to its last verified revision), then
	// verified or failed (how the undo's own rollout ended).
	UndosTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricUndos,
		Help: "Undos of failed rollouts (configstamp.io/on-failure: undo), by result: undone (returned to the last verified revision), then verified or failed (the undo's own rollout).",
	}, []string{"result", "kind"})
	// Resumed counts halts lifted (the failed workload deleted, recovered, or its halted annotation removed).
	Resumed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "configstamp_halts_lifted_total", Help: "Halts lifted: the failed workload was deleted, recovered, or its halted annotation removed.",
	})
	rolloutsHalted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "configstamp_rollouts_halted_total", Help: "Rollouts not started because their change failed on another workload.",
	})
	haltedWorkloads = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "configstamp_halted_workloads", Help: "Workloads currently waiting on a halted change.",
	})
	waitingWorkloads = schedulerGauge("configstamp_rollouts_waiting", "Workloads waiting for a rollout slot or their turn in the wave.",
		func(waiting, _, _ int) int { return waiting })
	debouncingWorkloads = schedulerGauge("configstamp_rollouts_debouncing", "Workloads in their debounce window.",
		func(_, debouncing, _ int) int { return debouncing })
	pendingWorkloads = schedulerGauge("configstamp_rollouts_pending", "Workloads configstamp may still roll: announced, debouncing or waiting (0: nothing left to do).",
		func(_, _, pending int) int { return pending })
	warnings = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "configstamp_warnings_total",
		Help: "Warning events configstamp emitted, by reason (InvalidValue: a bad value ignored, nothing blocked; RolloutFailed; RolloutHalted; ...).",
	}, []string{"reason"})
	debouncedChanges = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "configstamp_debounced_changes_total", Help: "Changes folded into a pending rollout by the debounce window.",
	})
	slotsInUse = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "configstamp_rollout_slots_in_use", Help: "Workloads holding a slot of the budget of concurrent rollouts.",
	}, func() float64 {
		s := current.Load()
		if s == nil {
			return 0
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		n, err := s.SlotsInUse(ctx)
		if err != nil {
			return -1
		}
		return float64(n)
	})
)

// schedulerGauge reads one of the Scheduler's tallies at each scrape.
func schedulerGauge(name, help string, pick func(waiting, debouncing, pending int) int) prometheus.GaugeFunc {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 {
		s := current.Load()
		if s == nil {
			return 0
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		return float64(pick(s.tally()))
	})
}

// current is the Scheduler the slots and pending gauges read (the process has one).
var current atomic.Pointer[Scheduler]

// RegisterMetrics registers the rollout metrics with controller-runtime's
// registry, once: the manager's /metrics serves them. Importing this package
// registers nothing (the kubectl plugin reads records with it).
func RegisterMetrics(kinds *workload.Registry) {
	registerOnce.Do(func() {
		metrics.Registry.MustRegister(StartedTotal, ReconcilesTotal, CompletedTotal, CanariesTotal, RingRolloutsTotal, UndosTotal, FailedTotal, FailedVerificationTotal, Resumed, rolloutsHalted, haltedWorkloads, warnings,
			waitingWorkloads, debouncingWorkloads, pendingWorkloads, debouncedChanges, slotsInUse)
	})
	// Every kind's series from the start, at 0: increase() and rate() see the
	// first failure as an increase (a series that first appears at 1 shows
	// none, and the alert on failed rollouts would miss it), and a dashboard
	// shows 0 rather than no data.
	for _, k := range kinds.All() {
		InitSeries(k.Name)
	}
}

var registerOnce sync.Once

// InitSeries makes kind's rollout counters' series, at 0 (the extra kinds of
// --kinds-config are registered after init).
func InitSeries(kind string) {
	for _, c := range []*prometheus.CounterVec{ReconcilesTotal, StartedTotal, CompletedTotal, FailedTotal, FailedVerificationTotal} {
		c.WithLabelValues(kind)
	}
	CanariesTotal.WithLabelValues("passed", kind)
	CanariesTotal.WithLabelValues("failed", kind)
	for _, result := range []string{"undone", "verified", "failed"} {
		UndosTotal.WithLabelValues(result, kind)
	}
}

// CountWarnings is rec counting each Warning event it emits in
// configstamp_warnings_total, by reason: one metric for every bad value
// configstamp ignored (reported as an event, never a blocked admission).
func CountWarnings(rec events.EventRecorder) events.EventRecorder { return warningCounter{rec} }

type warningCounter struct{ events.EventRecorder }

func (w warningCounter) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	if eventtype == corev1.EventTypeWarning {
		warnings.WithLabelValues(reason).Inc()
	}
	w.EventRecorder.Eventf(regarding, related, eventtype, reason, action, note, args...)
}
