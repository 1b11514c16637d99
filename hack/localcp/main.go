// Command localcp starts and stops a local Kubernetes control plane that
// outlives it (see test/localcp).
//
//	localcp up   [--dir _output/localcp] [--full] [--bin DIR]   # prints: export KUBECONFIG=...
//	localcp down [--dir _output/localcp]
//	localcp status [--dir _output/localcp]
//
// `up` is idempotent: if a healthy control plane of the requested kind already
// runs in --dir it only prints the export line again. Use it as
// eval "$(go run ./hack/localcp up --full)". Progress goes to stderr.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/configstamp/configstamp/test/localcp"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "localcp:", err)
		os.Exit(1)
	}
}

func usage() error {
	return errors.New("usage: localcp up|down|status [--dir DIR] [--full] [--bin DIR]")
}

func run(args []string) error {
	if len(args) == 0 {
		return usage()
	}
	cmd := args[0]
	fs := flag.NewFlagSet("localcp "+cmd, flag.ContinueOnError)
	dir := fs.String("dir", "_output/localcp", "state directory (certificates, etcd data, kubeconfig, logs, pids)")
	full := fs.Bool("full", false, "also run kube-controller-manager, kube-scheduler and kwok with one fake node")
	bin := fs.String("bin", "", "directory with the binaries (default: $CONFIGSTAMP_BIN or <repo>/bin)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }

	switch cmd {
	case "up":
		if cp, err := localcp.Attach(ctx, *dir); err == nil {
			if cp.Full == *full {
				logf("control plane already running in %s", cp.Dir)
				fmt.Printf("export KUBECONFIG=%s\n", cp.KubeconfigPath)
				return nil
			}
			logf("control plane in %s has full=%v, restarting with full=%v", cp.Dir, cp.Full, *full)
		}
		// Start stops whatever is left in dir (crashed or of the other kind).
		cp, err := localcp.Start(ctx, localcp.Options{BinDir: *bin, Dir: *dir, Full: *full, Detach: true, Logf: logf})
		if err != nil {
			return err
		}
		logf("logs: %s/*.log; stop with: go run ./hack/localcp down --dir %s", cp.Dir, *dir)
		fmt.Printf("export KUBECONFIG=%s\n", cp.KubeconfigPath)
		return nil
	case "down":
		if err := localcp.StopDir(*dir); err != nil {
			return err
		}
		logf("control plane in %s stopped", *dir)
		return nil
	case "status":
		cp, err := localcp.Attach(ctx, *dir)
		if err != nil {
			return err
		}
		logf("control plane running in %s (full=%v) at %s", cp.Dir, cp.Full, cp.APIServerURL)
		fmt.Printf("export KUBECONFIG=%s\n", cp.KubeconfigPath)
		return nil
	default:
		return usage()
	}
}
