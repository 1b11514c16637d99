package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/configstamp/configstamp/controllers/pin"
	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
)

// rollingView is a rollout under way: rolling, or complete as `kubectl
// rollout status` says and verifying (both hold a slot).
type rollingView struct {
	Namespace string     `json:"namespace"`
	Kind      string     `json:"kind"`
	Name      string     `json:"name"`
	Started   *time.Time `json:"started,omitempty"`
	Causes    []change   `json:"causes"`
	// State is rollout-state: rolling or verifying.
	State string `json:"state"`
	// VerifyUntil (verifying): when the rollout counts as completed if its
	// new pods stay healthy until then (configstamp.io/rollout-verify-until).
	VerifyUntil *time.Time `json:"verifyUntil,omitempty"`
	// Canary is rollout-canary: "running" while the rollout is its change's
	// canary (no other workload of the namespace gets the change before it
	// passes), "passed" once it passed; absent when it is no canary.
	Canary string `json:"canary,omitempty"`
}

type haltView struct {
	Namespace string   `json:"namespace"`
	Kind      string   `json:"kind"`
	Name      string   `json:"name"`
	Changes   []change `json:"changes"`
	// Waiting are the workloads whose RolloutHalted event names one of the
	// changes and which have not rolled it since.
	Waiting []string `json:"waiting"`
}

type statusResult struct {
	// BudgetInUse is the number of workloads with rollout-state rolling or
	// verifying: each holds a slot of --max-concurrent-rollouts.
	BudgetInUse int `json:"budgetInUse"`
	// Rolling are those workloads, rolling or verifying (State says which).
	Rolling []rollingView `json:"rolling"`
	Halted  []haltView    `json:"halted"`
	// RolledBack are the pinned workloads a user rolled back to an earlier
	// revision (configstamp.io/rolled-back-to): kept until a source changes.
	RolledBack []rolledBackView `json:"rolledBack"`
	// Rings are the sources rolling out or halted in ringed namespaces,
	// ring by ring (empty when no namespace of a rollout is in a ring).
	Rings []ringGroup `json:"rings"`
}

type rolledBackView struct {
	Namespace string   `json:"namespace"`
	Kind      string   `json:"kind"`
	Name      string   `json:"name"`
	Stamp     string   `json:"stamp"`
	Pinned    []string `json:"pinned"`
}

func runStatus(ctx context.Context, o *options, _ []string) error {
	if err := o.connect(); err != nil {
		return err
	}
	ns := "" // cluster-wide unless -n
	if o.namespace != "" {
		ns = o.namespace
	}
	ws, err := o.listWorkloads(ctx, ns)
	if err != nil {
		return err
	}
	res := statusOf(ws)
	res.BudgetInUse = len(res.Rolling)
	res.Rings = ringGroupsOf(ctx, &namespaceLabels{o: o}, ws)
	if len(res.Halted) > 0 {
		if err := o.fillWaiting(ctx, ns, ws, res.Halted); err != nil {
			return err
		}
	}
	if done, err := o.machine(res); done {
		return err
	}
	o.printStatus(res, ns)
	return nil
}

// statusOf reads the rollouts under way, the halts and the user rollbacks
// from the workloads' records.
func statusOf(ws []workload) statusResult {
	res := statusResult{Rolling: []rollingView{}, Halted: []haltView{}, RolledBack: []rolledBackView{}, Rings: []ringGroup{}}
	for _, w := range ws {
		if pin.RolledBack(w.meta.Annotations, w.template) {
			v := rolledBackView{Namespace: w.meta.Namespace, Kind: w.kind, Name: w.meta.Name, Stamp: w.template.Annotations[stamp.AnnotationHash], Pinned: []string{}}
			for src, snap := range pin.Pinned(w.template) {
				v.Pinned = append(v.Pinned, src.String()+"="+snap)
			}
			slices.Sort(v.Pinned)
			res.RolledBack = append(res.RolledBack, v)
		}
		rec := rollout.Read(w.meta.Annotations)
		if rec.Open() {
			v := rollingView{Namespace: w.meta.Namespace, Kind: w.kind, Name: w.meta.Name, Causes: changes(rec.Cause),
				State: string(rec.State), Started: utcOrNil(rec.Started), Canary: string(rec.Canary)}
			if rec.State == rollout.Verifying {
				v.VerifyUntil = utcOrNil(rec.Until)
			}
			res.Rolling = append(res.Rolling, v)
		}
		if rec.Halted != "" {
			res.Halted = append(res.Halted, haltView{Namespace: w.meta.Namespace, Kind: w.kind, Name: w.meta.Name, Changes: changes(rec.Halted), Waiting: []string{}})
		}
	}
	return res
}

// printStatus prints res as tables; ns is the namespace asked for ("": all).
func (o *options) printStatus(res statusResult, ns string) {
	scope := "all namespaces"
	if ns != "" {
		scope = "namespace " + ns
	}
	verifying := 0
	for _, r := range res.Rolling {
		if r.State == string(rollout.Verifying) {
			verifying++
		}
	}
	o.printf("Budget in use: %d (%d rolling, %d verifying; %s)\n", res.BudgetInUse, len(res.Rolling)-verifying, verifying, scope)
	o.printf("\nRolling or verifying: %d\n", len(res.Rolling))
	if len(res.Rolling) > 0 {
		now := o.clock()
		rows := [][]cell{header("NAMESPACE", "WORKLOAD", "STATE", "STARTED", "CAUSE")}
		for _, r := range res.Rolling {
			started := "unknown"
			if r.Started != nil {
				started = r.Started.Format(time.RFC3339)
			}
			rows = append(rows, []cell{c(r.Namespace), coloured(strings.ToLower(r.Kind)+"/"+r.Name, yellow),
				coloured(stateText(r.State, r.VerifyUntil, now)+canaryMark(r.Canary), yellow), c(started), c(changesText(r.Causes))})
		}
		o.table(rows)
	}
	o.printf("\nHalted: %d\n", len(res.Halted))
	if len(res.Halted) > 0 {
		rows := [][]cell{header("NAMESPACE", "WORKLOAD", "HALTED CHANGE", "WAITING")}
		for _, h := range res.Halted {
			waiting := strings.Join(h.Waiting, ",")
			if waiting == "" {
				waiting = "-"
			}
			rows = append(rows, []cell{c(h.Namespace), coloured(strings.ToLower(h.Kind)+"/"+h.Name, red), c(changesText(h.Changes)), c(waiting)})
		}
		o.table(rows)
		o.printf("\nLift a halt with: kubectl configstamp resume -n NAMESPACE WORKLOAD\n")
	}
	o.printRingGroups(res.Rings)
	if len(res.RolledBack) > 0 {
		o.printf("\nRolled back by a user (pinned, kept until a source changes): %d\n", len(res.RolledBack))
		rows := [][]cell{header("NAMESPACE", "WORKLOAD", "STAMP", "PINNED TO")}
		for _, r := range res.RolledBack {
			rows = append(rows, []cell{c(r.Namespace), c(strings.ToLower(r.Kind) + "/" + r.Name), c(r.Stamp), c(strings.Join(r.Pinned, ", "))})
		}
		o.table(rows)
	}
}

// stateText is a rollout's state for a table: "verifying until T (in 12s)"
// while it is verifying.
func stateText(state string, until *time.Time, now time.Time) string {
	if state != string(rollout.Verifying) || until == nil {
		return state
	}
	return state + " until " + untilText(*until, now)
}

// canaryMark marks a running canary in the STATE column: "rolling (canary)".
func canaryMark(canary string) string {
	if canary == string(rollout.CanaryRunning) {
		return " (canary)"
	}
	return ""
}

// untilText is "T (in 12s)", or "T (3s ago)" once past (the rollout is then
// completed at its next judgement, within seconds).
func untilText(until, now time.Time) string {
	left := until.Sub(now).Round(time.Second)
	when := "in " + left.String()
	if left < 0 {
		when = (-left).String() + " ago"
	}
	return until.UTC().Format(time.RFC3339) + " (" + when + ")"
}

func utcOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// fillWaiting finds, from RolloutHalted events, the workloads that wait on each halt.
func (o *options) fillWaiting(ctx context.Context, ns string, ws []workload, halts []haltView) error {
	list, err := o.client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("reason", reasonRolloutHalted).String()})
	if err != nil {
		return fmt.Errorf("while listing %s events: %w", reasonRolloutHalted, err)
	}
	byUID := map[string]workload{}
	for _, w := range ws {
		byUID[string(w.meta.UID)] = w
	}
	for i := range halts {
		h := &halts[i]
		for _, e := range list.Items {
			w, ok := byUID[string(e.InvolvedObject.UID)]
			if !ok || w.meta.Namespace != h.Namespace {
				continue
			}
			cause := w.meta.Annotations[rollout.AnnotationCause]
			for _, ch := range h.Changes {
				text := ch.Source + "@" + ch.Content
				// Still waiting: named by the event, and not rolled with that change since.
				if strings.Contains(e.Message, text) && !strings.Contains(cause, text) && !slices.Contains(h.Waiting, w.ref()) {
					h.Waiting = append(h.Waiting, w.ref())
				}
			}
		}
		slices.Sort(h.Waiting)
	}
	return nil
}
