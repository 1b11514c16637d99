package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configstamp/configstamp/controllers/pin"
	"github.com/configstamp/configstamp/controllers/stamp"
)

func TestExitCodes(t *testing.T) {
	tests := map[string]struct {
		args []string
		code int
	}{
		"help":              {[]string{"--help"}, exitOK},
		"no command":        {nil, exitUsage},
		"unknown command":   {[]string{"nope"}, exitUsage},
		"missing argument":  {[]string{"why"}, exitUsage},
		"extra argument":    {[]string{"status", "x"}, exitUsage},
		"bad output":        {[]string{"status", "-o", "table"}, exitUsage},
		"bad flag":          {[]string{"status", "--frobnicate"}, exitUsage},
		"-n with -A":        {[]string{"status", "-n", "a", "-A"}, exitUsage},
		"bad kind":          {[]string{"why", "pod/x"}, exitUsage},
		"bad source":        {[]string{"who-uses", "deployment/x"}, exitUsage},
		"plan without -f":   {[]string{"plan"}, exitUsage},
		"unreadable config": {[]string{"status", "--kubeconfig", "/nonexistent/kubeconfig"}, exitError},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if got := run(t.Context(), tc.args, &out, &errOut); got != tc.code {
				t.Errorf("exit %d, want %d\n%s%s", got, tc.code, out.String(), errOut.String())
			}
		})
	}
}

func TestFlagsAfterArguments(t *testing.T) {
	o, cmd, rest, err := parse([]string{"who-uses", "configmap/x", "-n", "demo", "-o", "json"}, &bytes.Buffer{})
	if err != nil || cmd.name != "who-uses" || !slices.Equal(rest, []string{"configmap/x"}) || o.namespace != "demo" || o.output != "json" {
		t.Fatalf("parse: %+v %v %v %v", o, cmd, rest, err)
	}
}

func cm(data map[string]string, ann map[string]string) *source {
	return fromConfigMap(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cfg", Annotations: ann}, Data: data})
}

func TestAppliedFollowsKubectlApply(t *testing.T) {
	last := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cfg","annotations":{"team":"a"}},"data":{"a":"1","gone":"1"}}`
	live := cm(map[string]string{"a": "1", "gone": "1", "added-by-hand": "1"}, map[string]string{lastApplied: last, "team": "a", "other": "x"})
	file := cm(map[string]string{"a": "2"}, nil)
	got, err := applied(live, file)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range got.data {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"a", "added-by-hand"}) || string(got.data["a"]) != "2" {
		t.Errorf("data keys %v (a=%s): want a=2 and the key kubectl apply never owned", keys, got.data["a"])
	}
	if _, ok := got.annotations["team"]; ok || got.annotations["other"] != "x" {
		t.Errorf("annotations %v: want team removed (last applied), other kept", got.annotations)
	}
}

func TestSecretStringDataFolds(t *testing.T) {
	s := fromSecret(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Data: map[string][]byte{"k": []byte("old")}, StringData: map[string]string{"k": "new"}})
	if string(s.data["k"]) != "new" {
		t.Errorf("stringData should win over data, got %q", s.data["k"])
	}
}

func TestPlanForEdgeCases(t *testing.T) {
	pod := corev1.PodSpec{Containers: []corev1.Container{{Name: "app", EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}}}}
	w := workload{kind: "Deployment", meta: metav1.ObjectMeta{Namespace: "ns", Name: "app", Labels: map[string]string{stamp.LabelEnabled: "true"}},
		template: &corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}}, Spec: pod}}
	plain := workload{kind: "Deployment", meta: metav1.ObjectMeta{Namespace: "ns", Name: "plain"},
		template: &corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "plain"}}}}
	pinned := workload{kind: "Deployment", meta: metav1.ObjectMeta{Namespace: "ns", Name: "pinned", Labels: map[string]string{stamp.LabelEnabled: "true"}},
		template: &corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "pinned"},
			Annotations: map[string]string{pin.AnnotationPinned: "ConfigMap/cfg-0123456789=cfg"}}, Spec: *pod.DeepCopy()}}
	pinned.template.Spec.Containers[0].EnvFrom[0].ConfigMapRef.Name = "cfg-0123456789"
	noLabels := func(string) map[string]string { return nil }
	tests := map[string]struct {
		live, next *source
		rolls      map[string]string // workload -> reason prefix
	}{
		"created":      {nil, cm(map[string]string{"a": "1"}, nil), map[string]string{"app": "created", "pinned": "created"}},
		"changed":      {cm(map[string]string{"a": "1"}, nil), cm(map[string]string{"a": "2"}, nil), map[string]string{"app": "referenced keys change", "pinned": "referenced keys change"}},
		"now ignored":  {cm(map[string]string{"a": "1"}, nil), cm(map[string]string{"a": "1"}, map[string]string{stamp.AnnotationIgnore: "true"}), map[string]string{"app": "now ignored", "pinned": "now ignored"}},
		"ignored data": {cm(map[string]string{"a": "1"}, map[string]string{stamp.AnnotationIgnore: "true"}), cm(map[string]string{"a": "2"}, map[string]string{stamp.AnnotationIgnore: "true"}), map[string]string{}},
		"selector added": {cm(map[string]string{"a": "1"}, nil), cm(map[string]string{"a": "1"}, map[string]string{stamp.AnnotationRolloutSelector: "app=plain"}),
			map[string]string{}},
		"unchanged": {cm(map[string]string{"a": "1"}, nil), cm(map[string]string{"a": "1"}, nil), map[string]string{}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			res := planFor(tc.live, tc.next, []workload{w, plain, pinned}, nil, noLabels)
			for _, e := range res.Workloads {
				want, rolls := tc.rolls[e.Name]
				if e.Rolls != rolls || rolls && !strings.HasPrefix(e.Reason, want) {
					t.Errorf("%s: rolls=%v %q, want rolls=%v %q", e.Name, e.Rolls, e.Reason, rolls, want)
				}
				if e.NewSnapshot != (e.Rolls && e.Name == "pinned" && name != "now ignored") {
					t.Errorf("%s: newSnapshot=%v; only the pinned workload that rolls onto the source's new content gets one", e.Name, e.NewSnapshot)
				}
			}
		})
	}
}

// --kinds-config (or $CONFIGSTAMP_KINDS_CONFIG) makes the extra kinds
// workloads the plugin names and reads; a bad file is a usage error.
func TestKindsConfig(t *testing.T) {
	kinds := "../../config/kinds/argo-rollouts/kinds.yaml"
	o, _, _, err := parse([]string{"why", "rollout/web", "--kinds-config", kinds}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	for _, arg := range []string{"rollout/web", "rollouts/web", "rollout.argoproj.io/web", "Rollout/web"} {
		k, name, err := o.parseWorkloadArg(arg)
		if err != nil || k.Name != "Rollout" || resource(k).Group != "argoproj.io" || resource(k).Resource != "rollouts" || name != "web" {
			t.Errorf("%s: %+v %q %v", arg, k, name, err)
		}
	}
	for arg, want := range map[string]string{"deploy/web": "Deployment", "Deployments.apps/web": "Deployment",
		"sts/web": "StatefulSet", "statefulset.apps/web": "StatefulSet", "ds/web": "DaemonSet", "daemonsets/web": "DaemonSet"} {
		if k, _, err := o.parseWorkloadArg(arg); err != nil || k.Name != want {
			t.Errorf("%s: kind %q, %v; want %s (kubectl's spelling)", arg, k.Name, err, want)
		}
	}
	for _, arg := range []string{"deploy.argoproj.io/web", "rollout.apps/web", "deploy/", "web"} {
		if k, _, err := o.parseWorkloadArg(arg); err == nil {
			t.Errorf("%s: read as %s, want a usage error", arg, k.Name)
		}
	}
	t.Setenv("CONFIGSTAMP_KINDS_CONFIG", kinds)
	if o, _, _, err = parse([]string{"why", "rollout/web"}, &bytes.Buffer{}); err != nil || len(o.registry.All()) != 4 {
		t.Fatalf("from the environment: %v, %v", o, err)
	}
	var out, errOut bytes.Buffer
	if code := run(t.Context(), []string{"why", "rollout/web", "--kinds-config", "/nonexistent.yaml"}, &out, &errOut); code != exitUsage {
		t.Fatalf("an unreadable --kinds-config: exit %d, want %d", code, exitUsage)
	}
	t.Setenv("CONFIGSTAMP_KINDS_CONFIG", "")
	if code := run(t.Context(), []string{"why", "rollout/web"}, &out, &errOut); code != exitUsage ||
		!strings.Contains(errOut.String(), "KIND deployment, statefulset or daemonset") {
		t.Fatalf("rollout/web without --kinds-config: exit %d, %s", code, errOut.String())
	}
}
