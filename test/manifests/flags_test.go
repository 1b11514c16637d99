package manifests

import (
	"os/exec"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/configstamp/configstamp/test/framework"
)

// TestArgsAreFlags checks that every argument the overlays pass is one of the
// binary's flags (the one make test built from this tree, or one built here),
// with a value unless it is a boolean, so a renamed flag in cmd/main.go cannot
// leave a Deployment that exits at start.
func TestArgsAreFlags(t *testing.T) {
	bin, err := framework.ManagerBinary(repoRoot(t), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// flag prints the usage to stderr and exits 0 on -help.
	help, err := exec.CommandContext(t.Context(), bin, "-help").CombinedOutput()
	if err != nil {
		t.Fatalf("%s -help: %v\n%s", bin, err, help)
	}
	// The usage lists "  -name type", or "  -name" for a boolean, with the
	// text on the next line or after a tab.
	isBool := map[string]bool{}
	for _, line := range strings.Split(string(help), "\n") {
		rest, ok := strings.CutPrefix(line, "  -")
		if !ok {
			continue
		}
		head, _, _ := strings.Cut(rest, "\t")
		f := strings.Fields(head)
		isBool[f[0]] = len(f) == 1
	}
	if len(isBool) < 10 {
		t.Fatalf("found only flags %v in:\n%s", isBool, help)
	}
	for name, tc := range overlays {
		t.Run(name, func(t *testing.T) {
			r := kustomize(t, tc.dir)
			for _, arg := range getAs[appsv1.Deployment](t, r, "Deployment", deployment).Spec.Template.Spec.Containers[0].Args {
				flag, value, hasValue := strings.Cut(strings.TrimLeft(arg, "-"), "=")
				boolean, known := isBool[flag]
				switch {
				case !strings.HasPrefix(arg, "--"):
					t.Errorf("argument %q: want --flag or --flag=value", arg)
				case !known:
					t.Errorf("argument %q: configstamp has no flag %q", arg, flag)
				case !boolean && (!hasValue || value == ""):
					t.Errorf("argument %q: flag %q needs a value", arg, flag)
				}
			}
		})
	}
}
