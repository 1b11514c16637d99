package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kversion "k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	certutil "k8s.io/client-go/util/cert"
	"sigs.k8s.io/yaml"

	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
)

// kubectl's flag forms: -oyaml, -o=json, --output=yaml, -n=x, --namespace x,
// flags before or after the command and its arguments.
func TestKubectlFlagForms(t *testing.T) {
	tests := []struct {
		args      []string
		command   string
		output    string
		namespace string
		rest      []string
	}{
		{[]string{"status", "-oyaml"}, "status", "yaml", "", nil},
		{[]string{"status", "-o=json"}, "status", "json", "", nil},
		{[]string{"status", "-o", "wide"}, "status", "wide", "", nil},
		{[]string{"status", "--output=yaml"}, "status", "yaml", "", nil},
		{[]string{"-ojson", "status"}, "status", "json", "", nil},
		{[]string{"-o", "json", "-n", "x", "why", "deploy/web"}, "why", "json", "x", []string{"deploy/web"}},
		{[]string{"who-uses", "cm/x", "-n=x"}, "who-uses", "", "x", []string{"cm/x"}},
		{[]string{"who-uses", "-nx", "cm/x"}, "who-uses", "", "x", []string{"cm/x"}},
		{[]string{"--namespace", "x", "who-uses", "cm/x"}, "who-uses", "", "x", []string{"cm/x"}},
		{[]string{"why", "--namespace=x", "deploy/web", "-oyaml"}, "why", "yaml", "x", []string{"deploy/web"}},
		{[]string{"plan", "-f=cm.yaml", "-ojson"}, "plan", "json", "", nil},
		{[]string{"version", "-ojson", "--client"}, "version", "json", "", nil},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			o, cmd, rest, err := parse(tc.args, &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			if cmd == nil || cmd.name != tc.command || o.output != tc.output || o.namespace != tc.namespace || !slices.Equal(rest, tc.rest) {
				t.Errorf("command %v, output %q, namespace %q, args %q; want %s %q %q %q", cmd, o.output, o.namespace, rest,
					tc.command, tc.output, tc.namespace, tc.rest)
			}
		})
	}
}

const testKubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: one
  cluster: {server: "https://one.example:6443"}
- name: two
  cluster: {server: "https://two.example:6443"}
users:
- name: alice
  user: {token: alice-token}
- name: bob
  user: {token: bob-token}
contexts:
- name: first
  context: {cluster: one, user: alice, namespace: first-ns}
- name: second
  context: {cluster: two, user: bob, namespace: second-ns}
current-context: first
`

// kubectl's connection flags (genericclioptions.ConfigFlags) are accepted
// and reach the client the commands use.
func TestConnectionFlags(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(testKubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", kubeconfig)
	ca := filepath.Join(t.TempDir(), "ca.crt")
	caPEM, _, err := certutil.GenerateSelfSignedCertKey("api", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ca, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		args                                []string
		host, token, as, namespace          string
		groups                              []string
		timeout                             time.Duration
		insecure                            bool
		caFile, tlsServerName, outputFormat string
	}{
		"the kubeconfig's context": {args: []string{"status"},
			host: "https://one.example:6443", token: "alice-token", namespace: "first-ns"},
		"--kubeconfig": {args: []string{"status", "--kubeconfig", kubeconfig, "--context=second"},
			host: "https://two.example:6443", token: "bob-token", namespace: "second-ns"},
		"--context": {args: []string{"--context", "second", "status"},
			host: "https://two.example:6443", token: "bob-token", namespace: "second-ns"},
		"--cluster and --user": {args: []string{"status", "--cluster=two", "--user", "bob"},
			host: "https://two.example:6443", token: "bob-token", namespace: "first-ns"},
		"--server, --token, -n": {args: []string{"status", "--server", "https://other.example", "--token=t0k", "-n=x"},
			host: "https://other.example", token: "t0k", namespace: "x"},
		"-s": {args: []string{"-s", "https://short.example", "status"}, host: "https://short.example", token: "alice-token", namespace: "first-ns"},
		"impersonation": {args: []string{"status", "--as", "carol", "--as-group=devs", "--as-group", "ops"},
			host: "https://one.example:6443", token: "alice-token", namespace: "first-ns", as: "carol", groups: []string{"devs", "ops"}},
		"--request-timeout": {args: []string{"status", "--request-timeout", "5s"},
			host: "https://one.example:6443", token: "alice-token", namespace: "first-ns", timeout: 5 * time.Second},
		"--request-timeout=": {args: []string{"status", "--request-timeout=1m"},
			host: "https://one.example:6443", token: "alice-token", namespace: "first-ns", timeout: time.Minute},
		"--insecure-skip-tls-verify": {args: []string{"status", "--insecure-skip-tls-verify"},
			host: "https://one.example:6443", token: "alice-token", namespace: "first-ns", insecure: true},
		"--certificate-authority, --tls-server-name": {args: []string{"status", "--certificate-authority", ca, "--tls-server-name=api"},
			host: "https://one.example:6443", token: "alice-token", namespace: "first-ns", caFile: ca, tlsServerName: "api"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o, cmd, _, err := parse(tc.args, &bytes.Buffer{})
			if err != nil || cmd == nil {
				t.Fatalf("parse: %v", err)
			}
			cfg, err := o.configFlags.ToRawKubeConfigLoader().ClientConfig()
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Host != tc.host || cfg.BearerToken != tc.token || cfg.Impersonate.UserName != tc.as ||
				!slices.Equal(cfg.Impersonate.Groups, tc.groups) || cfg.Timeout != tc.timeout || cfg.Insecure != tc.insecure ||
				cfg.CAFile != tc.caFile || cfg.ServerName != tc.tlsServerName {
				t.Errorf("host %q token %q as %q %v timeout %v insecure %v ca %q server name %q;\nwant %q %q %q %v %v %v %q %q",
					cfg.Host, cfg.BearerToken, cfg.Impersonate.UserName, cfg.Impersonate.Groups, cfg.Timeout, cfg.Insecure, cfg.CAFile, cfg.ServerName,
					tc.host, tc.token, tc.as, tc.groups, tc.timeout, tc.insecure, tc.caFile, tc.tlsServerName)
			}
			if err := o.connect(); err != nil {
				t.Fatal(err)
			}
			if o.ns() != tc.namespace {
				t.Errorf("namespace %q, want %q", o.ns(), tc.namespace)
			}
		})
	}
}

// A bad -o, a bad connection flag value and an unknown flag are usage errors
// that say what is wrong.
func TestUsageErrors(t *testing.T) {
	tests := map[string]struct {
		args []string
		want string
	}{
		"-o xml":              {[]string{"status", "-o", "xml"}, `error: unknown output format "xml": use json, yaml or wide`},
		"-oxml":               {[]string{"who-uses", "cm/x", "-oxml"}, `error: unknown output format "xml": use json, yaml or wide`},
		"-o=table":            {[]string{"-o=table", "why", "deploy/x"}, `error: unknown output format "table": use json, yaml or wide`},
		"-o without a value":  {[]string{"status", "-o"}, "error: flag needs an argument: 'o' in -o"},
		"unknown flag":        {[]string{"status", "--frobnicate"}, "error: unknown flag: --frobnicate"},
		"unknown short flag":  {[]string{"status", "-z"}, "error: unknown shorthand flag: 'z' in -z"},
		"-A with -n":          {[]string{"status", "-A", "-n=x"}, "error: -n and -A exclude each other"},
		"unknown command":     {[]string{"frobnicate"}, `error: unknown command "frobnicate"` + "\n"},
		"a typo":              {[]string{"stauts"}, `error: unknown command "stauts"; did you mean status?`},
		"missing argument":    {[]string{"-n", "x", "why"}, "error: why takes 1 argument(s): kubectl configstamp why KIND/NAME"},
		"version takes none":  {[]string{"version", "x"}, "error: version takes 0 argument(s)"},
		"version flag of its": {[]string{"status", "--client"}, "error: unknown flag: --client"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run(t.Context(), tc.args, &out, &errOut)
			if code != exitUsage || !strings.HasPrefix(errOut.String(), tc.want) || !strings.Contains(errOut.String(), "See 'kubectl configstamp --help'.") {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, errOut.String(), exitUsage, tc.want)
			}
		})
	}
}

// Shell completion: cobra's completion command for the four shells, the
// __complete protocol kubectl's plugin completion uses, and the
// kubectl_complete-configstamp name.
func TestCompletion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish", "powershell"} {
		var out, errOut bytes.Buffer
		if code := run(t.Context(), []string{"completion", shell}, &out, &errOut); code != exitOK || !strings.Contains(out.String(), "kubectl-configstamp") {
			t.Errorf("completion %s: exit %d, %d bytes, %s", shell, code, out.Len(), errOut.String())
		}
	}
	complete := func(args ...string) []string {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := run(t.Context(), append([]string{"__complete"}, args...), &out, &errOut); code != exitOK {
			t.Fatalf("__complete %q: exit %d, %s", args, code, errOut.String())
		}
		return strings.Split(strings.TrimSpace(out.String()), "\n")
	}
	if got := complete("status", "-o", ""); !slices.Equal(got, []string{"json", "yaml", "wide", ":4"}) {
		t.Errorf("-o: %q", got)
	}
	if got := complete(""); !slices.Contains(got, "version\tthe plugin's version and the version of configstamp the cluster runs") ||
		!slices.Contains(got, "who-uses\tworkloads that reference a ConfigMap or Secret: how, which keys, opted in or not") {
		t.Errorf("commands: %q", got)
	}
	if got := complete("who-uses", "s"); !slices.Equal(got, []string{"secret/", ":6"}) {
		t.Errorf("who-uses: %q", got)
	}
	if got := complete("why", "--kinds-config", "../../config/kinds/argo-rollouts/kinds.yaml", "r"); !slices.Equal(got, []string{"rollout/", ":6"}) {
		t.Errorf("why with --kinds-config: %q", got)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(testKubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := complete("status", "--kubeconfig", kubeconfig, "--context", ""); !slices.Equal(got, []string{"first", "second", ":4"}) {
		t.Errorf("--context: %q", got)
	}
	if got := complete("status", "--kubeconfig", kubeconfig, "--user", "b"); !slices.Equal(got, []string{"bob", ":4"}) {
		t.Errorf("--user: %q", got)
	}

	for argv0, want := range map[string][]string{
		"/usr/local/bin/kubectl_complete-configstamp": {"__complete", "status", "-o", ""},
		"kubectl_complete-configstamp.exe":            {"__complete", "status", "-o", ""},
		"/usr/local/bin/kubectl-configstamp":          {"status", "-o", ""},
	} {
		if got := argsOf([]string{argv0, "status", "-o", ""}); !slices.Equal(got, want) {
			t.Errorf("argsOf(%s): %q, want %q", argv0, got, want)
		}
	}
}

// jsonFields are the json names of the fields of t and of the structs it
// holds (time.Time as a value).
func jsonFields(t reflect.Type) []string {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t == reflect.TypeFor[time.Time]() {
		return nil
	}
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		out = append(out, name)
		out = append(out, jsonFields(f.Type)...)
	}
	return out
}

// Every field of every -o json|yaml document is named in its command's help.
func TestOutputFieldsDocumented(t *testing.T) {
	results := map[string]any{
		"who-uses": whoUsesResult{}, "plan": planOutput{}, "why": whyResult{},
		"status": statusResult{}, "resume": resumeResult{}, "unhold": unholdResult{}, "version": versionResult{},
	}
	for _, c := range commands {
		v, ok := results[c.name]
		if !ok {
			t.Errorf("%s: no result type to check", c.name)
			continue
		}
		for _, field := range jsonFields(reflect.TypeOf(v)) {
			if !regexp.MustCompile(`\b` + field + `\b`).MatchString(c.long) {
				t.Errorf("%s: the help does not name the field %s", c.name, field)
			}
		}
	}
}

// goldenJSON compares out with testdata/name.json (UPDATE_GOLDEN=1 rewrites it).
func goldenJSON(t *testing.T, name string, out []byte) {
	t.Helper()
	goldenFile(t, name+".json", out)
}

// goldenText compares human output with testdata/name.golden (UPDATE_GOLDEN=1 rewrites it).
func goldenText(t *testing.T, name string, out []byte) {
	t.Helper()
	goldenFile(t, name+".golden", out)
}

func goldenFile(t *testing.T, file string, out []byte) {
	t.Helper()
	name := file
	path := filepath.Join("testdata", file)
	if os.Getenv("UPDATE_GOLDEN") != "" {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, out, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (UPDATE_GOLDEN=1 writes it)", err)
	}
	if !bytes.Equal(want, out) {
		t.Errorf("%s differs from %s (UPDATE_GOLDEN=1 rewrites it)\n--- got ---\n%s--- want ---\n%s", name, path, out, want)
	}
}

// The -o json documents of every command on a fixed cluster, field by field
// (testdata/*.json), and -o yaml the same document.
func TestJSONOutput(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	started := now.Add(-time.Minute).Format(time.RFC3339)
	cause := "ConfigMap/cfg@c0ffee"
	record := func(state string, extra ...string) map[string]string {
		a := map[string]string{rollout.AnnotationState: state, rollout.AnnotationStarted: started, rollout.AnnotationCause: cause,
			stamp.AnnotationSources: "ConfigMap/cfg=c0ffee"}
		for i := 0; i < len(extra); i += 2 {
			a[extra[i]] = extra[i+1]
		}
		return a
	}
	mount := func(d *appsv1.Deployment) *appsv1.Deployment {
		d.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "cfg", VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}}
		d.Spec.Template.Spec.Containers = []corev1.Container{{Name: "app", Env: []corev1.EnvVar{{Name: "A", ValueFrom: &corev1.EnvVarSource{
			ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Key: "a"}}}}}}
		return d
	}
	web := mount(deployment("web", record("verifying", rollout.AnnotationVerifyUntil, now.Add(12*time.Second).Format(time.RFC3339))))
	crashed := mount(deployment("crashed", record("failed", rollout.AnnotationHalted, cause)))
	waiter := mount(deployment("waiter", record("completed", rollout.AnnotationCause, "ConfigMap/cfg@0123ab")))
	const crash = "it failed verification: pod crashed-5d8c7-x2k8q: container app restarted 2 times (exit code 1, Error), CrashLoopBackOff"
	objs := []runtime.Object{web, crashed, waiter,
		configstampEvent(waiter, reasonRolloutHalted, "rollout of "+cause+" halted: it failed on deployment/crashed", now.Add(-5*time.Second)),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cfg"}, Data: map[string]string{"a": "1", "b": "1"}},
		configstampEvent(crashed, reasonRolloutFailed, "rollout for "+cause+" failed: "+crash+"; configstamp halts further rollouts", now.Add(-10*time.Second)),
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: defaultManagerNamespace, Name: defaultManagerDeployment,
			Labels: map[string]string{labelVersion: "v0.3.0"}},
			Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{
				{Name: managerContainer, Image: "ghcr.io/configstamp/configstamp:v0.3.0"}}}}}},
	}
	manifest := filepath.Join(t.TempDir(), "cfg.yaml")
	if err := os.WriteFile(manifest, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg, namespace: ns}\ndata: {a: \"2\", b: \"1\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		run  func(*options) error
		prep func(*options)
	}{
		"status":     {run: func(o *options) error { return runStatus(t.Context(), o, nil) }},
		"why":        {run: func(o *options) error { return runWhy(t.Context(), o, []string{"deployment/crashed"}) }},
		"why-waiter": {run: func(o *options) error { return runWhy(t.Context(), o, []string{"deployment/waiter"}) }},
		"who-uses":   {run: func(o *options) error { return runWhoUses(t.Context(), o, []string{"configmap/cfg"}) }},
		"plan":       {run: func(o *options) error { return runPlan(t.Context(), o, nil) }, prep: func(o *options) { o.filename = manifest }},
		"resume":     {run: func(o *options) error { return runResume(t.Context(), o, []string{"deploy/crashed"}) }},
		"version": {run: func(o *options) error { return runVersion(t.Context(), o, nil) }, prep: func(o *options) {
			o.client.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &kversion.Info{GitVersion: "v1.36.2"}
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var docs [2][]byte
			for i, format := range []string{"json", "yaml"} {
				o, out := fakeCluster(t, now, objs...)
				o.output = format
				if tc.prep != nil {
					tc.prep(o)
				}
				if err := tc.run(o); err != nil {
					t.Fatal(err)
				}
				docs[i] = bytes.Clone(out.Bytes())
			}
			if name == "version" { // the plugin's own build varies
				docs[0] = regexp.MustCompile(`"(goVersion|platform)": "[^"]*"`).ReplaceAll(docs[0], []byte(`"$1": "<$1>"`))
			}
			goldenJSON(t, name, docs[0])
			var fromJSON, fromYAML any
			if err := json.Unmarshal(docs[0], &fromJSON); err != nil {
				t.Fatal(err)
			}
			if err := yaml.Unmarshal(docs[1], &fromYAML); err != nil {
				t.Fatal(err)
			}
			if name != "version" && !reflect.DeepEqual(fromJSON, fromYAML) {
				t.Errorf("-o yaml is another document than -o json:\n%s\n%s", docs[0], docs[1])
			}
		})
	}
}

// version: the plugin's version, and configstamp's read from the manager
// Deployment; "unknown" and why when it cannot be read or says no version.
func TestVersion(t *testing.T) {
	manager := func(labels, templateLabels map[string]string, image string) *appsv1.Deployment {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: defaultManagerNamespace, Name: defaultManagerDeployment, Labels: labels},
			Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: templateLabels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "sidecar", Image: "proxy:v9"}, {Name: managerContainer, Image: image}}}}}}
	}
	forbidden := func(o *options) {
		o.client.(*kubefake.Clientset).PrependReactor("get", "deployments", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, defaultManagerDeployment,
				errors.New(`User "dev" cannot get resource "deployments" in API group "apps" in the namespace "configstamp-system"`))
		})
	}
	tests := map[string]struct {
		objs     []runtime.Object
		args     func(*options)
		version  string
		source   string
		contains string
	}{
		"label": {objs: []runtime.Object{manager(map[string]string{labelVersion: "v0.4.0"}, nil, "configstamp:v0.3.9")},
			version: "v0.4.0", source: "label app.kubernetes.io/version",
			contains: "configstamp version:  v0.4.0 (from the label app.kubernetes.io/version of deployment configstamp-system/configstamp-controller-manager, image configstamp:v0.3.9)"},
		"pod template label": {objs: []runtime.Object{manager(nil, map[string]string{labelVersion: "v0.4.1"}, "configstamp:latest")},
			version: "v0.4.1", source: "pod template label app.kubernetes.io/version"},
		"image tag": {objs: []runtime.Object{manager(nil, nil, "registry.example:5000/team/configstamp:v0.3.0@sha256:0123")},
			version: "v0.3.0", source: "image tag"},
		"latest": {objs: []runtime.Object{manager(nil, nil, "configstamp:latest")}, version: unknown,
			contains: "configstamp version:  unknown (no app.kubernetes.io/version label and no version tag on the image configstamp:latest of deployment"},
		"not installed": {version: unknown, contains: `configstamp version:  unknown (cannot read it: deployments.apps "configstamp-controller-manager" not found)`},
		"forbidden": {objs: []runtime.Object{manager(map[string]string{labelVersion: "v0.4.0"}, nil, "configstamp:v0.4.0")}, args: forbidden,
			version: unknown, contains: "configstamp version:  unknown (cannot read it: deployments.apps \"configstamp-controller-manager\" is forbidden"},
		"elsewhere": {objs: []runtime.Object{func() *appsv1.Deployment {
			d := manager(nil, nil, "configstamp:v1.0.0")
			d.Namespace, d.Name = "ops", "cs"
			return d
		}()}, args: func(o *options) { o.managerNamespace, o.managerDeployment = "ops", "cs" }, version: "v1.0.0", source: "image tag",
			contains: "of deployment ops/cs"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			for _, format := range []string{"", "json"} {
				o, out := fakeCluster(t, time.Now(), tc.objs...)
				o.output = format
				o.client.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &kversion.Info{GitVersion: "v1.36.2"}
				if tc.args != nil {
					tc.args(o)
				}
				if err := runVersion(t.Context(), o, nil); err != nil {
					t.Fatal(err)
				}
				if format == "" {
					for _, want := range []string{"Plugin version:       devel (go", "Kubernetes version:   v1.36.2", tc.contains} {
						if !strings.Contains(out.String(), want) {
							t.Errorf("want %q in\n%s", want, out)
						}
					}
					continue
				}
				var res versionResult
				if err := json.Unmarshal(out.Bytes(), &res); err != nil {
					t.Fatal(err)
				}
				if res.Client.Version != "devel" || res.Server == nil || res.Server.Version != tc.version || res.Server.Source != tc.source ||
					(res.Server.Error != "") != (tc.version == unknown && name != "latest") || res.KubernetesVersion != "v1.36.2" {
					t.Errorf("%s", out)
				}
			}
		})
	}

	t.Run("--client", func(t *testing.T) {
		o, out := fakeCluster(t, time.Now())
		o.clientOnly, o.output = true, "json"
		o.client.(*kubefake.Clientset).PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
			t.Errorf("--client made a request: %v", a)
			return false, nil, nil
		})
		if err := runVersion(t.Context(), o, nil); err != nil {
			t.Fatal(err)
		}
		var raw map[string]any
		if err := json.Unmarshal(out.Bytes(), &raw); err != nil || raw["server"] != nil || raw["kubernetesVersion"] != nil || raw["client"] == nil {
			t.Errorf("%v: %s", err, out)
		}
	})

	t.Run("no cluster", func(t *testing.T) {
		var out, errOut bytes.Buffer
		code := run(t.Context(), []string{"version", "--kubeconfig", "/nonexistent/kubeconfig"}, &out, &errOut)
		if code != exitOK || !strings.Contains(out.String(), "Plugin version:") ||
			!strings.Contains(out.String(), "configstamp version:  unknown (while loading the kubeconfig: ") ||
			!strings.Contains(out.String(), "Kubernetes version:   unknown") {
			t.Errorf("exit %d\n%s%s", code, out.String(), errOut.String())
		}
	})
}

func TestImageTag(t *testing.T) {
	for image, want := range map[string]string{
		"configstamp:v0.3.0":                        "v0.3.0",
		"ghcr.io/configstamp/configstamp:v0.3.0-rc": "v0.3.0-rc",
		"registry.example:5000/configstamp:v1":      "v1",
		"registry.example:5000/configstamp":         "",
		"configstamp":                               "",
		"configstamp:latest":                        "",
		"configstamp@sha256:0123":                   "",
		"configstamp:v2@sha256:0123":                "v2",
		"":                                          "",
	} {
		if got := imageTag(image); got != want {
			t.Errorf("imageTag(%q) = %q, want %q", image, got, want)
		}
	}
}
