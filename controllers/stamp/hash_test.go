package stamp

import (
	"crypto/sha256"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var (
	testKey     = []byte("0123456789abcdef0123456789abcdef")
	hashRE      = regexp.MustCompile(`^v1-[0-9a-f]{32}$`)
	shortHashRE = regexp.MustCompile(`^[0-9a-f]{12}$`)
)

func configMap(name string, data map[string]string, binary map[string][]byte) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Data: data, BinaryData: binary}
}

func secret(name string, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

// world is a set of existing objects; anything else is absent.
type world struct {
	cms     []*corev1.ConfigMap
	secrets []*corev1.Secret
}

func (w world) sources(refs *Refs) map[ObjectRef]Source {
	out := map[ObjectRef]Source{}
	for _, cm := range w.cms {
		out[ObjectRef{KindConfigMap, cm.Name}] = SourceFromConfigMap(cm)
	}
	for _, s := range w.secrets {
		out[ObjectRef{KindSecret, s.Name}] = SourceFromSecret(s)
	}
	for _, ref := range refs.Objects() {
		if _, ok := out[ref]; !ok {
			out[ref] = AbsentSource(ref)
		}
	}
	return out
}

// digested returns a deep copy of w with every object passed through the cache transform.
func (w world) digested() world {
	var out world
	for _, cm := range w.cms {
		c := cm.DeepCopy()
		DigestConfigMap(c)
		out.cms = append(out.cms, c)
	}
	for _, s := range w.secrets {
		c := s.DeepCopy()
		DigestSecret(c)
		out.secrets = append(out.secrets, c)
	}
	return out
}

func compute(t *testing.T, key []byte, ns string, annotations map[string]string, spec *corev1.PodSpec, w world) Result {
	t.Helper()
	refs, problems := WorkloadRefs(annotations, spec)
	if len(problems) > 0 {
		t.Fatalf("unexpected problems: %v", problems)
	}
	res := NewHasher(key).Compute(ns, refs, w.sources(refs))
	if !hashRE.MatchString(res.Hash) {
		t.Fatalf("hash %q has the wrong format", res.Hash)
	}
	for ref, d := range res.Sources {
		if !shortHashRE.MatchString(d) {
			t.Fatalf("short digest of %v = %q has the wrong format", ref, d)
		}
	}
	return res
}

// baseSpec references: ConfigMap/app key "a" (env), all of Secret/db (envFrom, init
// container), keys x,y of ConfigMap/files (volume items), all of ConfigMap/proj
// (projected), key "tls.key" of Secret/tls (projected items).
func baseSpec() *corev1.PodSpec {
	return &corev1.PodSpec{
		Volumes: []corev1.Volume{
			cmVolume("files", "x", "y"),
			projected(projCM("proj"), projSecret("tls", "tls.key")),
		},
		InitContainers: []corev1.Container{{Name: "init", EnvFrom: []corev1.EnvFromSource{envFromSecret("db")}}},
		Containers: []corev1.Container{
			{Name: "main", Env: env(cmKeyRef("app", "a"))},
			{Name: "side", Env: env(secretKeyRef("db", "user"))},
		},
	}
}

func baseWorld() world {
	return world{
		cms: []*corev1.ConfigMap{
			configMap("app", map[string]string{"a": "1", "b": "2"}, nil),
			configMap("files", map[string]string{"x": "X", "y": "Y", "z": "Z"}, nil),
			configMap("proj", map[string]string{"text": "t"}, map[string][]byte{"blob": {0, 1, 2, 255}}),
			configMap("unreferenced", map[string]string{"k": "v"}, nil),
		},
		secrets: []*corev1.Secret{
			secret("db", map[string]string{"user": "admin", "password": "hunter2"}),
			secret("tls", map[string]string{"tls.key": "KEY", "tls.crt": "CRT"}),
		},
	}
}

func TestComputeSameOrDifferent(t *testing.T) {
	cm := func(w world, name string) *corev1.ConfigMap {
		for _, c := range w.cms {
			if c.Name == name {
				return c
			}
		}
		panic(name)
	}
	sec := func(w world, name string) *corev1.Secret {
		for _, s := range w.secrets {
			if s.Name == name {
				return s
			}
		}
		panic(name)
	}
	tests := map[string]struct {
		ns          string // "" means "ns"
		key         []byte
		annotations map[string]string
		spec        func(*corev1.PodSpec)
		world       func(*world)
		same        bool
		changed     []string // objects whose short digest must change
	}{
		"identical":   {same: true},
		"no-op spec":  {spec: func(*corev1.PodSpec) {}, same: true},
		"no-op world": {world: func(*world) {}, same: true},
		"containers, volumes and sources reordered": {same: true, spec: func(s *corev1.PodSpec) {
			slices.Reverse(s.Containers)
			slices.Reverse(s.Volumes)
			slices.Reverse(s.Volumes[0].Projected.Sources)
			slices.Reverse(s.Volumes[1].ConfigMap.Items)
		}},
		"objects listed in another order": {same: true, world: func(w *world) {
			slices.Reverse(w.cms)
			slices.Reverse(w.secrets)
		}},
		"data maps built in another order": {same: true, world: func(w *world) {
			c := cm(*w, "files")
			c.Data = map[string]string{}
			for _, k := range []string{"z", "y", "x"} {
				c.Data[k] = strings.ToUpper(k)
			}
		}},
		"reference duplicated across containers": {same: true, spec: func(s *corev1.PodSpec) {
			s.Containers = append(s.Containers, corev1.Container{Name: "dup", Env: env(cmKeyRef("app", "a"))})
			s.InitContainers = append(s.InitContainers, corev1.Container{Name: "dup", EnvFrom: []corev1.EnvFromSource{envFromSecret("db")}})
		}},
		"extra annotation naming an already fully referenced object": {same: true,
			annotations: map[string]string{AnnotationExtraSecrets: "db"}},
		"metadata-only changes": {same: true, world: func(w *world) {
			for _, c := range w.cms {
				c.Labels = map[string]string{"new": "label"}
				c.Annotations = map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{}", AnnotationIgnore: "false"}
				c.ResourceVersion = "999"
				c.UID = "uid"
				c.Generation = 7
			}
			for _, s := range w.secrets {
				s.Labels = map[string]string{"new": "label"}
				s.ResourceVersion = "1000"
				s.Type = corev1.SecretTypeOpaque
				s.StringData = map[string]string{"user": "write-only"}
			}
		}},
		"unreferenced key changed": {same: true, world: func(w *world) { cm(*w, "app").Data["b"] = "changed" }},
		"unreferenced key added": {same: true, world: func(w *world) {
			cm(*w, "app").Data["new"] = "n"
			cm(*w, "files").Data["w"] = "W"
			sec(*w, "tls").Data["ca.crt"] = []byte("CA")
		}},
		"unreferenced key removed":    {same: true, world: func(w *world) { delete(cm(*w, "files").Data, "z") }},
		"unreferenced object changed": {same: true, world: func(w *world) { cm(*w, "unreferenced").Data["k"] = "v2" }},
		"unreferenced object deleted": {same: true, world: func(w *world) {
			w.cms = slices.DeleteFunc(w.cms, func(c *corev1.ConfigMap) bool { return c.Name == "unreferenced" })
		}},

		"referenced key changed": {changed: []string{"ConfigMap/app"}, world: func(w *world) { cm(*w, "app").Data["a"] = "changed" }},
		"item key changed":       {changed: []string{"ConfigMap/files"}, world: func(w *world) { cm(*w, "files").Data["x"] = "changed" }},
		"binaryData changed":     {changed: []string{"ConfigMap/proj"}, world: func(w *world) { cm(*w, "proj").BinaryData["blob"] = []byte{9} }},
		"binaryData key added":   {changed: []string{"ConfigMap/proj"}, world: func(w *world) { cm(*w, "proj").BinaryData["more"] = []byte{9} }},
		"key moved data→binary":  {changed: []string{"ConfigMap/proj"}, world: func(w *world) { delete(cm(*w, "proj").Data, "text"); cm(*w, "proj").BinaryData["text"] = []byte("t2") }},
		"secret value changed":   {changed: []string{"Secret/db"}, world: func(w *world) { sec(*w, "db").Data["password"] = []byte("hunter3") }},
		"key added to envFrom":   {changed: []string{"Secret/db"}, world: func(w *world) { sec(*w, "db").Data["extra"] = nil }},
		"key removed from all":   {changed: []string{"Secret/db"}, world: func(w *world) { delete(sec(*w, "db").Data, "password") }},
		"referenced key removed": {changed: []string{"ConfigMap/app"}, world: func(w *world) { delete(cm(*w, "app").Data, "a") }},
		"projected item changed": {changed: []string{"Secret/tls"}, world: func(w *world) { sec(*w, "tls").Data["tls.key"] = []byte("KEY2") }},
		"object deleted": {changed: []string{"Secret/tls"}, world: func(w *world) {
			w.secrets = slices.DeleteFunc(w.secrets, func(s *corev1.Secret) bool { return s.Name == "tls" })
		}},
		"value moved between keys": {changed: []string{"ConfigMap/files"}, world: func(w *world) {
			c := cm(*w, "files")
			c.Data["x"], c.Data["y"] = c.Data["y"], c.Data["x"]
		}},
		"more keys referenced": {changed: []string{"ConfigMap/app"}, spec: func(s *corev1.PodSpec) {
			s.Containers[0].Env = append(s.Containers[0].Env, corev1.EnvVar{Name: "B", ValueFrom: cmKeyRef("app", "b")})
		}},
		"extra object referenced": {changed: []string{"ConfigMap/unreferenced"},
			annotations: map[string]string{AnnotationExtraConfigMaps: "unreferenced"}},
		"extra absent object referenced": {changed: []string{"Secret/nope"},
			annotations: map[string]string{AnnotationExtraSecrets: "nope"}},
		"reference dropped": {changed: []string{"ConfigMap/proj"}, spec: func(s *corev1.PodSpec) {
			s.Volumes[1].Projected.Sources = s.Volumes[1].Projected.Sources[1:]
		}},
		"other namespace": {ns: "other", changed: []string{"ConfigMap/app", "ConfigMap/files", "ConfigMap/proj", "Secret/db", "Secret/tls"}},
		"other HMAC key":  {key: []byte("another installation"), changed: []string{"ConfigMap/app", "ConfigMap/files", "ConfigMap/proj", "Secret/db", "Secret/tls"}},
	}
	base := compute(t, testKey, "ns", nil, baseSpec(), baseWorld())
	if len(base.Sources) != 5 {
		t.Fatalf("base sources = %v", base.Sources)
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			spec, w, ns, key := baseSpec(), baseWorld(), "ns", testKey
			if tc.spec != nil {
				tc.spec(spec)
			}
			if tc.world != nil {
				tc.world(&w)
			}
			if tc.ns != "" {
				ns = tc.ns
			}
			if tc.key != nil {
				key = tc.key
			}
			got := compute(t, key, ns, tc.annotations, spec, w)
			if (got.Hash == base.Hash) != tc.same {
				t.Errorf("hash %s vs base %s: same=%v, want same=%v", got.Hash, base.Hash, got.Hash == base.Hash, tc.same)
			}
			var changed []string
			for _, ref := range Changed(base.Sources, got.Sources) {
				changed = append(changed, ref.String())
			}
			if !slices.Equal(changed, tc.changed) {
				t.Errorf("Changed = %v, want %v", changed, tc.changed)
			}
			// The digested (cache) view of the same world gives exactly the same result.
			if dg := compute(t, key, ns, tc.annotations, spec, w.digested()); !reflect.DeepEqual(dg, got) {
				t.Errorf("digested result %+v != full result %+v", dg, got)
			}
		})
	}
}

func TestComputeRevert(t *testing.T) {
	w := baseWorld()
	v1 := compute(t, testKey, "ns", nil, baseSpec(), w)
	w.secrets[0].Data["password"] = []byte("v2")
	v2 := compute(t, testKey, "ns", nil, baseSpec(), w)
	w.secrets[0].Data["password"] = []byte("hunter2")
	back := compute(t, testKey, "ns", nil, baseSpec(), w)
	if v1.Hash == v2.Hash {
		t.Fatalf("v2 did not change the hash")
	}
	if !reflect.DeepEqual(v1, back) {
		t.Fatalf("revert: %+v != %+v", back, v1)
	}
}

// TestComputeStates: absent, present-empty, present with and without the referenced
// key are all different. States in the same group have the same content and must hash
// the same: which keys are referenced matters only through what they select.
func TestComputeStates(t *testing.T) {
	ref := ObjectRef{KindConfigMap, "c"}
	all, one := NewRefs(), NewRefs()
	all.AddAll(ref)
	one.AddKey(ref, "k")
	present := func(d map[string]string) map[ObjectRef]Source {
		return map[ObjectRef]Source{ref: {Ref: ref, Present: true, Digests: d}}
	}
	kv := Digest([]byte("v"))
	states := map[string]struct {
		group   string
		refs    *Refs
		sources map[ObjectRef]Source
	}{
		"all: missing from sources":  {"absent", all, nil},
		"all: not present":           {"absent", all, map[ObjectRef]Source{ref: AbsentSource(ref)}},
		"key: missing from sources":  {"absent", one, map[ObjectRef]Source{}},
		"all: present, empty":        {"empty", all, present(nil)},
		"all: present, k empty":      {"k empty", all, present(map[string]string{"k": Digest(nil)})},
		"all: present, k=v":          {"k=v", all, present(map[string]string{"k": kv})},
		"key: present, k=v":          {"k=v", one, present(map[string]string{"k": kv})},
		"key: present, k=v and more": {"k=v", one, present(map[string]string{"k": kv, "x": "y"})},
		"all: present, other":        {"other", all, present(map[string]string{"other": Digest(nil)})},
		"key: present, k missing":    {"key absent", one, present(map[string]string{})},
		"key: present, only other":   {"key absent", one, present(map[string]string{"other": kv})},
	}
	h := NewHasher(testKey)
	byGroup, byHash := map[string]string{}, map[string]string{}
	for name, st := range states {
		res := h.Compute("ns", st.refs, st.sources)
		if g, ok := byHash[res.Hash]; ok && g != st.group {
			t.Errorf("%q (group %q) collides with group %q", name, st.group, g)
		}
		if hh, ok := byGroup[st.group]; ok && hh != res.Hash {
			t.Errorf("%q differs from the rest of group %q", name, st.group)
		}
		byHash[res.Hash], byGroup[st.group] = st.group, res.Hash
	}
	// An absent Source and a missing map entry are the same thing.
	a := h.Compute("ns", all, map[ObjectRef]Source{ref: AbsentSource(ref)})
	b := h.Compute("ns", all, nil)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("AbsentSource %v != missing %v", a, b)
	}
	// Nothing referenced: a valid, stable hash.
	if e1, e2 := h.Compute("ns", NewRefs(), nil), h.Compute("ns", nil, nil); e1.Hash != e2.Hash || !hashRE.MatchString(e1.Hash) || len(e1.Sources) != 0 {
		t.Errorf("empty: %+v %+v", e1, e2)
	}
}

// TestComputeUnambiguous: shifting bytes between fields never collides.
func TestComputeUnambiguous(t *testing.T) {
	h := NewHasher(testKey)
	type input struct{ ns, name, key, value string }
	inputs := []input{
		{"ab", "c", "k", "v"},
		{"a", "bc", "k", "v"},
		{"a", "b", "ck", "v"},
		{"a", "b", "c", "kv"},
		{"a", "b", "c", "k\x00v"},
		{"a\x00b", "c", "k", "v"},
	}
	seen := map[string]input{}
	for _, in := range inputs {
		ref := ObjectRef{KindConfigMap, in.name}
		refs := NewRefs()
		refs.AddKey(ref, in.key)
		res := h.Compute(in.ns, refs, map[ObjectRef]Source{ref: {Ref: ref, Present: true, Digests: map[string]string{in.key: in.value}}})
		if prev, dup := seen[res.Hash]; dup {
			t.Errorf("%+v and %+v collide", in, prev)
		}
		seen[res.Hash] = in
	}
	// Same name as ConfigMap and as Secret differ.
	for _, kind := range []Kind{KindConfigMap, KindSecret} {
		refs := NewRefs()
		refs.AddAll(ObjectRef{kind, "x"})
		res := h.Compute("ns", refs, nil)
		if _, dup := seen[res.Hash]; dup {
			t.Errorf("kind %s collides", kind)
		}
		seen[res.Hash] = input{}
	}
}

func TestComputeIgnored(t *testing.T) {
	w := baseWorld()
	withoutTLS := baseSpec()
	withoutTLS.Volumes[1].Projected.Sources = withoutTLS.Volumes[1].Projected.Sources[:1]
	want := compute(t, testKey, "ns", nil, withoutTLS, w)

	for _, s := range w.secrets {
		if s.Name == "tls" {
			s.Annotations = map[string]string{AnnotationIgnore: "true"}
		}
	}
	got := compute(t, testKey, "ns", nil, baseSpec(), w)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ignored object still counts: %+v, want %+v", got, want)
	}
	for _, s := range w.secrets {
		if s.Name == "tls" {
			s.Data["tls.key"] = []byte("rotated")
		}
	}
	if again := compute(t, testKey, "ns", nil, baseSpec(), w); again.Hash != want.Hash {
		t.Fatalf("change of an ignored object changed the hash")
	}
	if dg := compute(t, testKey, "ns", nil, baseSpec(), w.digested()); !reflect.DeepEqual(dg, want) {
		t.Fatalf("digested ignored object counts: %+v", dg)
	}
	// A bad ignore value does not ignore.
	w.secrets[1].Annotations[AnnotationIgnore] = "yes"
	if bad := compute(t, testKey, "ns", nil, baseSpec(), w); bad.Hash == want.Hash {
		t.Fatalf(`ignore: "yes" ignored the object`)
	}
}

func TestHasherCopiesKey(t *testing.T) {
	key := slices.Clone(testKey)
	h := NewHasher(key)
	refs, _ := WorkloadRefs(nil, baseSpec())
	before := h.Compute("ns", refs, nil)
	key[0] ^= 0xff
	if after := h.Compute("ns", refs, nil); after.Hash != before.Hash {
		t.Fatalf("Hasher aliases the caller's key")
	}
}

func TestSourceFromDigested(t *testing.T) {
	cms := map[string]*corev1.ConfigMap{
		"data only":       configMap("a", map[string]string{"k": "v", "empty": ""}, nil),
		"binary only":     configMap("b", nil, map[string][]byte{"bin": {0xff, 0}}),
		"data and binary": configMap("c", map[string]string{"k": "v"}, map[string][]byte{"bin": {1}}),
		"no keys":         configMap("d", nil, nil),
		"user-set marker": {ObjectMeta: metav1.ObjectMeta{Name: "e", Annotations: map[string]string{"configstamp.io/digested": "sha256"}},
			Data: map[string]string{"k": "not really a digest"}, BinaryData: map[string][]byte{"b": {1}}},
		"other marker value": {ObjectMeta: metav1.ObjectMeta{Name: "f", Annotations: map[string]string{"configstamp.io/digested": "sha256-combined"}},
			Data: map[string]string{"k": "v"}},
	}
	for name, cm := range cms {
		t.Run("ConfigMap "+name, func(t *testing.T) {
			full := SourceFromConfigMap(cm)
			d := cm.DeepCopy()
			DigestConfigMap(d)
			if got := SourceFromConfigMap(d); !reflect.DeepEqual(got, full) {
				t.Fatalf("digested source %+v != full %+v", got, full)
			}
			if !full.Present || full.Ref != (ObjectRef{KindConfigMap, cm.Name}) || len(full.Digests) != len(cm.Data)+len(cm.BinaryData) {
				t.Fatalf("source = %+v", full)
			}
		})
	}
	secrets := map[string]*corev1.Secret{
		"data":        secret("s", map[string]string{"user": "u", "password": "p", "empty": ""}),
		"empty":       secret("e", nil),
		"stringData":  {ObjectMeta: metav1.ObjectMeta{Name: "sd"}, StringData: map[string]string{"k": "v"}},
		"nil data":    {ObjectMeta: metav1.ObjectMeta{Name: "n"}},
		"with marker": {ObjectMeta: metav1.ObjectMeta{Name: "m", Annotations: map[string]string{"configstamp.io/digested": "sha256"}}, Data: map[string][]byte{"k": []byte("x")}},
	}
	for name, s := range secrets {
		t.Run("Secret "+name, func(t *testing.T) {
			full := SourceFromSecret(s)
			d := s.DeepCopy()
			DigestSecret(d)
			if got := SourceFromSecret(d); !reflect.DeepEqual(got, full) {
				t.Fatalf("digested source %+v != full %+v", got, full)
			}
			if !full.Present || len(full.Digests) != len(s.Data) {
				t.Fatalf("source = %+v", full)
			}
		})
	}
	if got := SourceFromSecret(secret("x", map[string]string{"k": "v"})).Digests["k"]; got != "4c94485e0c21ae6c41ce1dfe7b6bfaceea5ab68e40a2476f50208e526f506080" {
		t.Errorf("Digest(v) = %s, want sha256 hex", got)
	}
	if SourceFromConfigMap(nil).Present || SourceFromSecret(nil).Present {
		t.Errorf("nil object is present")
	}
}

func TestDigestTransform(t *testing.T) {
	lastApplied := `{"apiVersion":"v1","data":{"password":"c2VjcmV0"},"kind":"Secret"}`
	meta := func() metav1.ObjectMeta {
		return metav1.ObjectMeta{
			Name: "x", Namespace: "ns", ResourceVersion: "42", UID: "u",
			Labels: map[string]string{"app": "x"},
			Annotations: map[string]string{
				"kubectl.kubernetes.io/last-applied-configuration": lastApplied,
				AnnotationIgnore:          "false",
				AnnotationRolloutSelector: "app=x",
				AnnotationPodDeleteMatch:  "app=y",
				"other":                   "dropped",
				"configstamp.io/digested": "sha256", // a user's: no effect
			},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
			OwnerReferences: []metav1.OwnerReference{{Name: "owner"}},
		}
	}
	wantAnn := map[string]string{
		AnnotationDigested:        DigestedPerKey,
		AnnotationIgnore:          "false",
		AnnotationRolloutSelector: "app=x",
		AnnotationPodDeleteMatch:  "app=y",
	}
	checkMeta := func(t *testing.T, m metav1.ObjectMeta) {
		t.Helper()
		if !maps.Equal(m.Annotations, wantAnn) {
			t.Errorf("annotations = %v, want %v", m.Annotations, wantAnn)
		}
		if m.Labels != nil || m.ManagedFields != nil || m.OwnerReferences != nil {
			t.Errorf("labels/managedFields/ownerReferences kept: %+v", m)
		}
		if m.Name != "x" || m.Namespace != "ns" || m.ResourceVersion != "42" || m.UID != "" {
			t.Errorf("identity lost or UID kept: %+v", m)
		}
	}

	t.Run("ConfigMap", func(t *testing.T) {
		cm := &corev1.ConfigMap{ObjectMeta: meta(), Data: map[string]string{"password": "secret"}, BinaryData: map[string][]byte{"bin": []byte("secret")}}
		DigestConfigMap(cm)
		checkMeta(t, cm.ObjectMeta)
		sum := sha256.Sum256([]byte("secret"))
		want := map[string]string{"password": string(sum[:]), "bin": string(sum[:])}
		if !maps.Equal(cm.Data, want) || cm.BinaryData != nil {
			t.Errorf("data = %v binaryData = %v, want %v", cm.Data, cm.BinaryData, want)
		}
		once := cm.DeepCopy()
		DigestConfigMap(cm)
		if !reflect.DeepEqual(cm, once) {
			t.Errorf("not idempotent: %+v vs %+v", cm, once)
		}
		DigestConfigMap(nil)
	})
	t.Run("Secret", func(t *testing.T) {
		s := &corev1.Secret{ObjectMeta: meta(), Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"password": []byte("secret")}, StringData: map[string]string{"k": "v"}}
		DigestSecret(s)
		checkMeta(t, s.ObjectMeta)
		sum := sha256.Sum256([]byte("secret"))
		if len(s.StringData) != 1 || s.StringData["password"] != string(sum[:]) || s.Data != nil || s.Type != corev1.SecretTypeOpaque {
			t.Errorf("secret = %+v", s)
		}
		once := s.DeepCopy()
		DigestSecret(s)
		if !reflect.DeepEqual(s, once) {
			t.Errorf("not idempotent: %+v vs %+v", s, once)
		}
		DigestSecret(nil)
	})
	t.Run("size does not depend on the values", func(t *testing.T) {
		big := strings.Repeat("x", 1<<20)
		cm := &corev1.ConfigMap{ObjectMeta: meta(), Data: map[string]string{"a": big, "b": ""}, BinaryData: map[string][]byte{"c": []byte(big)}}
		s := &corev1.Secret{ObjectMeta: meta(), Data: map[string][]byte{"a": []byte(big), "b": nil}}
		DigestConfigMap(cm)
		DigestSecret(s)
		for k, v := range cm.Data {
			if len(v) != sha256.Size {
				t.Errorf("ConfigMap key %s holds %d bytes, want %d", k, len(v), sha256.Size)
			}
		}
		for k, v := range s.StringData {
			if len(v) != sha256.Size {
				t.Errorf("Secret key %s holds %d bytes, want %d", k, len(v), sha256.Size)
			}
		}
		if len(cm.Data) != 3 || len(s.StringData) != 2 || s.Data != nil {
			t.Errorf("keys lost: %d ConfigMap keys, %d Secret keys (data %v)", len(cm.Data), len(s.StringData), s.Data)
		}
	})
}

func TestFormatParseSources(t *testing.T) {
	tests := map[string]struct {
		in   map[ObjectRef]string
		want string
	}{
		"empty": {in: map[ObjectRef]string{}, want: ""},
		"nil":   {in: nil, want: ""},
		"sorted by kind then name": {
			in:   map[ObjectRef]string{{KindSecret, "a"}: "0000000000aa", {KindConfigMap, "z"}: "0123abcd4567", {KindConfigMap, "b.c"}: "ffffffffffff"},
			want: "ConfigMap/b.c=ffffffffffff,ConfigMap/z=0123abcd4567,Secret/a=0000000000aa",
		},
		"names that no object can have are escaped": {
			in:   map[ObjectRef]string{{KindConfigMap, "a,b=c%d e/f"}: "01", {KindSecret, "ünï\x00"}: "02"},
			want: "ConfigMap/a%2Cb%3Dc%25d%20e/f=01,Secret/%C3%BCn%C3%AF%00=02",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := FormatSources(tc.in)
			if got != tc.want {
				t.Fatalf("FormatSources = %q, want %q", got, tc.want)
			}
			if back := ParseSources(got); !maps.Equal(back, tc.in) || back == nil {
				t.Fatalf("ParseSources(%q) = %v, want %v", got, back, tc.in)
			}
		})
	}
}

func TestParseSourcesTolerant(t *testing.T) {
	a, b := ObjectRef{KindConfigMap, "a"}, ObjectRef{KindSecret, "b"}
	tests := map[string]struct {
		in   string
		want map[ObjectRef]string
	}{
		"empty":                {in: "", want: map[ObjectRef]string{}},
		"garbage":              {in: "garbage", want: map[ObjectRef]string{}},
		"spaces and empties":   {in: " ConfigMap/a=01 ,, Secret/b=02 ,", want: map[ObjectRef]string{a: "01", b: "02"}},
		"unknown kind":         {in: "Pod/x=01,ConfigMap/a=01", want: map[ObjectRef]string{a: "01"}},
		"missing digest":       {in: "ConfigMap/a=,Secret/b=02", want: map[ObjectRef]string{b: "02"}},
		"non-hex digest":       {in: "ConfigMap/a=xyz,ConfigMap/a=ABCD,Secret/b=02", want: map[ObjectRef]string{b: "02"}},
		"no equals":            {in: "ConfigMap/a,Secret/b=02", want: map[ObjectRef]string{b: "02"}},
		"empty name":           {in: "ConfigMap/=01", want: map[ObjectRef]string{}},
		"bad escapes":          {in: "ConfigMap/a%=01,ConfigMap/a%2=01,ConfigMap/a%zz=01,ConfigMap/%61=01,ConfigMap/a b=01", want: map[ObjectRef]string{}},
		"later duplicate wins": {in: "ConfigMap/a=01,ConfigMap/a=02", want: map[ObjectRef]string{a: "02"}},
		"lowercase escape ok":  {in: "ConfigMap/x%2cy=01", want: map[ObjectRef]string{{KindConfigMap, "x,y"}: "01"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := ParseSources(tc.in); !maps.Equal(got, tc.want) || got == nil {
				t.Fatalf("ParseSources(%q) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}

func TestChanged(t *testing.T) {
	a, b, c := ObjectRef{KindConfigMap, "a"}, ObjectRef{KindSecret, "b"}, ObjectRef{KindConfigMap, "c"}
	tests := map[string]struct {
		old, new map[ObjectRef]string
		want     []ObjectRef
	}{
		"both empty": {},
		"equal":      {old: map[ObjectRef]string{a: "1", b: "2"}, new: map[ObjectRef]string{b: "2", a: "1"}},
		"modified":   {old: map[ObjectRef]string{a: "1", b: "2"}, new: map[ObjectRef]string{a: "1", b: "3"}, want: []ObjectRef{b}},
		"added":      {old: map[ObjectRef]string{a: "1"}, new: map[ObjectRef]string{a: "1", c: "3"}, want: []ObjectRef{c}},
		"removed":    {old: map[ObjectRef]string{a: "1", c: "3"}, new: map[ObjectRef]string{c: "3"}, want: []ObjectRef{a}},
		"all kinds, sorted": {
			old:  map[ObjectRef]string{b: "2", c: "3"},
			new:  map[ObjectRef]string{a: "1", b: "9"},
			want: []ObjectRef{a, c, b},
		},
		"from nil": {new: map[ObjectRef]string{b: "2", a: "1"}, want: []ObjectRef{a, b}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := Changed(tc.old, tc.new); !slices.Equal(got, tc.want) {
				t.Fatalf("Changed = %v, want %v", got, tc.want)
			}
		})
	}
}
