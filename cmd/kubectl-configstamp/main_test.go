package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	kubescheme "k8s.io/client-go/kubernetes/scheme"
	metadatafake "k8s.io/client-go/metadata/fake"

	"github.com/configstamp/configstamp/controllers/pin"
	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
	cswl "github.com/configstamp/configstamp/controllers/workload"
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
			res := planFor(tc.live, tc.next, []workload{w, plain, pinned}, nil, noLabels, noLabels)
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
		if err != nil || k.Name != "Rollout" || k.GVR().Group != "argoproj.io" || k.GVR().Resource != "rollouts" || name != "web" {
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

// fakeCluster is options on a fake API server holding objs (workloads,
// events), as a command sees them in namespace ns, at now.
func fakeCluster(t *testing.T, now time.Time, objs ...runtime.Object) (*options, *bytes.Buffer) {
	t.Helper()
	out := &bytes.Buffer{}
	o := &options{namespace: "ns", defaultNamespace: "ns", registry: cswl.NewRegistry(), out: out, errOut: out, now: func() time.Time { return now },
		client: kubefake.NewClientset(objs...), meta: metadatafake.NewSimpleMetadataClient(metadatafake.NewTestScheme()),
		dynamic: dynamicfake.NewSimpleDynamicClient(kubescheme.Scheme, objs...)}
	return o, out
}

// deployment is a Deployment with a rollout record (rollout.Read does not
// check the seal: the plugin shows what is written).
func deployment(name string, record map[string]string) *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name),
		Labels: map[string]string{stamp.LabelEnabled: "true"}, Annotations: record},
		Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name},
			Annotations: map[string]string{stamp.AnnotationHash: "h-" + name}}}}}
}

func configstampEvent(d *appsv1.Deployment, reason, message string, at time.Time) *corev1.Event {
	return &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("%s.%s.%d", d.Name, reason, at.Unix())},
		InvolvedObject: corev1.ObjectReference{Kind: "Deployment", Namespace: "ns", Name: d.Name, UID: d.UID},
		Type:           corev1.EventTypeWarning, Reason: reason, Message: message, ReportingController: reporter, EventTime: metav1.NewMicroTime(at)}
}

// A verifying rollout holds a slot like a rolling one: status lists both,
// and why tells the state, until when, and for a failed rollout the failure
// its RolloutFailed event gives.
func TestVerifyingAndFailedRollouts(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	started := now.Add(-time.Minute).Format(time.RFC3339)
	until := now.Add(12 * time.Second).Format(time.RFC3339)
	cause := "ConfigMap/cfg@c0ffee"
	record := func(state string, extra ...string) map[string]string {
		a := map[string]string{rollout.AnnotationState: state, rollout.AnnotationStarted: started, rollout.AnnotationCause: cause}
		for i := 0; i < len(extra); i += 2 {
			a[extra[i]] = extra[i+1]
		}
		return a
	}
	rolling := deployment("api", record("rolling"))
	verifying := deployment("web", record("verifying", rollout.AnnotationVerifyUntil, until))
	done := deployment("done", record("completed"))
	crashed := deployment("crashed", record("failed", rollout.AnnotationHalted, cause))
	slow := deployment("slow", record("failed", rollout.AnnotationHalted, cause))
	const halts = "; configstamp halts further rollouts of this change until what this workload references of the source changes again, " +
		"this workload recovers or is deleted, or its configstamp.io/halted annotation is removed"
	const crash = "it failed verification: pod crashed-5d8c7-x2k8q: container app restarted 2 times (exit code 1, Error), CrashLoopBackOff"
	const deadline = "it was not complete within the progress deadline of 10m0s"
	objs := []runtime.Object{rolling, verifying, done, crashed, slow,
		configstampEvent(crashed, reasonRolloutFailed, "rollout for "+cause+" failed: it was not complete within the progress deadline of 10m0s"+halts, now.Add(-time.Hour)), // an earlier rollout's
		configstampEvent(crashed, reasonRolloutFailed, "rollout for "+cause+" failed: "+crash+halts, now.Add(-10*time.Second)),
		configstampEvent(slow, reasonRolloutFailed, "rollout for "+cause+" failed: "+deadline+halts, now.Add(-10*time.Second)),
	}

	t.Run("status", func(t *testing.T) {
		o, out := fakeCluster(t, now, objs...)
		if err := runStatus(t.Context(), o, nil); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{
			"Budget in use: 2 (1 rolling, 1 verifying; namespace ns)",
			"Rolling or verifying: 2",
			"deployment/api  rolling",
			"deployment/web  verifying until " + until + " (in 12s)",
		} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("want %q in\n%s", want, out)
			}
		}
		o, out = fakeCluster(t, now, objs...)
		o.output = "json"
		if err := runStatus(t.Context(), o, nil); err != nil {
			t.Fatal(err)
		}
		var res statusResult
		if err := json.Unmarshal(out.Bytes(), &res); err != nil {
			t.Fatal(err)
		}
		if res.BudgetInUse != 2 || len(res.Rolling) != 2 {
			t.Fatalf("budgetInUse %d, rolling %+v: want the rolling and the verifying workload", res.BudgetInUse, res.Rolling)
		}
		api, web := res.Rolling[0], res.Rolling[1]
		if api.Name != "api" || api.State != "rolling" || api.VerifyUntil != nil ||
			web.Name != "web" || web.State != "verifying" || web.VerifyUntil == nil || web.VerifyUntil.Format(time.RFC3339) != until {
			t.Errorf("rolling %+v, %+v", api, web)
		}
	})

	tests := map[string]struct {
		workload string
		state    string
		until    string // verifyUntil in JSON
		failure  string
		text     []string // in the table
		summary  string   // its start
	}{
		"rolling": {workload: "api", state: "rolling", text: []string{"State:         rolling"},
			summary: "rolling: holds a slot of the budget until the rollout completes and stays healthy through its verification window"},
		"verifying": {workload: "web", state: "verifying", until: until,
			text:    []string{"State:            verifying", "Verifying until:  " + until + " (in 12s)"},
			summary: "verifying: complete as kubectl rollout status says; it counts as completed if every pod of the new revision stays Ready"},
		"failed in verification": {workload: "crashed", state: "failed", failure: crash,
			text:    []string{"State:         failed", "Failure:       " + crash, "Halts:         " + cause},
			summary: "failed in verification: it was complete, then a pod of the new revision crashed or lost its readiness"},
		"failed at the deadline": {workload: "slow", state: "failed", failure: deadline,
			text:    []string{"Failure:       " + deadline},
			summary: "failed and halting that change on every other workload"},
		"completed": {workload: "done", state: "completed", summary: "completed"},
	}
	for name, tc := range tests {
		t.Run("why "+name, func(t *testing.T) {
			o, out := fakeCluster(t, now, objs...)
			if err := runWhy(t.Context(), o, []string{"deploy/" + tc.workload}); err != nil {
				t.Fatal(err)
			}
			for _, want := range append(tc.text, "Now:") {
				if !strings.Contains(out.String(), want) {
					t.Errorf("want %q in\n%s", want, out)
				}
			}
			if tc.failure == "" && strings.Contains(out.String(), "Failure:") {
				t.Errorf("a failure shown for a %s rollout:\n%s", tc.state, out)
			}
			res, raw := whyJSON(t, now, tc.workload, objs...)
			gotUntil := ""
			if res.VerifyUntil != nil {
				gotUntil = res.VerifyUntil.Format(time.RFC3339)
			}
			if res.State != tc.state || gotUntil != tc.until || res.Failure != tc.failure || !strings.HasPrefix(res.Summary, tc.summary) {
				t.Errorf("state %q until %q failure %q summary %q;\nwant %q %q %q %q", res.State, gotUntil, res.Failure, res.Summary, tc.state, tc.until, tc.failure, tc.summary)
			}
			var fields map[string]any
			_ = json.Unmarshal(raw, &fields)
			if _, ok := fields["failure"]; ok != (tc.failure != "") {
				t.Errorf("JSON field failure present %v: %s", ok, raw)
			}
		})
	}
}

// whyJSON is `why -o json` of deployment name on a fake cluster of objs,
// decoded and as printed.
func whyJSON(t *testing.T, now time.Time, name string, objs ...runtime.Object) (whyResult, []byte) {
	t.Helper()
	o, out := fakeCluster(t, now, objs...)
	o.output = "json"
	if err := runWhy(t.Context(), o, []string{"deploy/" + name}); err != nil {
		t.Fatal(err)
	}
	var res whyResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	return res, out.Bytes()
}
