// Command kubectl-configstamp is the kubectl plugin of configstamp: with the
// binary on PATH, `kubectl configstamp` answers which workloads use a
// ConfigMap or Secret, what applying one would roll, why a workload rolled,
// which waves are in flight, and lifts a halt. It runs with the user's own
// kubeconfig and permissions and only reads, except `resume`.
//
// The command line is kubectl's: cobra commands and the connection flags of
// k8s.io/cli-runtime (genericclioptions.ConfigFlags: --kubeconfig, --context,
// --cluster, --user, -n, --server, --token, --as, --request-timeout, ...),
// with kubectl's flag forms (-oyaml, -o=json, -n=x, --namespace x), flags
// before or after the command and its arguments.
//
// Output is a table for people (colour only on a terminal) or, with -o json or
// -o yaml, a document for scripts whose field names are stable (output.go).
// Exit codes: 0 done, 1 an error, 2 a usage error. Nothing it prints reveals
// Secret data.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/genericclioptions"
)

// version is the plugin's version, set at link time (hack/release.mk):
//
//	go build -ldflags "-X main.version=v0.3.0" ./cmd/kubectl-configstamp
var version = "devel"

// completionName is the name under which kubectl (1.26 and later) runs a
// plugin's completion helper: `kubectl configstamp <TAB>` runs
// kubectl_complete-configstamp from PATH with cobra's __complete arguments.
// Run under that name (a symlink to this binary), the plugin answers them.
const completionName = "kubectl_complete-configstamp"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, argsOf(os.Args), os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// argsOf is the command line without the program name; run as
// kubectl_complete-configstamp it is a completion request.
func argsOf(osArgs []string) []string {
	if len(osArgs) == 0 {
		return nil
	}
	if strings.TrimSuffix(filepath.Base(osArgs[0]), ".exe") == completionName {
		return append([]string{cobra.ShellCompRequestCmd}, osArgs[1:]...)
	}
	return osArgs[1:]
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
	// long is the rest of its help: what it prints, then its -o json|yaml
	// fields (output.go).
	long string
	// positional is the number of positional arguments it takes.
	positional int
	run        func(ctx context.Context, o *options, args []string) error
	// flags adds the command's own flags (nil: none).
	flags func(fs *pflag.FlagSet, o *options)
	// complete proposes its positional argument (nil: none).
	complete func(ctx context.Context, o *options, toComplete string) ([]string, cobra.ShellCompDirective)
}

var commands = []command{
	{name: "who-uses", args: "configmap/NAME|secret/NAME", positional: 1, run: runWhoUses, complete: completeSource,
		short: "workloads that reference a ConfigMap or Secret: how, which keys, opted in or not", long: whoUsesLong},
	{name: "plan", args: "-f FILE", run: runPlan,
		short: "which workloads would roll if a ConfigMap/Secret manifest were applied, and which would not", long: planLong},
	{name: "why", args: "KIND/NAME", positional: 1, run: runWhy, complete: completeWorkload,
		short: "a workload's last configstamp rollout: when, caused by what, its state now, its events", long: whyLong},
	{name: "status", run: runStatus,
		short: "rollouts in flight cluster-wide: rolling, verifying and halted workloads, budget in use", long: statusLong},
	{name: "resume", args: "KIND/NAME", positional: 1, run: runResume, complete: completeWorkload,
		short: "lift the halt a failed workload carries (removes configstamp.io/halted)", long: resumeLong},
	{name: "unhold", run: runUnhold,
		short: "put back what configstamp set in workload specs for its canaries (for uninstalling it)", long: unholdLong},
	{name: "version", run: runVersion, flags: versionFlags,
		short: "the plugin's version and the version of configstamp the cluster runs", long: versionLong},
}

const rootLong = `kubectl configstamp: see and steer configstamp.

It uses your kubeconfig and your permissions, as kubectl does (the same
connection flags: --kubeconfig, --context, --cluster, --user, -n, --server,
--token, --as, --as-group, --request-timeout, ...). Flags may come before or
after the command and its arguments.

Output: a table for people (colour only on a terminal; --no-color or NO_COLOR
turn it off), -o wide for more columns, -o json or -o yaml for scripts. The
field names of -o json|yaml are stable (fields may be added, none renamed or
removed); each command's help lists them.

Completion: kubectl configstamp completion bash|zsh|fish|powershell prints
the script for kubectl-configstamp. For "kubectl configstamp <TAB>" (kubectl
1.26 and later), put an executable kubectl_complete-configstamp on PATH: a
symlink to kubectl-configstamp, or a script running
"kubectl configstamp __complete \"$@\"".

Exit codes: 0 done, 1 error, 2 usage error.`

// run is main without the process: it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, cmd, rest, err := parseArgs(ctx, args, stdout, stderr)
	if err == nil && cmd != nil {
		o.out, o.errOut = stdout, stderr
		err = cmd.run(ctx, o, rest)
	}
	var ue usageError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, pflag.ErrHelp):
		return exitOK
	case errors.As(err, &ue):
		_, _ = fmt.Fprintf(stderr, "error: %s\nSee 'kubectl configstamp --help'.\n", ue.msg)
		return exitUsage
	default:
		_, _ = fmt.Fprintf(stderr, "error: %v\n", err)
		return exitError
	}
}

// parse reads the command line (see parseArgs); help and completion write
// to stdout.
func parse(args []string, stdout io.Writer) (*options, *command, []string, error) {
	return parseArgs(context.Background(), args, stdout, io.Discard)
}

// parseArgs reads the command line. It returns the command to run with its
// options and arguments, or no command when the command line was answered
// already (--help, help, completion, __complete).
func parseArgs(ctx context.Context, args []string, stdout, stderr io.Writer) (*options, *command, []string, error) {
	o := &options{configFlags: genericclioptions.NewConfigFlags(true)}
	var chosen *command
	var rest []string
	root := newRoot(o, func(c *command, args []string) { chosen, rest = c, args })
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	if err := root.ExecuteContext(ctx); err != nil {
		return nil, nil, nil, err
	}
	if chosen == nil {
		return nil, nil, nil, nil
	}
	return o, chosen, rest, nil
}

// newRoot builds the command tree on o. A command line naming one of
// commands calls chosen with it and its arguments, once its flags are read
// and checked; run then runs it.
func newRoot(o *options, chosen func(*command, []string)) *cobra.Command {
	cobra.EnableCommandSorting = false // the order of commands
	root := &cobra.Command{
		Use:   "kubectl-configstamp",
		Short: "see and steer configstamp",
		Long:  rootLong,
		// Help and usage name it as kubectl runs it.
		Annotations:                map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl configstamp"},
		SilenceErrors:              true,
		SilenceUsage:               true,
		SuggestionsMinimumDistance: 2, // cobra's default, which SuggestionsFor does not apply
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return nil
			}
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				return usagef("unknown command %q; did you mean %s?", args[0], strings.Join(s, " or "))
			}
			return usagef("unknown command %q", args[0])
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			_ = cmd.Help()
			return usagef("no command given")
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usagef("%v", err) })
	o.addFlags(root)
	for i := range commands {
		c := &commands[i]
		sub := &cobra.Command{
			Use:   strings.TrimSpace(c.name + " " + c.args),
			Short: c.short,
			Long:  c.short + ".\n\n" + c.long,
			Args: func(_ *cobra.Command, args []string) error {
				if len(args) != c.positional {
					return usagef("%s takes %d argument(s): kubectl configstamp %s %s", c.name, c.positional, c.name, c.args)
				}
				return nil
			},
			RunE: func(_ *cobra.Command, args []string) error {
				if err := o.check(); err != nil {
					return err
				}
				chosen(c, args)
				return nil
			},
		}
		if c.flags != nil {
			c.flags(sub.Flags(), o)
		}
		if c.complete != nil {
			sub.ValidArgsFunction = func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
				if len(args) >= c.positional || o.checkForCompletion() != nil {
					return nil, cobra.ShellCompDirectiveNoFileComp
				}
				return c.complete(cmd.Context(), o, toComplete)
			}
		} else {
			sub.ValidArgsFunction = cobra.NoFileCompletions
		}
		root.AddCommand(sub)
	}
	return root
}
