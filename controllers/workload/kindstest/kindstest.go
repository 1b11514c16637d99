// Package kindstest builds a registry of workload kinds with the extra kinds
// of a --kinds-config document, for tests.
package kindstest

import (
	"testing"

	"github.com/configstamp/configstamp/controllers/workload"
)

// Registry parses a --kinds-config document and returns the built-in kinds
// followed by its kinds.
func Registry(t testing.TB, yaml string) *workload.Registry {
	t.Helper()
	cfg, err := workload.ParseKindsConfig([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	extra := make([]workload.Kind, len(cfg))
	for i, c := range cfg {
		extra[i] = workload.Custom(c)
	}
	return workload.NewRegistry(extra...)
}
