// Package plugin tests the kubectl plugin (cmd/kubectl-configstamp) against
// the local control plane with configstamp running: every command, golden
// files for the human form (UPDATE_GOLDEN=1 rewrites them), the JSON form
// field by field, and that `plan` predicts exactly the workloads that roll
// when the manifest is then applied.
package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/test/framework"
)

var (
	env     *framework.Env
	plugin  string // the built kubectl-configstamp
	hashKey = []byte("plugin-suite-hash-key-0123456789")
)

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "kubectl-configstamp-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer func() { _ = os.RemoveAll(dir) }()
		plugin = filepath.Join(dir, "kubectl-configstamp")
		// The version as hack/release.mk stamps it.
		build := exec.Command("go", "build", "-ldflags", "-X main.version="+pluginVersion, "-o", plugin, "../../cmd/kubectl-configstamp")
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building the plugin: %v\n%s", err, out)
			return 1
		}
		return framework.Main(m, &env, framework.Config{Plane: framework.Kwok, HashKey: hashKey, Args: []string{"--debounce=0"}})
	}())
}

// run runs the plugin against the suite's cluster and returns stdout, stderr
// and the exit code.
func run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(plugin, append([]string{"--kubeconfig", env.Kubeconfig}, args...)...)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running the plugin: %v", err)
	}
	return out.String(), errOut.String(), code
}

// ok runs the plugin and fails the test unless it exits 0.
func ok(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, code := run(t, args...)
	if code != 0 {
		t.Fatalf("kubectl configstamp %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

func jsonOf(t *testing.T, out string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
}

var (
	timestamps = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`)
	stamps     = regexp.MustCompile(`v1-[0-9a-f]{32}`)
)

// golden compares out, normalised (times, stamps), with testdata/name.golden.
func golden(t *testing.T, name, out string) {
	t.Helper()
	out = stamps.ReplaceAllString(timestamps.ReplaceAllString(out, "YYYY-MM-DDTHH:MM:SSZ"), "v1-<hash>")
	path := filepath.Join("testdata", name+".golden")
	if os.Getenv("UPDATE_GOLDEN") != "" {
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (UPDATE_GOLDEN=1 writes it)", err)
	}
	if string(want) != out {
		t.Errorf("%s differs from %s (UPDATE_GOLDEN=1 rewrites it)\n--- got ---\n%s--- want ---\n%s", name, path, out, want)
	}
}

func namespace(t *testing.T, name string) string {
	t.Helper()
	env.Kubectl(t, "", "create", "namespace", name)
	return name
}

func keyRef(spec *corev1.PodSpec, kind stamp.Kind, obj, key string) {
	src := &corev1.EnvVarSource{}
	sel := corev1.LocalObjectReference{Name: obj}
	if kind == stamp.KindSecret {
		src.SecretKeyRef = &corev1.SecretKeySelector{LocalObjectReference: sel, Key: key}
	} else {
		src.ConfigMapKeyRef = &corev1.ConfigMapKeySelector{LocalObjectReference: sel, Key: key}
	}
	spec.Containers[0].Env = append(spec.Containers[0].Env, corev1.EnvVar{Name: strings.ToUpper(key), ValueFrom: src})
}

func waitRolledOut(t *testing.T, deps ...*appsv1.Deployment) {
	t.Helper()
	for _, d := range deps {
		framework.Eventually(t, 90*time.Second, func() (bool, string) {
			env.Get(t, d)
			return framework.RolledOut(d) && (framework.TemplateHash(d) != "" || d.Labels[stamp.LabelEnabled] == ""),
				d.Name + " not rolled out"
		})
	}
}

func TestUsageAndErrors(t *testing.T) {
	if _, errOut, code := run(t, "who-uses"); code != 2 || !strings.Contains(errOut, "takes 1 argument") {
		t.Errorf("who-uses without argument: exit %d, %q; want 2", code, errOut)
	}
	if _, _, code := run(t, "frobnicate"); code != 2 {
		t.Errorf("unknown command: exit %d, want 2", code)
	}
	if _, _, code := run(t, "why", "pod/x"); code != 2 {
		t.Errorf("why pod/x: exit %d, want 2", code)
	}
	if _, _, code := run(t, "status", "-o", "xml"); code != 2 {
		t.Errorf("-o xml: exit %d, want 2", code)
	}
	if _, errOut, code := run(t, "why", "deployment/absent", "-n", "default"); code != 1 || !strings.Contains(errOut, "not found") {
		t.Errorf("why on a missing workload: exit %d, %q; want 1 and not found", code, errOut)
	}
	if out, _, code := run(t, "--help"); code != 0 || !strings.Contains(out, "who-uses") {
		t.Errorf("--help: exit %d", code)
	}
	// kubectl finds the plugin on PATH.
	cmd := exec.Command("kubectl", "configstamp", "--help")
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(plugin)+":"+os.Getenv("PATH"))
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "kubectl configstamp") {
		t.Errorf("kubectl configstamp --help: %v\n%s", err, out)
	}
}

func TestWhoUses(t *testing.T) {
	ns := namespace(t, "plugin-who")
	shared := framework.ConfigMap(ns, "shared", map[string]string{"a": "1", "b": "1"},
		map[string]string{stamp.AnnotationRolloutSelector: "tier=web"})
	creds := framework.Secret(ns, "creds", map[string]string{"password": "s3cret-value"})

	volume := framework.PodSpec()
	framework.MountConfigMap(&volume, "shared")
	keys := framework.PodSpec()
	keyRef(&keys, stamp.KindConfigMap, "shared", "a")
	keyRef(&keys, stamp.KindSecret, "creds", "password")
	projected := framework.PodSpec()
	projected.Volumes = []corev1.Volume{{Name: "p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{{ConfigMap: &corev1.ConfigMapProjection{
			LocalObjectReference: corev1.LocalObjectReference{Name: "shared"}, Items: []corev1.KeyToPath{{Key: "b", Path: "b"}}}}}}}}}
	envFrom := framework.PodSpec()
	envFrom.Containers[0].EnvFrom = []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "shared"}}}}

	extra := framework.Deployment(ns, "extra", framework.OptIn, framework.PodSpec())
	extra.Annotations = map[string]string{stamp.AnnotationExtraConfigMaps: "shared"}
	selected := framework.Deployment(ns, "selected", nil, framework.PodSpec())
	selected.Spec.Template.Labels["tier"] = "web"
	deps := []*appsv1.Deployment{
		framework.Deployment(ns, "volume", framework.OptIn, volume),
		framework.Deployment(ns, "keys", framework.OptIn, keys),
		framework.Deployment(ns, "projected", framework.OptIn, projected),
		framework.Deployment(ns, "plain-envfrom", nil, envFrom),
		extra, selected,
		framework.Deployment(ns, "unrelated", framework.OptIn, framework.PodSpec()),
	}
	objs := []client.Object{shared, creds}
	for _, d := range deps {
		objs = append(objs, d)
	}
	env.Apply(t, objs...)

	out := ok(t, "who-uses", "configmap/shared", "-n", ns)
	golden(t, "who-uses-configmap", out)
	golden(t, "who-uses-configmap-wide", ok(t, "who-uses", "cm/shared", "-n", ns, "-o", "wide"))
	secretOut := ok(t, "who-uses", "secret/creds", "-n", ns)
	golden(t, "who-uses-secret", secretOut)
	if strings.Contains(secretOut, "s3cret") {
		t.Error("who-uses printed a Secret value")
	}

	var res struct {
		Kind, Name, Namespace string
		Workloads             []struct {
			Namespace, Kind, Name string
			OptedIn, Rolls        bool
			AllKeys               bool
			Keys                  []string
			References            []struct {
				Via, Where string
				AllKeys    bool
				Keys       []string
			}
		}
	}
	jsonOf(t, ok(t, "who-uses", "configmap/shared", "-n", ns, "-o", "json"), &res)
	if res.Kind != "ConfigMap" || res.Name != "shared" || res.Namespace != ns {
		t.Errorf("who-uses JSON names %s %s/%s", res.Kind, res.Namespace, res.Name)
	}
	type want struct {
		optedIn, rolls, all bool
		keys                []string
		via                 string
		where               string
	}
	wants := map[string]want{
		"extra":         {true, true, true, nil, "extra", stamp.AnnotationExtraConfigMaps},
		"keys":          {true, true, false, []string{"a"}, "keyRef", "app"},
		"plain-envfrom": {false, false, true, nil, "envFrom", "app"},
		"projected":     {true, true, false, []string{"b"}, "projected", "p"},
		"selected":      {false, true, true, nil, "rollout-selector", "tier=web"},
		"volume":        {true, true, true, nil, "volume", "shared"},
	}
	var got []string
	for _, w := range res.Workloads {
		got = append(got, w.Name)
		x, found := wants[w.Name]
		if !found {
			t.Errorf("who-uses lists %s, which does not reference shared", w.Name)
			continue
		}
		if w.Kind != "Deployment" || w.Namespace != ns || w.OptedIn != x.optedIn || w.Rolls != x.rolls || w.AllKeys != x.all || !slices.Equal(w.Keys, x.keys) {
			t.Errorf("%s: %+v, want %+v", w.Name, w, x)
		}
		if len(w.References) != 1 || w.References[0].Via != x.via || w.References[0].Where != x.where {
			t.Errorf("%s references: %+v, want one %s at %s", w.Name, w.References, x.via, x.where)
		}
	}
	if len(got) != len(wants) {
		t.Errorf("who-uses lists %v, want the %d of %v", got, len(wants), wants)
	}

	// -A: the same workloads, with their namespace.
	var all struct {
		Namespace string
		Workloads []struct{ Namespace, Name string }
	}
	jsonOf(t, ok(t, "who-uses", "configmap/shared", "-A", "-o", "json"), &all)
	n := 0
	for _, w := range all.Workloads {
		if w.Namespace == ns {
			n++
		}
	}
	if all.Namespace != "" || n != len(wants) {
		t.Errorf("who-uses -A: namespace %q, %d workloads of %s, want \"\" and %d", all.Namespace, n, ns, len(wants))
	}
}

// replicaSetCounts counts the ReplicaSets of each Deployment.
func replicaSetCounts(t *testing.T, ns string, names []string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, n := range names {
		out[n] = len(env.ReplicaSets(t, ns, n))
	}
	return out
}

func TestPlanPredictsWhatRolls(t *testing.T) {
	ns := namespace(t, "plugin-plan")
	cfg := func(data map[string]string, ann map[string]string) *corev1.ConfigMap {
		return framework.ConfigMap(ns, "cfg", data, ann)
	}
	usesA := framework.PodSpec()
	keyRef(&usesA, stamp.KindConfigMap, "cfg", "a")
	keyRef(&usesA, stamp.KindSecret, "token", "t")
	usesAll := framework.PodSpec()
	framework.MountConfigMap(&usesAll, "cfg")
	usesB := framework.PodSpec()
	usesB.Volumes = []corev1.Volume{{Name: "b", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Items: []corev1.KeyToPath{{Key: "b", Path: "b"}}}}}}
	sentinelSpec := framework.PodSpec()
	framework.MountConfigMap(&sentinelSpec, "sentinel")
	off := framework.PodSpec()
	framework.MountConfigMap(&off, "cfg")
	deps := []*appsv1.Deployment{
		framework.Deployment(ns, "uses-a", framework.OptIn, usesA),
		framework.Deployment(ns, "uses-all", framework.OptIn, usesAll),
		framework.Deployment(ns, "uses-b", framework.OptIn, usesB),
		framework.Deployment(ns, "off", nil, off),
	}
	sentinel := framework.Deployment(ns, "sentinel", framework.OptIn, sentinelSpec)
	names := []string{"uses-a", "uses-all", "uses-b", "off"}
	objs := []client.Object{cfg(map[string]string{"a": "1", "b": "1"}, nil),
		framework.Secret(ns, "token", map[string]string{"t": "tok-one", "unused": "tok-x"}),
		framework.ConfigMap(ns, "sentinel", map[string]string{"n": "0"}, nil), sentinel}
	for _, d := range deps {
		objs = append(objs, d)
	}
	env.Apply(t, objs...)
	waitRolledOut(t, append(deps, sentinel)...)

	cases := []struct {
		name     string
		manifest client.Object
		rolls    []string
		// canaries: one per change, key-precise: uses-all references every
		// key, so its change is never uses-a's nor uses-b's.
		canaries []string
	}{
		{"referenced-key", cfg(map[string]string{"a": "2", "b": "1"}, nil), []string{"uses-a", "uses-all"}, []string{"uses-a", "uses-all"}},
		{"key-b", cfg(map[string]string{"a": "2", "b": "2"}, nil), []string{"uses-all", "uses-b"}, []string{"uses-all", "uses-b"}},
		{"metadata-only", cfg(map[string]string{"a": "2", "b": "2"}, map[string]string{"team": "payments"}), nil, nil},
		{"secret-unreferenced-key", framework.Secret(ns, "token", map[string]string{"t": "tok-one", "unused": "tok-y"}), nil, nil},
		{"secret-referenced-key", framework.Secret(ns, "token", map[string]string{"t": "tok-two", "unused": "tok-y"}), []string{"uses-a"}, []string{"uses-a"}},
		{"new-key", cfg(map[string]string{"a": "2", "b": "2", "c": "1"}, map[string]string{"team": "payments"}), []string{"uses-all"}, []string{"uses-all"}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "manifest.json")
			if err := os.WriteFile(file, []byte(framework.Manifest(t, tc.manifest)), 0o644); err != nil {
				t.Fatal(err)
			}
			human := ok(t, "plan", "-f", file, "-n", ns)
			golden(t, "plan-"+tc.name, human)
			if strings.Contains(human, "tok-") {
				t.Errorf("plan printed a Secret value:\n%s", human)
			}
			var res struct {
				Objects []struct {
					Kind, Namespace, Name string
					Exists                bool
					Workloads             []struct {
						Kind, Name, Reason string
						Rolls, Canary      bool
						Keys               []string
					}
				}
			}
			jsonOf(t, ok(t, "plan", "-f", file, "-o", "json"), &res)
			if len(res.Objects) != 1 || res.Objects[0].Namespace != ns || !res.Objects[0].Exists {
				t.Fatalf("plan JSON: %+v", res)
			}
			var predicted, canaries []string
			for _, w := range res.Objects[0].Workloads {
				if w.Kind != "Deployment" || w.Reason == "" {
					t.Errorf("plan entry %+v", w)
				}
				if w.Rolls {
					predicted = append(predicted, w.Name)
				}
				if w.Canary {
					canaries = append(canaries, w.Name)
				}
			}
			if !slices.Equal(predicted, tc.rolls) {
				t.Errorf("plan predicts %v, want %v", predicted, tc.rolls)
			}
			// The canaries: per change, the first that rolls it in wave order
			// (no priorities here: by name).
			if !slices.Equal(canaries, tc.canaries) {
				t.Errorf("plan names the canaries %v, want %v", canaries, tc.canaries)
			}

			before := replicaSetCounts(t, ns, names)
			since := map[string]float64{"deployment": env.Configstamp.ReconcileCounts(t)["deployment"]}
			env.Kubectl(t, framework.Manifest(t, tc.manifest), "apply", "-f", "-")
			// A barrier: the sentinel ConfigMap changes after the manifest on the
			// same watch; once its workload rolled and configstamp is idle, every
			// rollout the manifest causes has been stamped.
			env.Get(t, sentinel)
			h := framework.TemplateHash(sentinel)
			env.Apply(t, framework.ConfigMap(ns, "sentinel", map[string]string{"n": fmt.Sprint(i + 1)}, nil))
			env.WaitTemplateHash(t, sentinel, h)
			env.Configstamp.WaitIdle(t, since)
			var rolled []string
			framework.Eventually(t, 60*time.Second, func() (bool, string) {
				after := replicaSetCounts(t, ns, names)
				rolled = nil
				for _, n := range names {
					if after[n] > before[n] {
						rolled = append(rolled, n)
					}
				}
				return slices.Equal(rolled, predicted), fmt.Sprintf("rolled %v, plan predicted %v", rolled, predicted)
			})
			for _, d := range deps {
				waitRolledOut(t, d)
			}
		})
	}
}

func TestHaltStatusWhyResume(t *testing.T) {
	// A real halt (a hand-written one counts for nothing: records are
	// sealed): two slots and a short deadline; failed and failed-too
	// (priority 10, their pods match no node, so they never complete and
	// never count as recovered) take both slots first and fail; waiter is
	// halted by both.
	// --canary=false: with a canary, failed would halt the change before
	// failed-too ever rolled it.
	if err := env.Configstamp.RestartWith(t.Context(), "--max-concurrent-rollouts=2", "--progress-deadline=10s", "--canary=false"); err != nil {
		t.Fatal(err)
	}
	// t.Context is canceled before Cleanup functions run.
	t.Cleanup(func() { _ = env.Configstamp.Restart(context.WithoutCancel(t.Context())) })
	ns := namespace(t, "plugin-halt")
	spec := framework.PodSpec()
	framework.MountConfigMap(&spec, "shared")
	waiter := framework.Deployment(ns, "waiter", framework.OptIn, spec)
	failedSpec := framework.PodSpec()
	framework.MountConfigMap(&failedSpec, "shared")
	failedSpec.NodeSelector = map[string]string{"plugin-test": "no-such-node"}
	failed := framework.Deployment(ns, "failed", framework.OptIn, failedSpec)
	failed.Annotations = map[string]string{rollout.AnnotationPriority: "10"}
	failedToo := framework.Deployment(ns, "failed-too", framework.OptIn, failedSpec)
	failedToo.Annotations = failed.Annotations
	env.Apply(t, framework.ConfigMap(ns, "shared", map[string]string{"mode": "one"}, nil), waiter, failed, failedToo)
	waitRolledOut(t, waiter)

	env.Apply(t, framework.ConfigMap(ns, "shared", map[string]string{"mode": "two"}, nil))
	framework.Eventually(t, time.Minute, func() (bool, string) {
		env.Get(t, failed)
		env.Get(t, failedToo)
		return failed.Annotations[rollout.AnnotationHalted] != "" && failedToo.Annotations[rollout.AnnotationHalted] != "",
			"failed and failed-too do not both halt their change yet"
	})
	change := failed.Annotations[rollout.AnnotationHalted]
	env.WaitEvent(t, waiter, "RolloutHalted", change)
	if n := len(env.ReplicaSets(t, ns, "waiter")); n != 1 {
		t.Fatalf("the halted waiter has %d ReplicaSets, want 1", n)
	}

	golden(t, "status-halted", ok(t, "status", "-n", ns))
	var st struct {
		BudgetInUse int
		Rolling     []struct{ Name string }
		Halted      []struct {
			Namespace, Kind, Name string
			Changes               []struct{ Source, Content string }
			Waiting               []string
		}
	}
	jsonOf(t, ok(t, "status", "-n", ns, "-o", "json"), &st)
	if st.BudgetInUse != 0 || len(st.Rolling) != 0 || len(st.Halted) != 2 {
		t.Fatalf("status JSON: %+v", st)
	}
	h := st.Halted[0]
	if h.Name != "failed" || h.Kind != "Deployment" || len(h.Changes) != 1 || h.Changes[0].Source+"@"+h.Changes[0].Content != change ||
		!slices.Equal(h.Waiting, []string{"deployment/waiter"}) {
		t.Errorf("status halted entry %+v, want failed halting %s with deployment/waiter waiting", h, change)
	}
	// Cluster-wide status includes this namespace's halt.
	if out := ok(t, "status"); !strings.Contains(out, ns) {
		t.Errorf("cluster-wide status lacks %s:\n%s", ns, out)
	}

	golden(t, "why-failed", ok(t, "why", "deployment/failed", "-n", ns))
	golden(t, "why-waiter-halted", ok(t, "why", "deploy/waiter", "-n", ns))
	var why struct {
		State     string
		WaitingOn *struct {
			Change   string
			HaltedBy []string
		}
		Events []struct{ Type, Reason, From string }
	}
	jsonOf(t, ok(t, "why", "deployment/waiter", "-n", ns, "-o", "json"), &why)
	if why.WaitingOn == nil || why.WaitingOn.Change != change || !slices.Equal(why.WaitingOn.HaltedBy, []string{"deployment/failed", "deployment/failed-too"}) {
		t.Errorf("why waiter: waitingOn %+v, want %s halted by deployment/failed and deployment/failed-too", why.WaitingOn, change)
	}
	if !slices.ContainsFunc(why.Events, func(e struct{ Type, Reason, From string }) bool {
		return e.Reason == "RolloutHalted" && e.Type == "Warning" && e.From == "configstamp"
	}) {
		t.Errorf("why waiter: events %+v lack configstamp's RolloutHalted", why.Events)
	}

	// resume lifts failed's halt and says that failed-too still halts the
	// change; once that one is resumed too, the waiter rolls the change once.
	counts := map[string]float64{"deployment": env.Configstamp.ReconcileCounts(t)["deployment"]}
	golden(t, "resume", ok(t, "resume", "deployment/failed", "-n", ns))
	env.Get(t, failed)
	if _, still := failed.Annotations[rollout.AnnotationHalted]; still {
		t.Fatal("resume left the halted annotation")
	}
	env.Configstamp.WaitIdle(t, counts)
	if n := len(env.ReplicaSets(t, ns, "waiter")); n != 1 {
		t.Fatalf("the waiter rolled (%d ReplicaSets) while failed-too still halts the change", n)
	}
	var res struct{ Lifted, StillHaltedBy []any }
	jsonOf(t, ok(t, "resume", "deployment/failed-too", "-n", ns, "-o", "json"), &res)
	if len(res.Lifted) != 1 || len(res.StillHaltedBy) != 0 {
		t.Errorf("resume failed-too: %+v, want one change lifted and no other halt left", res)
	}
	framework.Eventually(t, 90*time.Second, func() (bool, string) {
		n := len(env.ReplicaSets(t, ns, "waiter"))
		return n == 2, fmt.Sprintf("waiter has %d ReplicaSets, want 2 once the halt is lifted", n)
	})
	waitRolledOut(t, waiter)
	golden(t, "resume-again", ok(t, "resume", "deployment/failed", "-n", ns))

	framework.Eventually(t, 60*time.Second, func() (bool, string) {
		var w struct {
			State  string
			Causes []struct{ Source, Content string }
		}
		jsonOf(t, ok(t, "why", "deployment/waiter", "-n", ns, "-o", "json"), &w)
		return w.State == "completed" && len(w.Causes) == 1 && w.Causes[0].Source+"@"+w.Causes[0].Content == change,
			fmt.Sprintf("why waiter: state %q causes %+v", w.State, w.Causes)
	})
	golden(t, "why-waiter-completed", ok(t, "why", "deployment/waiter", "-n", ns))
	var yml string
	if yml = ok(t, "why", "deployment/waiter", "-n", ns, "-o", "yaml"); !strings.Contains(yml, "state: completed") {
		t.Errorf("why -o yaml:\n%s", yml)
	}
}
