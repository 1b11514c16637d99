package stamp

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// manyKeys returns n keys "<prefix>NNNNN" with distinct values.
func manyKeys(prefix string, n int) map[string]string {
	out := make(map[string]string, n)
	for i := range n {
		out[fmt.Sprintf("%s%05d", prefix, i)] = fmt.Sprintf("value-%d", i)
	}
	return out
}

// TestHashesPinned pins hashes computed by the code before the key cap existed:
// objects up to MaxKeyDigests keys hash exactly as before, so an upgrade rolls
// nothing.
func TestHashesPinned(t *testing.T) {
	ann := map[string]string{AnnotationExtraConfigMaps: "unreferenced,missing"}
	for name, w := range map[string]world{"full": baseWorld(), "digested": baseWorld().digested()} {
		res := compute(t, testKey, "ns", ann, baseSpec(), w)
		if res.Hash != "v1-68ca53b76d12a3946deefd67fe9cfc05" || FormatSources(res.Sources) != "ConfigMap/app=58941394f3dc,ConfigMap/files=104c50106230,ConfigMap/missing=94eadadbfd29,ConfigMap/proj=4fb452f32265,ConfigMap/unreferenced=017b98543f69,Secret/db=0402f3d90fd4,Secret/tls=f6a7bdd2bc1b" {
			t.Errorf("%s: base world hash changed: %s %s", name, res.Hash, FormatSources(res.Sources))
		}
	}
	data := map[string]string{}
	for i := range MaxKeyDigests {
		data[fmt.Sprintf("key-%03d", i)] = fmt.Sprintf("value-%d", i)
	}
	w := world{cms: []*corev1.ConfigMap{configMap("files", data, nil), configMap("proj", map[string]string{"a": "b"}, nil)}}
	for name, w := range map[string]world{"full": w, "digested": w.digested()} {
		res := compute(t, testKey, "ns", nil, baseSpec(), w)
		if res.Hash != "v1-0dad627b4da39427ff7725020248b428" || res.Sources[ObjectRef{KindConfigMap, "files"}] != "b0dc7789198a" {
			t.Errorf("%s: hash with an object at the key cap changed: %s %v", name, res.Hash, res.Sources)
		}
	}
}

// TestOverCapHashPinned pins the hash of a workload referencing an object
// beyond MaxKeyDigests keys, as the code computed it before the combined digest
// was computed key by key: an upgrade rolls nothing.
func TestOverCapHashPinned(t *testing.T) {
	data := manyKeys("key-", MaxKeyDigests+44)
	w := world{cms: []*corev1.ConfigMap{configMap("files", data, map[string][]byte{"bin": {0, 1, 2}}), configMap("proj", map[string]string{"a": "b"}, nil)},
		secrets: []*corev1.Secret{secret("db", manyKeys("s-", MaxKeyDigests+7))}}
	for name, w := range map[string]world{"full": w, "digested": w.digested()} {
		res := compute(t, testKey, "ns", nil, baseSpec(), w)
		if res.Hash != "v1-714bcffc13d8c95ae8dbd5e58500b6ac" || res.Sources[ObjectRef{KindConfigMap, "files"}] != "f7377b393028" ||
			res.Sources[ObjectRef{KindSecret, "db"}] != "c78e5c3556f5" {
			t.Errorf("%s: hash with an object beyond the key cap changed: %s %v", name, res.Hash, res.Sources)
		}
	}
}

func TestOverCap(t *testing.T) {
	keyRef := &corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Env: append(env(cmKeyRef("big", "k00000")), env(secretKeyRef("big", "k00001"))...)}}}
	items := &corev1.PodSpec{Volumes: []corev1.Volume{cmVolume("big", "k00002")}, Containers: []corev1.Container{{Name: "c"}}}
	all := &corev1.PodSpec{Containers: []corev1.Container{{Name: "c", EnvFrom: []corev1.EnvFromSource{envFromCM("big"), envFromSecret("big")}}}}
	for _, n := range []int{MaxKeyDigests - 1, MaxKeyDigests, MaxKeyDigests + 1, 5000} {
		over := n > MaxKeyDigests
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			data := manyKeys("k", n)
			w := world{cms: []*corev1.ConfigMap{configMap("big", data, map[string][]byte{"bin": {1}})},
				secrets: []*corev1.Secret{secret("big", manyKeys("k", n))}}
			if n+1 > MaxKeyDigests != over && n != MaxKeyDigests {
				t.Fatal("test setup")
			}
			d := w.digested()
			for _, pair := range [][2]Source{
				{SourceFromConfigMap(w.cms[0]), SourceFromConfigMap(d.cms[0])},
				{SourceFromSecret(w.secrets[0]), SourceFromSecret(d.secrets[0])},
			} {
				if !reflect.DeepEqual(pair[0], pair[1]) {
					t.Fatalf("digested source %+v != full %+v", pair[1], pair[0])
				}
			}
			cmOver := n+1 > MaxKeyDigests // the ConfigMap has one binary key more
			if src := SourceFromConfigMap(w.cms[0]); src.Combined != cmOver || (cmOver && len(src.Digests) != 1) {
				t.Fatalf("ConfigMap of %d keys: combined=%v, %d digests", n+1, src.Combined, len(src.Digests))
			}
			if cmOver && (len(d.cms[0].Data) != 1 || len(d.cms[0].Data[""]) != 32 || d.cms[0].Annotations[AnnotationDigested] != DigestedCombined) {
				t.Fatalf("cached over-cap ConfigMap: %v", d.cms[0])
			}
			for name, spec := range map[string]*corev1.PodSpec{"keyRef": keyRef, "items": items, "all": all} {
				before := compute(t, testKey, "ns", nil, spec, w)
				if dg := compute(t, testKey, "ns", nil, spec, d); !reflect.DeepEqual(dg, before) {
					t.Fatalf("%s: digested result %+v != full %+v", name, dg, before)
				}
				// A key no reference names: changes the hash only of an
				// over-cap object (conservative), or under an all-keys reference.
				changed := w.cms[0].DeepCopy()
				changed.Data["k00003"] = "new"
				w2 := world{cms: []*corev1.ConfigMap{changed}, secrets: w.secrets}
				after := compute(t, testKey, "ns", nil, spec, w2)
				if want := cmOver || name == "all"; (after.Hash != before.Hash) != want {
					t.Errorf("%s: unreferenced key changed, hash changed = %v, want %v", name, after.Hash != before.Hash, want)
				}
				if dg := compute(t, testKey, "ns", nil, spec, w2.digested()); !reflect.DeepEqual(dg, after) {
					t.Fatalf("%s: digested result after a change %+v != full %+v", name, dg, after)
				}
				// A referenced key always changes it.
				changed = w.cms[0].DeepCopy()
				changed.Data["k00000"], changed.Data["k00002"] = "new", "new"
				if again := compute(t, testKey, "ns", nil, spec, world{cms: []*corev1.ConfigMap{changed}, secrets: w.secrets}); again.Hash == before.Hash {
					t.Errorf("%s: referenced key changed, hash did not", name)
				}
			}
		})
	}
}

// TestUserMarkerIsData: an annotation a user sets can never make the transform
// keep data.
func TestUserMarkerIsData(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	for _, value := range []string{"sha256", "sha256-combined", ""} {
		ann := map[string]string{"configstamp.io/digested": value}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "m", Annotations: ann}, Data: map[string]string{"k": big}}
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "m", Annotations: maps.Clone(ann)}, Data: map[string][]byte{"k": []byte(big)}}
		fullCM, fullS := SourceFromConfigMap(cm), SourceFromSecret(s)
		if fullCM.Digests["k"] != Digest([]byte(big)) || fullS.Digests["k"] != Digest([]byte(big)) {
			t.Fatalf("%q: a user-set marker changed the digests of a full object", value)
		}
		DigestConfigMap(cm)
		DigestSecret(s)
		if len(cm.Data["k"]) != 32 || len(s.StringData["k"]) != 32 || s.Data != nil {
			t.Fatalf("%q: the transform kept data: %d, %d bytes", value, len(cm.Data["k"]), len(s.StringData["k"]))
		}
		if !reflect.DeepEqual(SourceFromConfigMap(cm), fullCM) || !reflect.DeepEqual(SourceFromSecret(s), fullS) {
			t.Fatalf("%q: digested source differs from full", value)
		}
		if _, ok := cm.Annotations["configstamp.io/digested"]; ok {
			t.Fatalf("%q: the user's annotation entered the cache", value)
		}
	}
}

// TestMarkerNeverFromAPI: the API server rejects an object carrying the cache's
// marker, so no object it delivers can be mistaken for a digested one.
func TestMarkerNeverFromAPI(t *testing.T) {
	errs := apivalidation.ValidateAnnotations(map[string]string{AnnotationDigested: DigestedPerKey}, field.NewPath("metadata", "annotations"))
	if len(errs) == 0 {
		t.Fatalf("annotation key %q passes API validation", AnnotationDigested)
	}
}

// cachedBytes estimates what a cached ConfigMap or Secret holds: every string
// and byte slice, plus 64 bytes a map entry.
func cachedBytes(m metav1.ObjectMeta, maps ...map[string]string) int {
	n := len(m.Name) + len(m.Namespace) + len(m.ResourceVersion) + len(m.UID) + len(m.Labels)*64 + len(m.ManagedFields)*64
	for k, v := range m.Annotations {
		n += len(k) + len(v) + 64
	}
	for _, mm := range maps {
		for k, v := range mm {
			n += len(k) + len(v) + 64
		}
	}
	return n
}

// TestCachedSizeBounded: whatever a tenant writes (keys, values, annotations), a
// cached object stays under the bound. The heap per object is measured by make bench.
func TestCachedSizeBounded(t *testing.T) {
	// About 89 KiB of keys at the cap (256 keys of 253 bytes, 32-byte sums, map
	// slots) and 12 KiB of cut annotations.
	const bound = 104 << 10
	longKey := func(i int) string { return fmt.Sprintf("%0253d", i) }
	hostileAnn := map[string]string{
		AnnotationRolloutSelector: strings.Repeat("a", 200<<10),
		AnnotationPodDeleteMatch:  strings.Repeat("b", 20<<10),
		AnnotationIgnore:          strings.Repeat(" ", 30<<10) + "true",
		"configstamp.io/digested": "sha256",
		"other":                   strings.Repeat("c", 1<<20),
	}
	cases := map[string]func() (*corev1.ConfigMap, *corev1.Secret){
		"100,000 keys": func() (*corev1.ConfigMap, *corev1.Secret) {
			return configMap("a", manyKeys("k", 100000), nil), secret("a", manyKeys("k", 100000))
		},
		"keys of 253 bytes at the cap": func() (*corev1.ConfigMap, *corev1.Secret) {
			cm, s := configMap("b", map[string]string{}, nil), secret("b", nil)
			for i := range MaxKeyDigests {
				cm.Data[longKey(i)], s.Data[longKey(i)] = "v", []byte("v")
			}
			return cm, s
		},
		"1 MiB marked by a user, hostile annotations": func() (*corev1.ConfigMap, *corev1.Secret) {
			cm, s := configMap("c", map[string]string{"k": strings.Repeat("x", 1<<20)}, nil), secret("c", map[string]string{"k": strings.Repeat("x", 1<<20)})
			cm.Annotations, s.Annotations = maps.Clone(hostileAnn), maps.Clone(hostileAnn)
			return cm, s
		},
	}
	for name, mk := range cases {
		t.Run(name, func(t *testing.T) {
			cm, s := mk()
			fullCM, fullS := SourceFromConfigMap(cm), SourceFromSecret(s)
			fullProblem, fullSel := ignoredAndSelector(cm.Annotations)
			DigestConfigMap(cm)
			DigestSecret(s)
			if n := cachedBytes(cm.ObjectMeta, cm.Data); n > bound || len(cm.BinaryData) != 0 {
				t.Errorf("cached ConfigMap holds about %d bytes, bound %d", n, bound)
			}
			if n := cachedBytes(s.ObjectMeta, s.StringData); n > bound || len(s.Data) != 0 {
				t.Errorf("cached Secret holds about %d bytes, bound %d", n, bound)
			}
			if !reflect.DeepEqual(SourceFromConfigMap(cm), fullCM) || !reflect.DeepEqual(SourceFromSecret(s), fullS) {
				t.Errorf("digested sources differ from full ones")
			}
			// Cut annotations read exactly like the whole ones.
			if p, sel := ignoredAndSelector(cm.Annotations); p != fullProblem || sel != fullSel {
				t.Errorf("cut annotations read %q %q, whole ones %q %q", p, sel, fullProblem, fullSel)
			}
		})
	}
}

func ignoredAndSelector(ann map[string]string) (string, string) {
	var out [2]string
	if ign, p := Ignored(ann); p != nil || ign {
		out[0] = fmt.Sprint(ign, p)
	}
	if sel, ok, p := RolloutSelector(ann); ok || p != nil {
		out[1] = fmt.Sprint(sel, ok, p)
	}
	return out[0], out[1]
}

func TestExtraCaps(t *testing.T) {
	names := func(prefix string, n int) string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("%s-%04d", prefix, i)
		}
		return strings.Join(out, ",")
	}
	tests := map[string]struct {
		value        string
		wantRefs     int
		wantProblems int
		wantIn       string // a fragment of the last problem
	}{
		"64 names":                      {value: names("cm", MaxExtraNames), wantRefs: MaxExtraNames},
		"2,000 names":                   {value: names("cm", 2000), wantRefs: MaxExtraNames, wantProblems: 1, wantIn: `"cm-0064" and every name after it are ignored: at most 64 ConfigMaps`},
		"duplicates count once":         {value: names("cm", MaxExtraNames) + "," + names("cm", MaxExtraNames), wantRefs: MaxExtraNames},
		"20 invalid names":              {value: strings.Repeat("Bad_Name,", 20) + "ok", wantRefs: 1, wantProblems: maxNameProblems + 1, wantIn: "further invalid names are ignored"},
		"beyond the bytes read":         {value: strings.Repeat(" ", MaxExtraBytes) + ",late", wantProblems: 1, wantIn: `"late" and every name after it are ignored: only the first 16384 bytes`},
		"a huge name is quoted clipped": {value: strings.Repeat("x", 1<<20), wantProblems: 1, wantIn: "…"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ann := map[string]string{AnnotationExtraConfigMaps: tc.value}
			refs, problems := WorkloadRefs(ann, &corev1.PodSpec{})
			if refs.Len() != tc.wantRefs || len(problems) != tc.wantProblems {
				t.Fatalf("%d refs, problems %v; want %d refs, %d problems", refs.Len(), problems, tc.wantRefs, tc.wantProblems)
			}
			for _, p := range problems {
				if len(p.String()) > 1024 {
					t.Errorf("problem of %d bytes", len(p.String()))
				}
			}
			if tc.wantIn != "" && !strings.Contains(problems[len(problems)-1].String(), tc.wantIn) {
				t.Errorf("last problem %q lacks %q", problems[len(problems)-1], tc.wantIn)
			}
			cut := maps.Clone(ann)
			BoundWorkloadAnnotations(cut)
			if len(cut[AnnotationExtraConfigMaps]) > MaxExtraBytes {
				t.Errorf("cut annotation of %d bytes", len(cut[AnnotationExtraConfigMaps]))
			}
			cutRefs, cutProblems := WorkloadRefs(cut, &corev1.PodSpec{})
			if !slices.Equal(cutRefs.IndexValues(), refs.IndexValues()) {
				t.Errorf("cut annotation references %d objects, whole %d", cutRefs.Len(), refs.Len())
			}
			if len(tc.value) <= MaxExtraBytes && !reflect.DeepEqual(cutProblems, problems) {
				t.Errorf("cut problems %v, whole %v", cutProblems, problems)
			}
		})
	}
	// The first names count, in order.
	refs, _ := WorkloadRefs(map[string]string{AnnotationExtraSecrets: names("s", 100)}, &corev1.PodSpec{})
	if !refs.Keys(ObjectRef{KindSecret, "s-0063"}).All || refs.Keys(ObjectRef{KindSecret, "s-0064"}).All {
		t.Errorf("not the first %d names: %v", MaxExtraNames, refs.IndexValues())
	}
}

func TestFormatRecord(t *testing.T) {
	record := func(n int, name string) (map[ObjectRef]string, map[ObjectRef]string) {
		src, ver := map[ObjectRef]string{}, map[ObjectRef]string{}
		for i := range n {
			ref := ObjectRef{KindConfigMap, fmt.Sprintf("%s-%04d", name, i)}
			src[ref], ver[ref] = "0123456789ab", "1234567"
		}
		return src, ver
	}
	src, ver := record(20, "app-config")
	s, v, ok := FormatRecord(src, ver)
	if !ok || s != FormatSources(src) || v != FormatVersions(ver) {
		t.Fatalf("a small record is not written whole: %v %q %q", ok, s, v)
	}
	src, ver = record(128+20, strings.Repeat("n", 200)) // the extra-* caps plus a template's worth, long names
	if _, _, ok := FormatRecord(src, ver); ok {
		t.Fatalf("a record of %d bytes is written", len(FormatSources(src))+len(FormatVersions(ver)))
	}
	for n := 1; n < 400; n++ {
		src, ver := record(n, "config")
		s, v, ok := FormatRecord(src, ver)
		size := len(AnnotationSources) + len(FormatSources(src)) + len(AnnotationSourceVersions) + len(FormatVersions(ver))
		if ok != (size <= MaxRecordBytes) || (ok && len(AnnotationSources)+len(s)+len(AnnotationSourceVersions)+len(v) > MaxRecordBytes) || (!ok && (s != "" || v != "")) {
			t.Fatalf("%d objects, %d bytes: ok=%v", n, size, ok)
		}
	}
}

func TestLongValues(t *testing.T) {
	long := "app in (" + strings.Repeat("a,", MaxSelectorLength) + "b)"
	if _, ok, p := RolloutSelector(map[string]string{AnnotationRolloutSelector: long}); ok || p == nil || len(p.Value) > maxProblemValue+3 {
		t.Fatalf("selector of %d bytes: ok=%v problem=%v", len(long), ok, p)
	}
	if _, err := ParseBool("true" + strings.Repeat(" ", maxBoolLength)); err == nil {
		t.Fatalf("a padded boolean of %d bytes parses", maxBoolLength+4)
	}
	if b, err := ParseBool(" true "); err != nil || !b {
		t.Fatalf("ParseBool(\" true \") = %v, %v", b, err)
	}
}
