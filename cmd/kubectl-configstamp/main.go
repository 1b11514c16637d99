// Command kubectl-configstamp is the kubectl plugin of configstamp: with the
// binary on PATH, `kubectl configstamp` answers which workloads use a
// ConfigMap or Secret, what applying one would roll, why a workload rolled,
// which waves are in flight, and lifts a halt. It runs with the user's own
// kubeconfig and permissions and only reads, except `resume`.
//
// Output is a table for people (colour only on a terminal) or, with -o json or
// -o yaml, a document for scripts. Exit codes: 0 done, 1 an error, 2 a usage
// error. Nothing it prints reveals Secret data.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit codes, as kubectl's.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// usageError is a mistake in the command line (exit code 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

// command is one subcommand.
type command struct {
	name, args, short string
	// positional is the number of positional arguments it takes.
	positional int
	run        func(ctx context.Context, o *options, args []string) error
}

var commands = []command{
	{"who-uses", "configmap/NAME|secret/NAME", "workloads that reference a ConfigMap or Secret: how, which keys, opted in or not", 1, runWhoUses},
	{"plan", "-f FILE", "which workloads would roll if a ConfigMap/Secret manifest were applied, and which would not", 0, runPlan},
	{"why", "KIND/NAME", "a workload's last configstamp rollout: when, caused by what, its state now, its events", 1, runWhy},
	{"status", "", "rollouts in flight cluster-wide: rolling, verifying and halted workloads, budget in use", 0, runStatus},
	{"resume", "KIND/NAME", "lift the halt a failed workload carries (removes configstamp.io/halted)", 1, runResume},
}

func usage(w io.Writer) {
	_, _ = fmt.Fprint(w, "kubectl configstamp: see and steer configstamp.\n\nUsage:\n  kubectl configstamp COMMAND [flags]\n\nCommands:\n")
	for _, c := range commands {
		_, _ = fmt.Fprintf(w, "  %-9s %-27s %s\n", c.name, c.args, c.short)
	}
	_, _ = fmt.Fprint(w, `
Flags:
  -n, --namespace NS       namespace (default: the kubeconfig context's)
  -A, --all-namespaces     every namespace (who-uses, status)
  -o, --output FORMAT      json, yaml or wide (default: a table)
  -f, --filename FILE      the manifest to plan ("-": standard input)
      --kubeconfig PATH    kubeconfig file (default: $KUBECONFIG, ~/.kube/config)
      --context NAME       kubeconfig context
      --no-color           never colour the output (NO_COLOR does the same)
      --kinds-config FILE  the extra kinds configstamp runs with (its --kinds-config,
                           e.g. config/kinds/argo-rollouts/kinds.yaml; default
                           $CONFIGSTAMP_KINDS_CONFIG): read them as workloads too

Exit codes: 0 done, 1 error, 2 usage error.
`)
}

// run is main without the process: it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, cmd, rest, err := parse(args, stdout)
	if err == nil && cmd != nil {
		o.out, o.errOut = stdout, stderr
		err = cmd.run(ctx, o, rest)
	}
	var ue usageError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &ue):
		_, _ = fmt.Fprintf(stderr, "error: %s\nSee 'kubectl configstamp --help'.\n", ue.msg)
		return exitUsage
	default:
		_, _ = fmt.Fprintf(stderr, "error: %v\n", err)
		return exitError
	}
}

// parse reads the command line. Flags may come before or after the command
// and its arguments, as with kubectl.
func parse(args []string, stdout io.Writer) (*options, *command, []string, error) {
	o := &options{}
	fs := flag.NewFlagSet("kubectl-configstamp", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	for _, name := range []string{"n", "namespace"} {
		fs.StringVar(&o.namespace, name, "", "")
	}
	for _, name := range []string{"A", "all-namespaces"} {
		fs.BoolVar(&o.allNamespaces, name, false, "")
	}
	for _, name := range []string{"o", "output"} {
		fs.StringVar(&o.output, name, "", "")
	}
	for _, name := range []string{"f", "filename"} {
		fs.StringVar(&o.filename, name, "", "")
	}
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "")
	fs.StringVar(&o.context, "context", "", "")
	fs.BoolVar(&o.noColor, "no-color", false, "")
	fs.StringVar(&o.kindsConfig, "kinds-config", "", "")
	var help bool
	fs.BoolVar(&help, "h", false, "")
	fs.BoolVar(&help, "help", false, "")

	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, nil, nil, usagef("%v", err)
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if help || len(positional) == 0 {
		usage(stdout)
		if help {
			return nil, nil, nil, flag.ErrHelp
		}
		return nil, nil, nil, usagef("no command given")
	}
	i := slices.IndexFunc(commands, func(c command) bool { return c.name == positional[0] })
	if i < 0 {
		return nil, nil, nil, usagef("unknown command %q", positional[0])
	}
	cmd := &commands[i]
	rest := positional[1:]
	if len(rest) != cmd.positional {
		return nil, nil, nil, usagef("%s takes %d argument(s): kubectl configstamp %s %s", cmd.name, cmd.positional, cmd.name, cmd.args)
	}
	switch o.output {
	case "", "wide", "json", "yaml":
	default:
		return nil, nil, nil, usagef("unknown output format %q: use json, yaml or wide", o.output)
	}
	if o.allNamespaces && o.namespace != "" {
		return nil, nil, nil, usagef("-n and -A exclude each other")
	}
	if err := o.loadKinds(); err != nil {
		return nil, nil, nil, err
	}
	return o, cmd, rest, nil
}
