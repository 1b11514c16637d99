package stamp

import "testing"

func TestCompareVersions(t *testing.T) {
	a := ObjectRef{Kind: KindConfigMap, Name: "a"}
	b := ObjectRef{Kind: KindSecret, Name: "b"}
	tests := map[string]struct {
		recorded, proposed     map[ObjectRef]string
		wantStale, wantUnknown bool
	}{
		"nothing recorded":        {nil, map[ObjectRef]string{a: "5"}, false, false},
		"same":                    {map[ObjectRef]string{a: "5"}, map[ObjectRef]string{a: "5"}, false, false},
		"newer":                   {map[ObjectRef]string{a: "5", b: "9"}, map[ObjectRef]string{a: "12", b: "9"}, false, false},
		"longer is newer":         {map[ObjectRef]string{a: "99"}, map[ObjectRef]string{a: "100"}, false, false},
		"older: a lagging cache":  {map[ObjectRef]string{a: "12"}, map[ObjectRef]string{a: "5"}, true, false},
		"absent both":             {map[ObjectRef]string{a: VersionAbsent}, map[ObjectRef]string{a: VersionAbsent}, false, false},
		"appeared or stale copy":  {map[ObjectRef]string{a: VersionAbsent}, map[ObjectRef]string{a: "7"}, false, true},
		"deleted or not yet seen": {map[ObjectRef]string{a: "7"}, map[ObjectRef]string{a: VersionAbsent}, false, true},
		"unparseable":             {map[ObjectRef]string{a: "x"}, map[ObjectRef]string{a: "7"}, false, true},
		"no longer referenced":    {map[ObjectRef]string{a: "7"}, map[ObjectRef]string{b: "1"}, false, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			stale, unknown := CompareVersions(tc.recorded, tc.proposed)
			if stale != tc.wantStale || unknown != tc.wantUnknown {
				t.Fatalf("CompareVersions = stale %v uncertain %v, want %v %v", stale, unknown, tc.wantStale, tc.wantUnknown)
			}
		})
	}
}

func TestVersionsRoundTrip(t *testing.T) {
	m := map[ObjectRef]string{{Kind: KindSecret, Name: "s"}: "10", {Kind: KindConfigMap, Name: "c.d"}: VersionAbsent}
	s := FormatVersions(m)
	if s != "ConfigMap/c.d=absent,Secret/s=10" {
		t.Fatalf("FormatVersions = %q", s)
	}
	got := ParseVersions(s + ",garbage,=1,Nope/x=3")
	if len(got) != 2 || got[ObjectRef{Kind: KindSecret, Name: "s"}] != "10" {
		t.Fatalf("ParseVersions = %v", got)
	}
}
