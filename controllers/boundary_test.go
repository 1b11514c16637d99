package controllers

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"slices"
	"testing"
)

// The reconciler observes, asks the rollout package one question and acts:
// the scheduler's state is reached through Decide once per reconcile, and
// the scheduler is told only what a write did: Release gives back a slot
// Decide granted when the stamp did not happen (in roll), CanaryWritten
// that a canary's pass was written (in act). A new call into the scheduler from the reconciler would
// spread the wave's rules over two packages again; this test says where.
func TestReconcilerAsksTheSchedulerOnce(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "workload_controller.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string][]string{} // Scheduler method -> the functions calling it
	for _, decl := range f.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			method, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if field, ok := method.X.(*ast.SelectorExpr); ok && field.Sel.Name == "Scheduler" {
				calls[method.Sel.Name] = append(calls[method.Sel.Name], fn.Name.Name)
			}
			return true
		})
	}
	if got := slices.Sorted(maps.Keys(calls)); !slices.Equal(got, []string{"CanaryWritten", "Decide", "Release"}) {
		t.Errorf("the reconciler calls the scheduler's %v, want only Decide, Release and CanaryWritten", got)
	}
	for _, caller := range calls["CanaryWritten"] {
		if caller != "act" {
			t.Errorf("CanaryWritten is called from %s: only act, once its write landed, tells it", caller)
		}
	}
	if got := calls["Decide"]; !slices.Equal(got, []string{"Reconcile"}) {
		t.Errorf("Decide is called from %v, want from Reconcile only, once", got)
	}
	for _, caller := range calls["Release"] {
		if caller != "roll" {
			t.Errorf("Release is called from %s: a slot is given back only by roll, when its stamp did not happen", caller)
		}
	}
}
