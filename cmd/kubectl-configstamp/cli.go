package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"sigs.k8s.io/yaml"

	cswl "github.com/configstamp/configstamp/controllers/workload"
)

// options are the flags every command shares, and where it writes.
type options struct {
	// configFlags are kubectl's connection flags (--kubeconfig, --context,
	// -n, --server, --token, --as, --request-timeout, ...).
	configFlags *genericclioptions.ConfigFlags
	// namespace is -n (from configFlags once the flags are read).
	namespace     string
	allNamespaces bool
	output        string
	filename      string
	noColor       bool
	kindsConfig   string
	// version's own flags.
	clientOnly        bool
	managerNamespace  string
	managerDeployment string
	// registry holds the workload kinds as configstamp does: the built-in
	// ones and those of --kinds-config, read with the dynamic client.
	registry *cswl.Registry

	out, errOut io.Writer
	// client and defaultNamespace are set by connect.
	client           kubernetes.Interface
	meta             metadata.Interface
	dynamic          dynamic.Interface
	defaultNamespace string
	// now is the clock ("in 12s"); time.Now when nil.
	now func() time.Time
}

func (o *options) clock() time.Time {
	if o.now != nil {
		return o.now()
	}
	return time.Now()
}

// connect builds a client from the connection flags, as kubectl does
// (--kubeconfig, else $KUBECONFIG, else ~/.kube/config; --context, --cluster,
// --user, --server, --token, --as, --request-timeout, ...; -n).
func (o *options) connect() error {
	if o.client != nil {
		return nil
	}
	loader := o.configFlags.ToRawKubeConfigLoader()
	rest, err := loader.ClientConfig()
	if err != nil {
		return fmt.Errorf("while loading the kubeconfig: %w", err)
	}
	rest.UserAgent = "kubectl-configstamp/" + version
	if o.client, err = kubernetes.NewForConfig(rest); err != nil {
		return fmt.Errorf("while making a client: %w", err)
	}
	if o.meta, err = metadata.NewForConfig(rest); err != nil {
		return fmt.Errorf("while making a metadata client: %w", err)
	}
	if o.dynamic, err = dynamic.NewForConfig(rest); err != nil {
		return fmt.Errorf("while making a dynamic client: %w", err)
	}
	if o.defaultNamespace, _, err = loader.Namespace(); err != nil {
		return fmt.Errorf("while reading the namespace from the kubeconfig: %w", err)
	}
	return nil
}

// ns is the namespace to work in ("" with -A).
func (o *options) ns() string {
	if o.allNamespaces {
		return metav1.NamespaceAll
	}
	return o.defaultNamespace
}

// machine writes v as JSON or YAML when -o asks for it, and reports whether it did.
func (o *options) machine(v any) (bool, error) {
	switch o.output {
	case "json":
		enc := json.NewEncoder(o.out)
		enc.SetIndent("", "  ")
		return true, enc.Encode(v)
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return true, err
		}
		_, err = o.out.Write(b)
		return true, err
	}
	return false, nil
}

func (o *options) wide() bool { return o.output == "wide" }

// colour reports whether to colour: only on a terminal, never with --no-color
// or NO_COLOR.
func (o *options) colour() bool {
	if o.noColor || os.Getenv("NO_COLOR") != "" {
		return false
	}
	f, ok := o.out.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func (o *options) printf(format string, a ...any) { _, _ = fmt.Fprintf(o.out, format, a...) }

// ANSI colours for the few words worth one.
const (
	red    = "31"
	green  = "32"
	yellow = "33"
	bold   = "1"
)

// cell is one table cell: its text and, on a terminal, a colour.
type cell struct {
	text, colour string
}

func c(text string) cell             { return cell{text: text} }
func coloured(text, col string) cell { return cell{text: text, colour: col} }

// table writes rows aligned in columns (two spaces apart), the first row as
// the header. Widths count runes of the plain text, so colour never breaks
// the alignment.
func (o *options) table(rows [][]cell) {
	if len(rows) == 0 {
		return
	}
	widths := map[int]int{}
	for _, r := range rows {
		for i, x := range r {
			widths[i] = max(widths[i], utf8.RuneCountInString(x.text))
		}
	}
	col := o.colour()
	var b strings.Builder
	for _, r := range rows {
		for i, x := range r {
			text := x.text
			if col && x.colour != "" {
				text = "\x1b[" + x.colour + "m" + text + "\x1b[0m"
			}
			b.WriteString(text)
			if i < len(r)-1 {
				b.WriteString(strings.Repeat(" ", widths[i]-utf8.RuneCountInString(x.text)+2))
			}
		}
		b.WriteString("\n")
	}
	_, _ = io.WriteString(o.out, b.String())
}

func header(names ...string) []cell {
	out := make([]cell, len(names))
	for i, n := range names {
		out[i] = coloured(n, bold)
	}
	return out
}

// loadKinds reads --kinds-config (or $CONFIGSTAMP_KINDS_CONFIG), the file
// configstamp runs with, into the registry of kinds: the plugin then reads
// them as configstamp does.
func (o *options) loadKinds() error {
	cfg, err := cswl.LoadKindsConfig(cmp.Or(o.kindsConfig, os.Getenv("CONFIGSTAMP_KINDS_CONFIG")))
	if err != nil {
		return usagef("%v", err)
	}
	custom := make([]cswl.Kind, 0, len(cfg))
	for _, c := range cfg {
		custom = append(custom, cswl.Custom(c))
	}
	o.registry = cswl.NewRegistry(custom...)
	return nil
}

// parseWorkloadArg reads KIND/NAME (kubectl's spellings of the kind).
func (o *options) parseWorkloadArg(arg string) (cswl.Kind, string, error) {
	kind, name, ok := strings.Cut(arg, "/")
	names := []string{}
	for _, k := range o.registry.All() {
		if ok && name != "" && slices.ContainsFunc(k.Spellings(), func(a string) bool { return strings.EqualFold(a, kind) }) {
			return k, name, nil
		}
		names = append(names, strings.ToLower(k.Name))
	}
	return cswl.Kind{}, "", usagef("%q is not KIND/NAME with KIND %s or %s", arg,
		strings.Join(names[:len(names)-1], ", "), names[len(names)-1])
}

// listWorkloads lists the workloads of every kind of the registry in ns
// ("" all), each kind through the dynamic client; an extra kind whose CRD is
// not installed has none.
func (o *options) listWorkloads(ctx context.Context, ns string) ([]workload, error) {
	var out []workload
	for _, k := range o.registry.All() {
		list, err := o.dynamic.Resource(k.GVR()).Namespace(ns).List(ctx, metav1.ListOptions{})
		if apierrors.IsNotFound(err) && k.Unstructured() {
			continue // the CRD is not installed
		}
		if err != nil {
			return nil, fmt.Errorf("while listing %s: %w", k.Resource, err)
		}
		for i := range list.Items {
			if w, ok := fromUnstructured(k, &list.Items[i]); ok {
				out = append(out, w)
			}
		}
	}
	sortWorkloads(out)
	return out, nil
}

// getWorkload reads one workload.
func (o *options) getWorkload(ctx context.Context, k cswl.Kind, ns, name string) (workload, error) {
	u, err := o.dynamic.Resource(k.GVR()).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return workload{}, fmt.Errorf("%s %s/%s not found", k.Name, ns, name)
	case err != nil:
		return workload{}, fmt.Errorf("while reading %s %s/%s: %w", k.Name, ns, name, err)
	}
	w, ok := fromUnstructured(k, u)
	if !ok {
		return w, fmt.Errorf("%s %s/%s has no pod template where --kinds-config says", k.Name, ns, name)
	}
	return w, nil
}

// oneWorkload reads the one workload a command names with arg (KIND/NAME) in
// its namespace (-n or the kubeconfig's), and returns it with that namespace.
// doing says what the command does with it, for refusing -A ("why reads").
func (o *options) oneWorkload(ctx context.Context, arg, doing string) (workload, string, error) {
	k, name, err := o.parseWorkloadArg(arg)
	if err != nil {
		return workload{}, "", err
	}
	if o.allNamespaces {
		return workload{}, "", usagef("%s one workload: -A does not apply", doing)
	}
	if err := o.connect(); err != nil {
		return workload{}, "", err
	}
	ns := o.ns()
	w, err := o.getWorkload(ctx, k, ns, name)
	return w, ns, err
}

// namespaceLabels reads the labels and annotations of the namespaces, once
// each. A namespace the user may not read counts as unlabelled.
type namespaceLabels struct {
	o     *options
	cache map[string]metav1.ObjectMeta
}

func (n *namespaceLabels) read(ctx context.Context, name string) metav1.ObjectMeta {
	if m, ok := n.cache[name]; ok {
		return m
	}
	if n.cache == nil {
		n.cache = map[string]metav1.ObjectMeta{}
	}
	var m metav1.ObjectMeta
	if ns, err := n.o.client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{}); err == nil {
		m = ns.ObjectMeta
	}
	n.cache[name] = m
	return m
}

func (n *namespaceLabels) get(ctx context.Context, name string) map[string]string {
	return n.read(ctx, name).Labels
}

// annotations are the namespace's annotations (configstamp.io/canary).
func (n *namespaceLabels) annotations(ctx context.Context, name string) map[string]string {
	return n.read(ctx, name).Annotations
}
