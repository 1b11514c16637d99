package rollout

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/configstamp/configstamp/controllers/stamp"
)

var (
	user = stamp.ObjectRef{Kind: stamp.KindSecret, Name: "db-user"}
	pass = stamp.ObjectRef{Kind: stamp.KindSecret, Name: "db-password"}
)

func TestRotationOf(t *testing.T) {
	referenced := map[stamp.ObjectRef]string{user: "u0", pass: "p0", {Kind: stamp.KindConfigMap, Name: "app"}: "c0"}
	for _, tc := range []struct {
		name     string
		a        map[string]string
		members  []stamp.ObjectRef
		wait     time.Duration
		problems int
	}{
		{"none", nil, nil, 0, 0},
		{"two Secrets", map[string]string{AnnotationRotateTogether: "Secret/db-user, Secret/db-password"}, []stamp.ObjectRef{user, pass}, DefaultRotateTogetherWait, 0},
		{"its wait", map[string]string{AnnotationRotateTogether: "Secret/db-user,Secret/db-password", AnnotationRotateTogetherWait: "90m"}, []stamp.ObjectRef{user, pass}, 90 * time.Minute, 0},
		{"a wait past the bound", map[string]string{AnnotationRotateTogether: "Secret/db-user,Secret/db-password", AnnotationRotateTogetherWait: "48h"}, []stamp.ObjectRef{user, pass}, MaxRotateTogetherWait, 1},
		{"a malformed wait", map[string]string{AnnotationRotateTogether: "Secret/db-user,Secret/db-password", AnnotationRotateTogetherWait: "soon"}, []stamp.ObjectRef{user, pass}, DefaultRotateTogetherWait, 1},
		{"a member not referenced", map[string]string{AnnotationRotateTogether: "Secret/db-user,Secret/other,Secret/db-password"}, []stamp.ObjectRef{user, pass}, DefaultRotateTogetherWait, 1},
		{"one member left: no group", map[string]string{AnnotationRotateTogether: "Secret/db-user,Pod/x"}, nil, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, problems := RotationOf(tc.a, referenced)
			if !slices.Equal(r.Members, tc.members) || r.Wait != tc.wait || len(problems) != tc.problems {
				t.Errorf("RotationOf = %+v, problems %v; want members %v, wait %v, %d problems", r, problems, tc.members, tc.wait, tc.problems)
			}
		})
	}
}

// Two Secrets an External Secrets Operator writes from one rotation, each
// on its own refresh, 20 s apart: the workload rolls once, with both (no
// pod starts with half the set), 2 s (its debounce) after the second. A
// rotation that stays half done rolls when the group's wait runs out, with
// a Warning RotationIncomplete naming what did not change.
func TestARotationOfTwoSecretsRollsOnce(t *testing.T) {
	s, c := waveScheduler(t)
	before := map[stamp.ObjectRef]string{user: "a0", pass: "b0"}
	rotated := func(name string, now map[stamp.ObjectRef]string) Observation {
		o := wantsChange(name, 0, nil, c.now())
		o.Canary = false
		o.Object.SetAnnotations(map[string]string{stamp.AnnotationSources: stamp.FormatSources(before)})
		o.Sources, o.Hash = now, "v1-"+now[user]+now[pass]
		o.Data = dataOf(o.Hash)
		o.Rotation = Rotation{Members: []stamp.ObjectRef{user, pass}, Wait: 5 * time.Minute}
		return o
	}
	half := map[stamp.ObjectRef]string{user: "a1", pass: "b0"}
	d, err := s.Decide(t.Context(), rotated("app", half))
	if err != nil || d.Transition == Stamp || d.After < 4*time.Minute {
		t.Fatalf("the user Secret rotated, the password not yet: %+v %v; want it to wait for the password, minutes", d, err)
	}
	c.advance(20 * time.Second)
	whole := map[stamp.ObjectRef]string{user: "a1", pass: "b1"}
	if d, err := s.Decide(t.Context(), rotated("app", whole)); err != nil || d.Transition == Stamp || d.After != 2*time.Second {
		t.Fatalf("the password rotated 20 s later: %+v %v; want its debounce (2 s), then the rollout", d, err)
	}
	c.advance(2 * time.Second)
	d, err = s.Decide(t.Context(), rotated("app", whole))
	if err != nil || d.Transition != Stamp || len(d.Causes) != 2 {
		t.Fatalf("after the debounce: %+v %v; want one stamp of both Secrets", d, err)
	}
	if slices.ContainsFunc(d.Events, func(e Event) bool { return e.Reason == ReasonRotationIncomplete }) {
		t.Errorf("a whole rotation warned: %+v", d.Events)
	}

	// Another workload's rotation stays half done: it rolls at the wait's end.
	if d, err := s.Decide(t.Context(), rotated("other", half)); err != nil || d.Transition == Stamp {
		t.Fatalf("other, half rotated: %+v %v; want it to wait", d, err)
	}
	c.advance(4 * time.Minute)
	if d, err := s.Decide(t.Context(), rotated("other", half)); err != nil || d.Transition == Stamp {
		t.Fatalf("other, half rotated for 4 min of 5: %+v %v; want it to wait still", d, err)
	}
	c.advance(time.Minute)
	d, err = s.Decide(t.Context(), rotated("other", half))
	i := slices.IndexFunc(d.Events, func(e Event) bool { return e.Reason == ReasonRotationIncomplete })
	if err != nil || d.Transition != Stamp || i < 0 || !strings.Contains(d.Events[i].Message, "without Secret/db-password") {
		t.Fatalf("other, half rotated when the wait ran out: %+v %v; want its stamp with a Warning %s naming Secret/db-password", d, err, ReasonRotationIncomplete)
	}

	// The rest of that rotation comes a minute later: it completes what
	// rolled, and waits for nothing more than its debounce.
	c.advance(time.Minute)
	rest := rotated("other", whole)
	rest.Object.SetAnnotations(map[string]string{stamp.AnnotationSources: stamp.FormatSources(half)})
	done := *d.Record // its rollout completed meanwhile
	done.State = Completed
	sealed(rest.Object, done, testKeys.Current())
	if d, err := s.Decide(t.Context(), rest); err != nil || d.Transition == Stamp || d.After != 2*time.Second {
		t.Fatalf("other, the rest of its rotation a minute after the first part rolled: %+v %v; want its debounce (2 s) only", d, err)
	}
	c.advance(2 * time.Second)
	d, err = s.Decide(t.Context(), rest)
	if err != nil || d.Transition != Stamp || slices.ContainsFunc(d.Events, func(e Event) bool { return e.Reason == ReasonRotationIncomplete }) {
		t.Fatalf("other, the rest of its rotation after its debounce: %+v %v; want its stamp, no warning", d, err)
	}
}
