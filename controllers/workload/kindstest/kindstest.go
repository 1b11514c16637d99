// Package kindstest registers extra workload kinds (--kinds-config) for the
// length of one test.
package kindstest

import (
	"testing"

	"github.com/configstamp/configstamp/controllers/workload"
)

// Register parses a --kinds-config document and registers its kinds until t
// ends.
func Register(t testing.TB, yaml string) {
	t.Helper()
	cfg, err := workload.ParseKindsConfig([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	saved := workload.Kinds
	t.Cleanup(func() { workload.Kinds = saved })
	for _, c := range cfg {
		workload.Register(workload.Custom(c))
	}
}
