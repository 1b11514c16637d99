package main

import (
	"strings"
	"testing"
)

// While configstamp's undo rolls (the undone revision is a rollback as the
// webhook sees it too), `why` says it is configstamp's undo, followed,
// not a user's rollback kept until a source changes.
func TestWhySaysAnUndoIsFollowed(t *testing.T) {
	r := whyResult{Kind: "Deployment", Name: "u", State: "rolling", UndoTo: "v1-good", RolledBackTo: "v1-good", Halted: []change{{Source: "ConfigMap/shared", Content: "00aa"}}}
	if s := summary(r); !strings.HasPrefix(s, "undoing:") || !strings.Contains(s, "v1-good") || !strings.Contains(s, "never undone again") {
		t.Fatalf("summary %q: want the undo named, followed, and never undone again", s)
	}
	r.UndoTo, r.State = "", "failed"
	if s := summary(r); !strings.HasPrefix(s, "rolled back") {
		t.Fatalf("summary %q once the undo's rollout ended: want the rollback it runs", s)
	}
}
