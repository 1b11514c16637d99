package stamp

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
)

// fuzzSpec references name1/name2 and key1/key2 in every form; flags toggles the
// all-keys references and the order of containers and volumes.
func fuzzSpec(name1, name2, key1, key2 string, flags uint8) *corev1.PodSpec {
	spec := &corev1.PodSpec{
		Volumes: []corev1.Volume{
			cmVolume(name1, key1),
			projected(projSecret(name2, key2), projCM(name2, key2, key1)),
		},
		InitContainers: []corev1.Container{{Name: "init", Env: env(secretKeyRef(name1, key2))}},
		Containers: []corev1.Container{
			{Name: "a", Env: env(cmKeyRef(name2, key1))},
			{Name: "b", Env: env(secretKeyRef(name2, key1))},
		},
	}
	if flags&1 != 0 {
		spec.Containers[1].EnvFrom = []corev1.EnvFromSource{envFromCM(name1)}
	}
	if flags&2 != 0 {
		spec.InitContainers[0].EnvFrom = []corev1.EnvFromSource{envFromSecret(name2)}
	}
	if flags&4 != 0 {
		spec.Volumes = append(spec.Volumes, secretVolume(name1))
	}
	if flags&8 != 0 {
		slices.Reverse(spec.Containers)
		slices.Reverse(spec.Volumes)
	}
	return spec
}

func FuzzWorkloadRefs(f *testing.F) {
	f.Add("", "", "app", "db", "k", "password", []byte("v"), uint8(0), false, uint16(0))
	f.Add("one,two", "db-creds", "app", "app", "k", "k", []byte{}, uint8(15), false, uint16(MaxKeyDigests-2))
	f.Add(" a , ,Bad_Name,,b.c ", "UPPER,ok,a/b", "x", "", "", "k", []byte{0, 255}, uint8(5), true, uint16(MaxKeyDigests-1))
	f.Add("app", "app", "app", "app", "\x00unref", "", []byte("x"), uint8(2), true, uint16(MaxKeyDigests+1))
	f.Add(strings.Repeat("x", 254)+",-lead,trail-", ",,,", "ünï", "a,b=c", "%", "=", []byte(nil), uint8(9), false, uint16(3*MaxKeyDigests))
	f.Fuzz(func(t *testing.T, extraCMs, extraSecrets, name1, name2, key1, key2 string, value []byte, flags uint8, marked bool, many uint16) {
		ann := map[string]string{AnnotationExtraConfigMaps: extraCMs, AnnotationExtraSecrets: extraSecrets}
		spec := fuzzSpec(name1, name2, key1, key2, flags)
		refs, problems := WorkloadRefs(ann, spec)

		// Objects and IndexValues: sorted, unique, consistent, round-trippable.
		objs := refs.Objects()
		idx := refs.IndexValues()
		if len(objs) != refs.Len() || len(idx) != refs.Len() {
			t.Fatalf("Len %d, Objects %d, IndexValues %d", refs.Len(), len(objs), len(idx))
		}
		for i := 1; i < len(idx); i++ {
			if idx[i-1] >= idx[i] {
				t.Fatalf("IndexValues not sorted/unique: %q", idx)
			}
			if compareRefs(objs[i-1], objs[i]) >= 0 {
				t.Fatalf("Objects not sorted/unique: %v", objs)
			}
		}
		for _, o := range objs {
			if o.Name == "" {
				t.Fatalf("empty name referenced: %v", objs)
			}
			if back, err := ParseObjectRef(o.String()); err != nil || back != o {
				t.Fatalf("ParseObjectRef(%q) = %v, %v", o, back, err)
			}
			if ks := refs.Keys(o); !ks.All && len(ks.Keys) == 0 {
				t.Fatalf("%v referenced with no keys", o)
			}
		}

		// Extra annotations: within the caps every item is either referenced (all
		// keys) or a Problem; beyond them the rest is one Problem.
		for _, extra := range []struct {
			value string
			kind  Kind
		}{{extraCMs, KindConfigMap}, {extraSecrets, KindSecret}} {
			valid, invalid := map[string]bool{}, 0
			for item := range strings.SplitSeq(extra.value, ",") {
				switch name := strings.TrimSpace(item); {
				case name == "":
				case len(validation.IsDNS1123Subdomain(name)) == 0:
					valid[name] = true
				default:
					invalid++
				}
			}
			if len(extra.value) <= MaxExtraBytes && len(valid) <= MaxExtraNames {
				for name := range valid {
					if !refs.Keys(ObjectRef{extra.kind, name}).All {
						t.Fatalf("valid extra %s %q not referenced with all keys", extra.kind, name)
					}
				}
				if invalid <= maxNameProblems && countField(problems, extra.kind) != invalid {
					t.Fatalf("%d invalid names, problems: %v", invalid, problems)
				}
			}
			if n := countField(problems, extra.kind); n > maxNameProblems+2 {
				t.Fatalf("%d problems for one annotation: %v", n, problems)
			}
		}
		for _, p := range problems {
			if p.Value == "" || p.Value != strings.TrimSpace(p.Value) || len(p.Value) > maxProblemValue+len("…") {
				t.Fatalf("bad problem %q", p)
			}
		}
		// The cache's cut annotations give the same references.
		cut := maps.Clone(ann)
		BoundWorkloadAnnotations(cut)
		if cutRefs, _ := WorkloadRefs(cut, spec); !slices.Equal(cutRefs.IndexValues(), refs.IndexValues()) {
			t.Fatalf("cut annotations reference %v, whole ones %v", cutRefs.IndexValues(), refs.IndexValues())
		}

		// A world: ConfigMap/name1 and Secret/name2 exist, everything else is absent.
		const unref = "\x00unreferenced"
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name1},
			Data: map[string]string{key1: string(value), unref: "u1"}, BinaryData: map[string][]byte{}}
		if key2 != key1 {
			cm.BinaryData[key2] = value
		}
		if marked { // the old in-memory marker, now an ordinary annotation
			cm.Annotations = map[string]string{"configstamp.io/digested": "sha256"}
		}
		for i := range int(many) % (2 * MaxKeyDigests) { // sometimes beyond the cap
			cm.Data[fmt.Sprintf("many-%d", i)] = string(value) + strconv.Itoa(i)
		}
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name2}, Data: map[string][]byte{key2: value}}
		w := world{cms: []*corev1.ConfigMap{cm}, secrets: []*corev1.Secret{sec}}
		h := NewHasher([]byte("fuzz"))
		res := h.Compute("ns", refs, w.sources(refs))

		// Deterministic, independent of order, equal for the digested (cache) view.
		if again := h.Compute("ns", refs, w.sources(refs)); !reflect.DeepEqual(again, res) {
			t.Fatalf("not deterministic: %+v vs %+v", again, res)
		}
		refs2, _ := WorkloadRefs(ann, fuzzSpec(name1, name2, key1, key2, flags^8))
		if other := h.Compute("ns", refs2, w.sources(refs2)); !reflect.DeepEqual(other, res) {
			t.Fatalf("depends on container/volume order: %+v vs %+v", other, res)
		}
		if dg := h.Compute("ns", refs, w.digested().sources(refs)); !reflect.DeepEqual(dg, res) {
			t.Fatalf("digested result %+v != full %+v", dg, res)
		}
		if !hashRE.MatchString(res.Hash) {
			t.Fatalf("bad hash %q", res.Hash)
		}
		if !slices.Equal(slices.SortedFunc(maps.Keys(res.Sources), compareRefs), objs) {
			t.Fatalf("Sources %v do not cover Objects %v", res.Sources, objs)
		}

		// The digest transform is idempotent.
		d := cm.DeepCopy()
		DigestConfigMap(d)
		dd := d.DeepCopy()
		DigestConfigMap(dd)
		if !reflect.DeepEqual(d, dd) {
			t.Fatalf("DigestConfigMap not idempotent")
		}

		// An unreferenced key changes nothing; under an all-keys reference it does.
		cmRef := ObjectRef{KindConfigMap, name1}
		if name1 != "" && key1 != unref && key2 != unref {
			cm.Data[unref] = "u2"
			after := h.Compute("ns", refs, w.sources(refs))
			_, keyed := refs.Keys(cmRef).Keys[unref]
			if want := refs.Keys(cmRef).All || keyed; (after.Hash != res.Hash) != want {
				t.Fatalf("unreferenced-key change: hash changed=%v, want %v", after.Hash != res.Hash, want)
			}
			if want := Changed(res.Sources, after.Sources); after.Hash != res.Hash && !slices.Equal(want, []ObjectRef{cmRef}) {
				t.Fatalf("Changed = %v, want [%v]", want, cmRef)
			}
		}

		// The sources annotation round-trips.
		if back := ParseSources(FormatSources(res.Sources)); !maps.Equal(back, res.Sources) {
			t.Fatalf("ParseSources(FormatSources(%v)) = %v", res.Sources, back)
		}
		if c := Changed(res.Sources, res.Sources); len(c) != 0 {
			t.Fatalf("Changed(x, x) = %v", c)
		}
	})
}

// countField counts the problems about the extra-* annotation of kind.
func countField(problems []Problem, kind Kind) int {
	field := "annotation " + AnnotationExtraConfigMaps
	if kind == KindSecret {
		field = "annotation " + AnnotationExtraSecrets
	}
	n := 0
	for _, p := range problems {
		if p.Field == field {
			n++
		}
	}
	return n
}

func FuzzRolloutSelector(f *testing.F) {
	f.Add("app=web", "")
	f.Add("", "app=web")
	f.Add("  ", "tier in (a,b),!canary")
	f.Add("app=(a", "app=b")
	f.Add("!!", "")
	f.Add("a b c", "x")
	f.Add(",", "")
	f.Add("app="+strings.Repeat("v", 64), "")
	f.Add("x notin (), y", "")
	f.Fuzz(func(t *testing.T, primary, alias string) {
		ann := map[string]string{}
		if primary != "" {
			ann[AnnotationRolloutSelector] = primary
		}
		if alias != "" {
			ann[AnnotationPodDeleteMatch] = alias
		}
		sel, ok, problem := RolloutSelector(ann)
		set := strings.TrimSpace(primary) != "" || strings.TrimSpace(alias) != ""
		switch {
		case ok:
			if problem != nil || sel == nil || sel.Empty() || !set {
				t.Fatalf("ok with problem=%v sel=%v set=%v", problem, sel, set)
			}
			// What the selector prints parses back to the same selector.
			again, err := labels.Parse(sel.String())
			if err != nil || again.String() != sel.String() {
				t.Fatalf("selector %q does not round-trip: %v, %v", sel, again, err)
			}
		case !set:
			if problem != nil || sel != nil {
				t.Fatalf("unset: problem=%v sel=%v", problem, sel)
			}
		default:
			if problem == nil || sel != nil {
				t.Fatalf("set but not ok, without a problem: %v", sel)
			}
			want := primary
			if strings.TrimSpace(primary) == "" {
				want = alias
			}
			if problem.Value != want || problem.Message == "" {
				t.Fatalf("problem %+v does not name %q", problem, want)
			}
		}
	})
}

func FuzzParseSources(f *testing.F) {
	f.Add("ConfigMap/a=0123abcd4567,Secret/b=89abcdef0123", "a", []byte{1, 2, 3})
	f.Add(" ConfigMap/a=01 ,, Pod/x=02,Secret/=03,ConfigMap/a=zz", "a,b=c%d e", []byte{0})
	f.Add("ConfigMap/x%2Cy=01,ConfigMap/%zz=01,ConfigMap/a%=01", "ünï\x00", []byte{})
	f.Add("Secret/a/b==01,=,,ConfigMap/===", "%25", []byte{255})
	f.Fuzz(func(t *testing.T, s, name string, digest []byte) {
		m := ParseSources(s)
		if m == nil {
			t.Fatalf("nil map")
		}
		for ref, d := range m {
			if (ref.Kind != KindConfigMap && ref.Kind != KindSecret) || ref.Name == "" || !isLowerHex(d) {
				t.Fatalf("invalid entry %v=%q from %q", ref, d, s)
			}
		}
		formatted := FormatSources(m)
		if back := ParseSources(formatted); !maps.Equal(back, m) {
			t.Fatalf("ParseSources(FormatSources(%v)) = %v (via %q)", m, back, formatted)
		}
		// Any valid map round-trips exactly, whatever the names.
		if name != "" && len(digest) > 0 {
			x := map[ObjectRef]string{
				{KindConfigMap, name}: Digest(digest)[:12],
				{KindSecret, name}:    Digest(digest),
			}
			if back := ParseSources(FormatSources(x)); !maps.Equal(back, x) {
				t.Fatalf("ParseSources(FormatSources(%v)) = %v", x, back)
			}
		}
	})
}
