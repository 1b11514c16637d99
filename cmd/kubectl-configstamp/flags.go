package main

import (
	"context"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// outputFormats are the values of -o.
var outputFormats = []string{"json", "yaml", "wide"}

// addFlags adds the flags every command shares to root: kubectl's connection
// flags (genericclioptions.ConfigFlags) and the plugin's own, with their
// completions.
func (o *options) addFlags(root *cobra.Command) {
	fs := root.PersistentFlags()
	o.configFlags.AddFlags(fs)
	fs.BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "every namespace (who-uses, status, unhold)")
	fs.StringVarP(&o.output, "output", "o", "", "output format: json, yaml or wide (default: a table)")
	fs.StringVarP(&o.filename, "filename", "f", "", `the manifest to plan ("-": standard input)`)
	fs.BoolVar(&o.noColor, "no-color", false, "never colour the output (NO_COLOR does the same)")
	fs.StringVar(&o.kindsConfig, "kinds-config", "", "the extra kinds configstamp runs with (its --kinds-config, e.g. "+
		"config/kinds/argo-rollouts/kinds.yaml; default $CONFIGSTAMP_KINDS_CONFIG): read them as workloads too")
	_ = root.MarkPersistentFlagFilename("filename", "yaml", "yml", "json")
	_ = root.MarkPersistentFlagFilename("kinds-config", "yaml", "yml")

	fixed := func(values ...string) cobra.CompletionFunc {
		return cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp)
	}
	_ = root.RegisterFlagCompletionFunc("output", fixed(outputFormats...))
	_ = root.RegisterFlagCompletionFunc("namespace", func(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if o.checkForCompletion() != nil || o.connect() != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		list, err := o.client.CoreV1().Namespaces().List(cmd.Context(), metav1.ListOptions{})
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []string
		for _, ns := range list.Items {
			out = append(out, ns.Name)
		}
		return withPrefix(out, toComplete), cobra.ShellCompDirectiveNoFileComp
	})
	// --context, --cluster and --user: the names the kubeconfig holds.
	for flag, names := range map[string]func(kubeconfigNames) []string{
		"context": func(k kubeconfigNames) []string { return k.contexts },
		"cluster": func(k kubeconfigNames) []string { return k.clusters },
		"user":    func(k kubeconfigNames) []string { return k.users },
	} {
		_ = root.RegisterFlagCompletionFunc(flag, func(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			return withPrefix(names(o.kubeconfigNames()), toComplete), cobra.ShellCompDirectiveNoFileComp
		})
	}
}

// check reads what the flags say once they are parsed, and refuses what
// does not go together.
func (o *options) check() error {
	if o.configFlags != nil && o.configFlags.Namespace != nil {
		o.namespace = *o.configFlags.Namespace
	}
	if !slices.Contains(append([]string{""}, outputFormats...), o.output) {
		return usagef("unknown output format %q: use json, yaml or wide", o.output)
	}
	if o.allNamespaces && o.namespace != "" {
		return usagef("-n and -A exclude each other")
	}
	return o.loadKinds()
}

// checkForCompletion is check for proposing words: the namespace and the
// kinds, whatever -o says.
func (o *options) checkForCompletion() error {
	out := o.output
	o.output = ""
	defer func() { o.output = out }()
	return o.check()
}

// kubeconfigNames are the context, cluster and user names of the kubeconfig.
type kubeconfigNames struct{ contexts, clusters, users []string }

func (o *options) kubeconfigNames() kubeconfigNames {
	var out kubeconfigNames
	raw, err := o.configFlags.ToRawKubeConfigLoader().RawConfig()
	if err != nil {
		return out
	}
	for name := range raw.Contexts {
		out.contexts = append(out.contexts, name)
	}
	for name := range raw.Clusters {
		out.clusters = append(out.clusters, name)
	}
	for name := range raw.AuthInfos {
		out.users = append(out.users, name)
	}
	slices.Sort(out.contexts)
	slices.Sort(out.clusters)
	slices.Sort(out.users)
	return out
}

// withPrefix keeps the words that start with prefix.
func withPrefix(words []string, prefix string) []string {
	var out []string
	for _, w := range words {
		if strings.HasPrefix(w, prefix) {
			out = append(out, w)
		}
	}
	return out
}

// completeSource proposes configmap/ and secret/, then the names of the
// namespace's ConfigMaps or Secrets (metadata only).
func completeSource(ctx context.Context, o *options, toComplete string) ([]string, cobra.ShellCompDirective) {
	kind, prefix, found := strings.Cut(toComplete, "/")
	if !found {
		return withPrefix([]string{"configmap/", "secret/"}, toComplete), cobra.ShellCompDirectiveNoSpace | cobra.ShellCompDirectiveNoFileComp
	}
	ref, err := parseSourceArg(kind + "/x")
	if err != nil || o.connect() != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	list, err := o.meta.Resource(sourceResources[ref.Kind]).Namespace(o.ns()).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	for _, item := range list.Items {
		out = append(out, kind+"/"+item.Name)
	}
	return withPrefix(out, kind+"/"+prefix), cobra.ShellCompDirectiveNoFileComp
}

// completeWorkload proposes the workload kinds (deployment/, ... and the
// extra kinds of --kinds-config), then the names of the namespace's
// workloads of that kind.
func completeWorkload(ctx context.Context, o *options, toComplete string) ([]string, cobra.ShellCompDirective) {
	if !strings.Contains(toComplete, "/") {
		var kinds []string
		for _, k := range o.registry.All() {
			kinds = append(kinds, strings.ToLower(k.Name)+"/")
		}
		return withPrefix(kinds, toComplete), cobra.ShellCompDirectiveNoSpace | cobra.ShellCompDirectiveNoFileComp
	}
	kind, _, _ := strings.Cut(toComplete, "/")
	k, _, err := o.parseWorkloadArg(kind + "/x")
	if err != nil || o.connect() != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ws, err := o.listWorkloads(ctx, o.ns())
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	for _, w := range ws {
		if w.kind == k.Name {
			out = append(out, kind+"/"+w.meta.Name)
		}
	}
	return withPrefix(out, toComplete), cobra.ShellCompDirectiveNoFileComp
}
