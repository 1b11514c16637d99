package controllers

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"slices"
	"testing"
)

// The reconciler observes, asks the rollout package one question and
// applies the answer: the scheduler's state is reached through Decide once
// per reconcile, and the scheduler is told only what a write did, by act:
// Release gives back a slot Decide granted when the stamp did not happen,
// CanaryWritten that a canary's pass or a close was written. act applies
// the decision and decides nothing: it reads no Policy, and every event,
// counter and log line it emits comes from the decision, through tell.
// Observe tells nothing itself: what it finds to tell (a bad value, pods it
// may not list, NotReady nodes) travels in the Observation's Notes. A
// new call into the scheduler, or a rule in act, would spread the wave's
// rules over two packages again; this test says where.
func TestReconcilerAsksTheSchedulerOnce(t *testing.T) {
	fset := token.NewFileSet()
	calls := map[string][]string{} // Scheduler method -> the functions calling it
	events := map[string]bool{}    // functions emitting an event
	policy := map[string]bool{}    // functions reading the Policy
	counters := map[string]bool{}  // functions incrementing a counter directly
	for _, file := range []string{"workload_controller.go", "undo.go", "verify.go"} {
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			name := fn.Name.Name
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				switch sel.Sel.Name {
				case "Policy":
					policy[name] = true
				case "Eventf":
					events[name] = true
				case "WithLabelValues":
					counters[name] = true
				}
				// verify.go's reads of the wave (Ongoing, PollScale) are
				// observe's still (issue "One rollout state machine").
				if field, ok := sel.X.(*ast.SelectorExpr); ok && field.Sel.Name == "Scheduler" && sel.Sel.Name != "Policy" && sel.Sel.Name != "Keys" && file != "verify.go" {
					calls[sel.Sel.Name] = append(calls[sel.Sel.Name], name)
				}
				return true
			})
		}
	}
	if got := slices.Sorted(maps.Keys(calls)); !slices.Equal(got, []string{"CanaryWritten", "Decide", "Release"}) {
		t.Errorf("the reconciler calls the scheduler's %v, want only Decide, Release and CanaryWritten", got)
	}
	if got := calls["Decide"]; !slices.Equal(got, []string{"Reconcile"}) {
		t.Errorf("Decide is called from %v, want from Reconcile only, once", got)
	}
	for _, method := range []string{"CanaryWritten", "Release"} {
		for _, caller := range calls[method] {
			if caller != "act" {
				t.Errorf("%s is called from %s: only act, once it knows what its write did, tells the scheduler", method, caller)
			}
		}
	}
	for _, fn := range []string{"act", "write", "tell"} {
		if policy[fn] {
			t.Errorf("%s reads the Policy: what the policy decides is the decision's", fn)
		}
	}
	if got := slices.Sorted(maps.Keys(events)); !slices.Equal(got, []string{"tell"}) {
		t.Errorf("events are emitted by %v, want by tell only (a decision's, and the notes of its observation)", got)
	}
	delete(counters, "Reconcile") // configstamp_reconciles_total counts reconciles, not what they decide
	if len(counters) > 0 {
		t.Errorf("%v increment counters directly, want only the decision's Counts", slices.Sorted(maps.Keys(counters)))
	}
}
