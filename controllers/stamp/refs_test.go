package stamp

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// dumpRefs renders refs as "Kind/name" -> "*" (all keys) or the sorted keys joined by ",".
func dumpRefs(r *Refs) map[string]string {
	out := map[string]string{}
	for _, ref := range r.Objects() {
		ks := r.Keys(ref)
		if ks.All {
			out[ref.String()] = "*"
		} else {
			out[ref.String()] = strings.Join(ks.Sorted(), ",")
		}
	}
	return out
}

func equalDump(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func cmKeyRef(name, key string) *corev1.EnvVarSource {
	return &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}}
}

func secretKeyRef(name, key string) *corev1.EnvVarSource {
	return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}}
}

func items(keys ...string) []corev1.KeyToPath {
	var out []corev1.KeyToPath
	for _, k := range keys {
		out = append(out, corev1.KeyToPath{Key: k, Path: "p/" + k})
	}
	return out
}

func cmVolume(name string, keys ...string) corev1.Volume {
	return corev1.Volume{Name: "v-" + name, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: name}, Items: items(keys...)}}}
}

func secretVolume(name string, keys ...string) corev1.Volume {
	return corev1.Volume{Name: "s-" + name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
		SecretName: name, Items: items(keys...)}}}
}

func projected(srcs ...corev1.VolumeProjection) corev1.Volume {
	return corev1.Volume{Name: "proj", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: srcs}}}
}

func projCM(name string, keys ...string) corev1.VolumeProjection {
	return corev1.VolumeProjection{ConfigMap: &corev1.ConfigMapProjection{
		LocalObjectReference: corev1.LocalObjectReference{Name: name}, Items: items(keys...)}}
}

func projSecret(name string, keys ...string) corev1.VolumeProjection {
	return corev1.VolumeProjection{Secret: &corev1.SecretProjection{
		LocalObjectReference: corev1.LocalObjectReference{Name: name}, Items: items(keys...)}}
}

func envFromCM(name string) corev1.EnvFromSource {
	return corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}
}

func envFromSecret(name string) corev1.EnvFromSource {
	return corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}
}

func env(src *corev1.EnvVarSource) []corev1.EnvVar {
	return []corev1.EnvVar{{Name: "X", Value: "literal"}, {Name: "Y", ValueFrom: src}}
}

func TestObjectRefString(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    ObjectRef
		wantErr bool
	}{
		"configmap":        {in: "ConfigMap/app", want: ObjectRef{KindConfigMap, "app"}},
		"secret":           {in: "Secret/db.creds", want: ObjectRef{KindSecret, "db.creds"}},
		"slash in name":    {in: "Secret/a/b", want: ObjectRef{KindSecret, "a/b"}},
		"no slash":         {in: "ConfigMap", wantErr: true},
		"empty name":       {in: "ConfigMap/", wantErr: true},
		"unknown kind":     {in: "Pod/x", wantErr: true},
		"kind is case-sen": {in: "configmap/x", wantErr: true},
		"empty":            {in: "", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseObjectRef(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseObjectRef(%q) error = %v, wantErr %v", tc.in, err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			if got != tc.want {
				t.Fatalf("ParseObjectRef(%q) = %v, want %v", tc.in, got, tc.want)
			}
			if got.String() != tc.in {
				t.Fatalf("String() = %q, want %q", got.String(), tc.in)
			}
		})
	}
}

func TestAddTemplateRefs(t *testing.T) {
	tests := map[string]struct {
		spec *corev1.PodSpec
		want map[string]string
	}{
		"nil spec":   {spec: nil, want: map[string]string{}},
		"empty spec": {spec: &corev1.PodSpec{}, want: map[string]string{}},
		"configmap volume, all keys": {
			spec: &corev1.PodSpec{Volumes: []corev1.Volume{cmVolume("a")}},
			want: map[string]string{"ConfigMap/a": "*"},
		},
		"configmap volume with items": {
			spec: &corev1.PodSpec{Volumes: []corev1.Volume{cmVolume("a", "k2", "k1")}},
			want: map[string]string{"ConfigMap/a": "k1,k2"},
		},
		"secret volume, all keys": {
			spec: &corev1.PodSpec{Volumes: []corev1.Volume{secretVolume("s")}},
			want: map[string]string{"Secret/s": "*"},
		},
		"secret volume with items": {
			spec: &corev1.PodSpec{Volumes: []corev1.Volume{secretVolume("s", "tls.key")}},
			want: map[string]string{"Secret/s": "tls.key"},
		},
		"projected sources": {
			spec: &corev1.PodSpec{Volumes: []corev1.Volume{projected(
				projCM("a"), projCM("b", "x"), projSecret("s"), projSecret("t", "y", "z"),
				corev1.VolumeProjection{DownwardAPI: &corev1.DownwardAPIProjection{}},
				corev1.VolumeProjection{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}},
				corev1.VolumeProjection{ClusterTrustBundle: &corev1.ClusterTrustBundleProjection{Path: "ca"}},
			)}},
			want: map[string]string{"ConfigMap/a": "*", "ConfigMap/b": "x", "Secret/s": "*", "Secret/t": "y,z"},
		},
		"container configMapKeyRef": {
			spec: &corev1.PodSpec{Containers: []corev1.Container{{Env: env(cmKeyRef("a", "k"))}}},
			want: map[string]string{"ConfigMap/a": "k"},
		},
		"container secretKeyRef": {
			spec: &corev1.PodSpec{Containers: []corev1.Container{{Env: env(secretKeyRef("s", "password"))}}},
			want: map[string]string{"Secret/s": "password"},
		},
		"container envFrom": {
			spec: &corev1.PodSpec{Containers: []corev1.Container{{EnvFrom: []corev1.EnvFromSource{envFromCM("a"), envFromSecret("s")}}}},
			want: map[string]string{"ConfigMap/a": "*", "Secret/s": "*"},
		},
		"initContainer configMapKeyRef": {
			spec: &corev1.PodSpec{InitContainers: []corev1.Container{{Env: env(cmKeyRef("a", "k"))}}},
			want: map[string]string{"ConfigMap/a": "k"},
		},
		"initContainer secretKeyRef": {
			spec: &corev1.PodSpec{InitContainers: []corev1.Container{{Env: env(secretKeyRef("s", "k"))}}},
			want: map[string]string{"Secret/s": "k"},
		},
		"initContainer envFrom": {
			spec: &corev1.PodSpec{InitContainers: []corev1.Container{{EnvFrom: []corev1.EnvFromSource{envFromCM("a"), envFromSecret("s")}}}},
			want: map[string]string{"ConfigMap/a": "*", "Secret/s": "*"},
		},
		"sidecar (restartable initContainer)": {
			spec: &corev1.PodSpec{InitContainers: []corev1.Container{{
				RestartPolicy: new(corev1.ContainerRestartPolicyAlways),
				EnvFrom:       []corev1.EnvFromSource{envFromSecret("sidecar")},
			}}},
			want: map[string]string{"Secret/sidecar": "*"},
		},
		"keys from several containers union": {
			spec: &corev1.PodSpec{
				InitContainers: []corev1.Container{{Env: env(cmKeyRef("a", "k1"))}},
				Containers:     []corev1.Container{{Env: env(cmKeyRef("a", "k2"))}, {Env: env(cmKeyRef("a", "k1"))}},
			},
			want: map[string]string{"ConfigMap/a": "k1,k2"},
		},
		"envFrom wins over keyRef": {
			spec: &corev1.PodSpec{Containers: []corev1.Container{
				{Env: env(cmKeyRef("a", "k1"))},
				{EnvFrom: []corev1.EnvFromSource{envFromCM("a")}},
				{Env: env(cmKeyRef("a", "k2"))},
			}},
			want: map[string]string{"ConfigMap/a": "*"},
		},
		"volume without items wins over items": {
			spec: &corev1.PodSpec{Volumes: []corev1.Volume{cmVolume("a", "k"), cmVolume("a")}},
			want: map[string]string{"ConfigMap/a": "*"},
		},
		"volume items and keyRef union": {
			spec: &corev1.PodSpec{
				Volumes:    []corev1.Volume{secretVolume("s", "a")},
				Containers: []corev1.Container{{Env: env(secretKeyRef("s", "b"))}},
			},
			want: map[string]string{"Secret/s": "a,b"},
		},
		"same name, different kinds are different objects": {
			spec: &corev1.PodSpec{Volumes: []corev1.Volume{cmVolume("x", "k"), secretVolume("x")}},
			want: map[string]string{"ConfigMap/x": "k", "Secret/x": "*"},
		},
		"empty names ignored": {
			spec: &corev1.PodSpec{
				Volumes: []corev1.Volume{cmVolume(""), secretVolume("", "k"), projected(projCM(""), projSecret(""))},
				Containers: []corev1.Container{{
					Env:     env(cmKeyRef("", "k")),
					EnvFrom: []corev1.EnvFromSource{envFromCM(""), envFromSecret(""), {}},
				}},
				InitContainers: []corev1.Container{{Env: env(secretKeyRef("", "k"))}},
			},
			want: map[string]string{},
		},
		"not references: imagePullSecrets, serviceAccount, downwardAPI, emptyDir, fieldRef": {
			spec: &corev1.PodSpec{
				ImagePullSecrets:   []corev1.LocalObjectReference{{Name: "regcred"}},
				ServiceAccountName: "sa",
				Volumes: []corev1.Volume{
					{Name: "d", VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{}}},
					{Name: "e", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				},
				Containers: []corev1.Container{{Env: env(&corev1.EnvVarSource{
					FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}})}},
			},
			want: map[string]string{},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			refs := NewRefs()
			AddTemplateRefs(refs, tc.spec)
			if got := dumpRefs(refs); !equalDump(got, tc.want) {
				t.Fatalf("refs = %v, want %v", got, tc.want)
			}
			if refs.Len() != len(tc.want) {
				t.Fatalf("Len() = %d, want %d", refs.Len(), len(tc.want))
			}
		})
	}
}

func TestRefsMerge(t *testing.T) {
	a := ObjectRef{KindConfigMap, "a"}
	type op struct {
		all bool
		key string
	}
	tests := map[string]struct {
		ops  []op
		want string
	}{
		"single key":         {ops: []op{{key: "k"}}, want: "k"},
		"keys union":         {ops: []op{{key: "k2"}, {key: "k1"}, {key: "k2"}}, want: "k1,k2"},
		"all after keys":     {ops: []op{{key: "k"}, {all: true}}, want: "*"},
		"keys after all":     {ops: []op{{all: true}, {key: "k"}}, want: "*"},
		"all twice":          {ops: []op{{all: true}, {all: true}}, want: "*"},
		"all between keys":   {ops: []op{{key: "x"}, {all: true}, {key: "y"}}, want: "*"},
		"empty key is a key": {ops: []op{{key: ""}}, want: ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := NewRefs()
			for _, o := range tc.ops {
				if o.all {
					r.AddAll(a)
				} else {
					r.AddKey(a, o.key)
				}
			}
			if got := dumpRefs(r)[a.String()]; got != tc.want || r.Len() != 1 {
				t.Fatalf("keys = %q (len %d), want %q", got, r.Len(), tc.want)
			}
		})
	}
}

func TestRefsAccessors(t *testing.T) {
	r := NewRefs()
	for _, ref := range []ObjectRef{{KindSecret, "b"}, {KindConfigMap, "z"}, {KindSecret, "a"}, {KindConfigMap, "a-b"}, {KindConfigMap, "a"}} {
		r.AddKey(ref, "k")
	}
	wantObjs := []ObjectRef{{KindConfigMap, "a"}, {KindConfigMap, "a-b"}, {KindConfigMap, "z"}, {KindSecret, "a"}, {KindSecret, "b"}}
	if got := r.Objects(); !slices.Equal(got, wantObjs) {
		t.Errorf("Objects() = %v, want %v", got, wantObjs)
	}
	wantIdx := []string{"ConfigMap/a", "ConfigMap/a-b", "ConfigMap/z", "Secret/a", "Secret/b"}
	if got := r.IndexValues(); !slices.Equal(got, wantIdx) {
		t.Errorf("IndexValues() = %v, want %v", got, wantIdx)
	}
	// Keys returns a copy.
	ks := r.Keys(ObjectRef{KindSecret, "a"})
	ks.Keys["injected"] = struct{}{}
	if got := r.Keys(ObjectRef{KindSecret, "a"}).Sorted(); !slices.Equal(got, []string{"k"}) {
		t.Errorf("Keys() leaked internal state: %v", got)
	}
	if ks := r.Keys(ObjectRef{KindSecret, "missing"}); ks.All || ks.Keys != nil {
		t.Errorf("Keys(missing) = %+v, want zero", ks)
	}
	r.Remove(ObjectRef{KindSecret, "a"})
	if r.Len() != 4 {
		t.Errorf("Len() after Remove = %d, want 4", r.Len())
	}
	var zero Refs
	zero.AddKey(ObjectRef{KindSecret, "a"}, "k")
	zero.AddAll(ObjectRef{KindSecret, "b"})
	if got := dumpRefs(&zero); !equalDump(got, map[string]string{"Secret/a": "k", "Secret/b": "*"}) {
		t.Errorf("zero Refs = %v", got)
	}
	var nilRefs *Refs
	if nilRefs.Len() != 0 || nilRefs.Objects() != nil || len(nilRefs.IndexValues()) != 0 {
		t.Errorf("nil *Refs is not empty")
	}
}

func TestWorkloadRefs(t *testing.T) {
	spec := &corev1.PodSpec{Containers: []corev1.Container{{Env: env(cmKeyRef("tmpl", "k"))}}}
	tests := map[string]struct {
		annotations  map[string]string
		want         map[string]string
		wantProblems []string // Problem.Value
	}{
		"no annotations": {
			want: map[string]string{"ConfigMap/tmpl": "k"},
		},
		"extra configmaps and secrets": {
			annotations: map[string]string{
				AnnotationExtraConfigMaps: "one,two",
				AnnotationExtraSecrets:    "db-creds",
			},
			want: map[string]string{"ConfigMap/tmpl": "k", "ConfigMap/one": "*", "ConfigMap/two": "*", "Secret/db-creds": "*"},
		},
		"spaces trimmed, empty items skipped": {
			annotations: map[string]string{AnnotationExtraConfigMaps: " one , ,two,,  ", AnnotationExtraSecrets: " , "},
			want:        map[string]string{"ConfigMap/tmpl": "k", "ConfigMap/one": "*", "ConfigMap/two": "*"},
		},
		"extra wins over the template's key": {
			annotations: map[string]string{AnnotationExtraConfigMaps: "tmpl"},
			want:        map[string]string{"ConfigMap/tmpl": "*"},
		},
		"dotted names are valid": {
			annotations: map[string]string{AnnotationExtraSecrets: "a.b.c"},
			want:        map[string]string{"ConfigMap/tmpl": "k", "Secret/a.b.c": "*"},
		},
		"invalid names reported and skipped": {
			annotations: map[string]string{
				AnnotationExtraConfigMaps: "Bad_Name,good,-lead",
				AnnotationExtraSecrets:    "UPPER,ok,a/b," + strings.Repeat("x", 254),
			},
			want:         map[string]string{"ConfigMap/tmpl": "k", "ConfigMap/good": "*", "Secret/ok": "*"},
			wantProblems: []string{"Bad_Name", "-lead", "UPPER", "a/b", strings.Repeat("x", 254)},
		},
		"other annotations ignored": {
			annotations: map[string]string{"configstamp.io/extra-configmap": "typo", AnnotationIgnore: "true"},
			want:        map[string]string{"ConfigMap/tmpl": "k"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			refs, problems := WorkloadRefs(tc.annotations, spec)
			if got := dumpRefs(refs); !equalDump(got, tc.want) {
				t.Errorf("refs = %v, want %v", got, tc.want)
			}
			var got []string
			for _, p := range problems {
				got = append(got, p.Value)
				if !strings.HasPrefix(p.Field, "annotation configstamp.io/extra-") || !strings.Contains(p.String(), "is not a valid") {
					t.Errorf("problem %q lacks field or message", p)
				}
			}
			if !slices.Equal(got, tc.wantProblems) {
				t.Errorf("problem values = %q, want %q", got, tc.wantProblems)
			}
		})
	}
}

func TestProblemString(t *testing.T) {
	_, problems := WorkloadRefs(map[string]string{AnnotationExtraConfigMaps: "Bad_Name"}, nil)
	if len(problems) != 1 {
		t.Fatalf("problems = %v", problems)
	}
	want := `annotation configstamp.io/extra-configmaps: "Bad_Name" is not a valid ConfigMap name: `
	if got := problems[0].String(); !strings.HasPrefix(got, want) || !strings.Contains(got, "RFC 1123") {
		t.Fatalf("String() = %q, want prefix %q and the validation message", got, want)
	}
}
