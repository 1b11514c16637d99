// Command releasefiles writes and checks the release's files beside the
// plugin's (hack/release.mk):
//
//	go run ./hack/releasefiles rules -version=v1.2.3 -in=config/prometheus/rules.yaml -out=dist/release/prometheus-rules.yaml
//	go run ./hack/releasefiles check -version=v1.2.3 -image=ghcr.io/configstamp/configstamp@sha256:... -dir=dist/release
//
// rules writes the rule groups of config/prometheus/rules.yaml's
// PrometheusRule in Prometheus's rule file format (its spec, comments kept),
// every alert's runbook_url moved from the main branch's docs to the
// release's tag: an alert of an installed release links the runbook of that
// release, not one that may since have changed or gone.
//
// check checks what `make release-installers release-rules` wrote: every
// installer (install.yaml, install-<overlay>.yaml) runs the image given, by
// digest, labels every object with app.kubernetes.io/version=VERSION (where
// `kubectl configstamp version` reads the server's version), and is usable
// as it is: it names no namespace but the manager's (no example namespaces to
// edit; config/namespaced is a base the user edits, not a release file); and
// prometheus-rules.yaml's runbook URLs name the tag.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

const (
	// RunbookBase is where the runbook URLs of config/prometheus/rules.yaml
	// point: docs/operations.md on the main branch.
	RunbookBase = "https://github.com/configstamp/configstamp/blob/main/"
	// LabelVersion is the recommended label the installers carry.
	LabelVersion = "app.kubernetes.io/version"
	// ManagerDeployment and ManagerContainer are the manager's names in the
	// rendered overlays.
	ManagerDeployment = "configstamp-controller-manager"
	ManagerContainer  = "manager"
	// RulesFile is the release's rule file.
	RulesFile = "prometheus-rules.yaml"
)

// runbookAt is the runbook base at a release tag.
func runbookAt(version string) string {
	return strings.TrimSuffix(RunbookBase, "main/") + version + "/"
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: releasefiles rules|check -flags")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	version := fs.String("version", "", "the release's version (vX.Y.Z)")
	in := fs.String("in", "config/prometheus/rules.yaml", "rules: the PrometheusRule")
	out := fs.String("out", "", "rules: the rule file to write")
	dir := fs.String("dir", "", "check: the directory of the release's files")
	image := fs.String("image", "", "check: the image the installers must run, by digest")
	_ = fs.Parse(os.Args[2:])
	if *version == "" {
		fmt.Fprintln(os.Stderr, "releasefiles: -version is required")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "rules":
		err = writeRules(*in, *out, *version)
	case "check":
		err = check(*dir, *version, *image)
		if err == nil {
			fmt.Printf("%s: the installers run %s labelled %s=%s and name no example namespace; %s's runbooks are at %s\n",
				*dir, *image, LabelVersion, *version, RulesFile, *version)
		}
	default:
		err = fmt.Errorf("unknown command %q: rules or check", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "releasefiles:", err)
		os.Exit(1)
	}
}

func writeRules(in, out, version string) error {
	src, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	data, err := Rules(src, version)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	return os.WriteFile(out, data, 0o644)
}

// Rules is the spec of the PrometheusRule src, dedented (a rule file: groups
// at the top), with every runbook_url at the tag version; it checks the
// result with CheckRules.
func Rules(src []byte, version string) ([]byte, error) {
	var b bytes.Buffer
	in := false
	for line := range strings.Lines(string(src)) {
		switch {
		case !in:
			in = strings.TrimRight(line, "\r\n") == "spec:"
			continue
		case strings.TrimSpace(line) == "":
			b.WriteString("\n")
			continue
		case !strings.HasPrefix(line, "  "):
			in = false // the next top-level key: spec is over
			continue
		}
		line = line[2:]
		if key, url, ok := strings.Cut(line, "runbook_url: "); ok && strings.TrimSpace(key) == "" {
			if !strings.HasPrefix(url, RunbookBase) {
				return nil, fmt.Errorf("runbook_url %s is not under %s", strings.TrimSpace(url), RunbookBase)
			}
			line = key + "runbook_url: " + runbookAt(version) + strings.TrimPrefix(url, RunbookBase)
		}
		b.WriteString(line)
	}
	if b.Len() == 0 {
		return nil, errors.New("no spec: not a PrometheusRule")
	}
	if err := CheckRules(b.Bytes(), version); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// ruleFile is Prometheus's rule file format, what the check reads of it.
type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

// CheckRules: data is a rule file with at least one alert, and every
// alert's runbook_url is a page of the docs at the tag version.
func CheckRules(data []byte, version string) error {
	var f ruleFile
	if err := yaml.Unmarshal(data, &f); err != nil {
		return err
	}
	alerts := 0
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts++
			url := r.Annotations["runbook_url"]
			if want := runbookAt(version) + "docs/"; !strings.HasPrefix(url, want) {
				return fmt.Errorf("alert %s: runbook_url %q, want a page under %s (the release's tag)", r.Alert, url, want)
			}
		}
	}
	if alerts == 0 {
		return errors.New("no alert in the rule file")
	}
	return nil
}

// installerRE are the installers' names.
var installerRE = regexp.MustCompile(`^install(-[a-z0-9-]+)?\.yaml$`)

func check(dir, version, image string) error {
	if dir == "" || image == "" {
		return errors.New("check needs -dir and -image")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var installers []string
	for _, e := range entries {
		if installerRE.MatchString(e.Name()) {
			installers = append(installers, e.Name())
		}
	}
	if !slices.Contains(installers, "install.yaml") {
		return fmt.Errorf("%s: no install.yaml", dir)
	}
	var errs []error
	for _, name := range installers {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		if err := CheckInstaller(data, version, image); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	rules, err := os.ReadFile(filepath.Join(dir, RulesFile))
	if err == nil {
		err = CheckRules(rules, version)
	}
	if err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", RulesFile, err))
	}
	return errors.Join(errs...)
}

// CheckInstaller: the manifest runs image (by digest) in the manager
// Deployment, every object carries app.kubernetes.io/version=version, and it
// names no namespace but the manager's (objects, Namespace objects, the
// manager's --watch-namespaces): a release file is applied as it is.
func CheckInstaller(data []byte, version, image string) error {
	if !strings.Contains(image, "@sha256:") {
		return fmt.Errorf("the image %s is not pinned by digest", image)
	}
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var o unstructured.Unstructured
		if err := dec.Decode(&o.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return err
		}
		if len(o.Object) > 0 {
			objs = append(objs, &o)
		}
	}
	var dep *appsv1.Deployment
	for _, o := range objs {
		if o.GetKind() == "Deployment" && o.GetName() == ManagerDeployment {
			dep = &appsv1.Deployment{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, dep); err != nil {
				return err
			}
		}
	}
	if dep == nil {
		return fmt.Errorf("no Deployment %s", ManagerDeployment)
	}
	var errs []error
	var manager bool
	for _, c := range dep.Spec.Template.Spec.Containers {
		if c.Name != ManagerContainer {
			continue
		}
		manager = true
		if c.Image != image {
			errs = append(errs, fmt.Errorf("the manager's image is %s, want %s", c.Image, image))
		}
		for _, a := range c.Args {
			if strings.HasPrefix(a, "--watch-namespaces") {
				errs = append(errs, fmt.Errorf("the manager runs with %s: namespaces a user must edit", a))
			}
		}
	}
	if !manager {
		errs = append(errs, fmt.Errorf("no container %s in %s", ManagerContainer, ManagerDeployment))
	}
	own := dep.Namespace
	for _, o := range objs {
		what := o.GetKind() + " " + o.GetName()
		if o.GetNamespace() != "" {
			what = o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
		}
		if got := o.GetLabels()[LabelVersion]; got != version {
			errs = append(errs, fmt.Errorf("%s: label %s=%q, want %q", what, LabelVersion, got, version))
		}
		if ns := o.GetNamespace(); ns != "" && ns != own {
			errs = append(errs, fmt.Errorf("%s: in namespace %s, not the manager's %s: an installer names no namespace a user must edit", what, ns, own))
		}
		if o.GetKind() == "Namespace" && o.GetName() != own {
			errs = append(errs, fmt.Errorf("%s: a namespace other than the manager's %s", what, own))
		}
	}
	return errors.Join(errs...)
}
