package controllers

import "testing"

func TestDecide(t *testing.T) {
	tests := map[string]struct {
		stamped, recorded, computed string
		want                        Action
	}{
		"unknown workload: baseline, no rollout":      {"", "", "v1-a", Record},
		"stamped by the webhook, record missing":      {"v1-a", "", "v1-a", Record},
		"up to date":                                  {"v1-a", "v1-a", "v1-a", Nothing},
		"baseline only, data unchanged":               {"", "v1-a", "v1-a", Nothing},
		"baseline only, data changed":                 {"", "v1-a", "v1-b", Rollout},
		"stamped, data changed":                       {"v1-a", "v1-a", "v1-b", Rollout},
		"stamped while configstamp was down, changed": {"v1-a", "", "v1-b", Rollout},
		"record wins over a hand-edited stamp":        {"v1-x", "v1-a", "v1-a", Nothing},
		"revert to what the pods were made with":      {"v1-b", "v1-b", "v1-a", Rollout},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := Decide(tc.stamped, tc.recorded, tc.computed); got != tc.want {
				t.Fatalf("Decide(%q, %q, %q) = %v, want %v", tc.stamped, tc.recorded, tc.computed, got, tc.want)
			}
		})
	}
}
