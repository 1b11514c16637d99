package kinds

import (
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/test/framework"
)

// plugin builds kubectl-configstamp and returns a function that runs it
// against the suite's cluster with the kinds file configstamp runs with, and
// decodes its -o json output into v.
func plugin(t *testing.T) func(v any, args ...string) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "kubectl-configstamp")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/kubectl-configstamp").CombinedOutput(); err != nil {
		t.Fatalf("building the plugin: %v\n%s", err, out)
	}
	kinds, err := framework.ArgoKindsFile()
	if err != nil {
		t.Fatal(err)
	}
	return func(v any, args ...string) {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"--kubeconfig", env.Kubeconfig, "--kinds-config", kinds, "-o", "json"}, args...)...)
		out, err := cmd.Output()
		if err != nil {
			var stderr []byte
			if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
				stderr = ee.Stderr
			}
			t.Fatalf("kubectl configstamp %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
		}
		if err := json.Unmarshal(out, v); err != nil {
			t.Fatalf("kubectl configstamp %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestPluginReadsRollouts: with the kinds file configstamp runs with,
// `kubectl configstamp` names Rollouts as it names Deployments: who uses a
// ConfigMap, why a Rollout rolled and its state, the cluster's rolling and
// halted workloads, and resume lifts a failed Rollout's halt.
func TestPluginReadsRollouts(t *testing.T) {
	kubectlConfigstamp := plugin(t)
	ns := env.Namespace(t, "kinds-plugin", framework.OptIn)
	env.Apply(t, framework.ConfigMap(ns, "cfg", map[string]string{"v": "1"}, nil))
	applyRollout(t, ns, "web", "cfg", 0)
	ro := rolloutObj(ns, "web")
	h0 := env.WaitTemplateHash(t, ro, "")
	setRolloutStatus(t, ns, "web", "Healthy")

	var uses struct {
		Workloads []struct {
			Kind, Name     string
			OptedIn, Rolls bool
		}
	}
	kubectlConfigstamp(&uses, "-n", ns, "who-uses", "configmap/cfg")
	if len(uses.Workloads) != 1 || uses.Workloads[0].Kind != "Rollout" || uses.Workloads[0].Name != "web" ||
		!uses.Workloads[0].OptedIn || !uses.Workloads[0].Rolls {
		t.Fatalf("who-uses configmap/cfg: %+v, want the Rollout web, opted in, rolling with it", uses.Workloads)
	}

	env.Apply(t, framework.ConfigMap(ns, "cfg", map[string]string{"v": "2"}, nil))
	h1 := env.WaitTemplateHash(t, ro, h0)
	waitState(t, ro, rollout.Rolling)
	var why struct {
		Kind, Name, Stamp, State string
		Causes                   []json.RawMessage
	}
	kubectlConfigstamp(&why, "-n", ns, "why", "rollout/web")
	if why.Kind != "Rollout" || why.Stamp != h1 || why.State != "rolling" || len(why.Causes) != 1 {
		t.Fatalf("why rollout/web: %+v, want Rollout web stamped %s, rolling, one cause", why, h1)
	}
	var status struct {
		Rolling, Halted []struct{ Namespace, Kind, Name string }
	}
	kubectlConfigstamp(&status, "-A", "status")
	if !listed(status.Rolling, ns, "Rollout", "web") {
		t.Fatalf("status -A: rolling %+v, want the Rollout %s/web", status.Rolling, ns)
	}

	setRolloutStatus(t, ns, "web", "Degraded")
	waitState(t, ro, rollout.Failed)
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		return record(t, ro).Halted != "", "the failed Rollout carries no halt"
	})
	kubectlConfigstamp(&status, "-A", "status")
	if !listed(status.Halted, ns, "Rollout", "web") {
		t.Fatalf("status -A: halted %+v, want the Rollout %s/web", status.Halted, ns)
	}
	var resumed struct {
		Kind, Name string
		Lifted     []json.RawMessage
	}
	kubectlConfigstamp(&resumed, "-n", ns, "resume", "rollout/web")
	if resumed.Kind != "Rollout" || len(resumed.Lifted) != 1 {
		t.Fatalf("resume rollout/web: %+v, want one change lifted", resumed)
	}
	if r := record(t, ro); r.Halted != "" || r.State != rollout.Failed {
		t.Fatalf("after resume the record is %+v, want failed and no longer halted", r)
	}
}

func listed(views []struct{ Namespace, Kind, Name string }, ns, kind, name string) bool {
	for _, v := range views {
		if v.Namespace == ns && v.Kind == kind && v.Name == name {
			return true
		}
	}
	return false
}
