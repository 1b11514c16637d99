// Command localcp starts and stops a local Kubernetes control plane that
// outlives it (see test/localcp).
//
//	localcp up   [--dir _output/localcp] [--full] [--real-node] [--bin DIR]   # prints: export KUBECONFIG=...
//	localcp down [--dir _output/localcp]
//	localcp status [--dir _output/localcp]
//	localcp preflight [--bin DIR]   # can this host run --real-node? (root)
//
// `up` is idempotent: if a healthy control plane of the requested kind already
// runs in --dir it only prints the export line again. Use it as
// eval "$(go run ./hack/localcp up --full)". Progress goes to stderr.
//
// --real-node (root, Linux; `make realnode node-images`) runs a real node with
// kubelet, kube-proxy and containerd instead of kwok's fake node; `down`
// removes it with everything it made (mounts, bridge, iptables rules).
//
// `preflight` checks what --real-node checks before it starts anything (root,
// the host's cgroup mode and what the kubelet needs of it, the host's
// programs, the pause image) and prints the cgroup mode. It exits 0 when the
// host can run the real node, 3 when it cannot for a known reason
// (localcp.ErrRealNodeUnsupported, e.g. a cgroup v2 container whose root
// holds processes), printing exactly why, and 1 otherwise (something to
// install or build). make's real-node lane runs it first
// (hack/realnode-preflight.sh).
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

// exitUnsupported is preflight's exit code for localcp.ErrRealNodeUnsupported.
const exitUnsupported = 3

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "localcp:", err)
		if errors.Is(err, localcp.ErrRealNodeUnsupported) {
			os.Exit(exitUnsupported)
		}
		os.Exit(1)
	}
}

func usage() error {
	return errors.New("usage: localcp up|down|status|preflight [--dir DIR] [--full] [--real-node] [--bin DIR]")
}

func run(args []string) error {
	if len(args) == 0 {
		return usage()
	}
	cmd := args[0]
	fs := flag.NewFlagSet("localcp "+cmd, flag.ContinueOnError)
	dir := fs.String("dir", "_output/localcp", "state directory (certificates, etcd data, kubeconfig, logs, pids)")
	full := fs.Bool("full", false, "also run kube-controller-manager, kube-scheduler and kwok with one fake node")
	realNode := fs.Bool("real-node", false, "run a real node (kubelet, kube-proxy, containerd; root only) instead of kwok's fake one; implies --full")
	bin := fs.String("bin", "", "directory with the binaries (default: $CONFIGSTAMP_BIN or <repo>/bin)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *realNode {
		*full = true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }

	switch cmd {
	case "up":
		if cp, err := localcp.Attach(ctx, *dir); err == nil {
			if cp.Full == *full && cp.RealNode == *realNode {
				logf("control plane already running in %s", cp.Dir)
				fmt.Printf("export KUBECONFIG=%s\n", cp.KubeconfigPath)
				return nil
			}
			logf("control plane in %s has full=%v real-node=%v, restarting with full=%v real-node=%v", cp.Dir, cp.Full, cp.RealNode, *full, *realNode)
		}
		// Start stops whatever is left in dir (crashed or of the other kind).
		cp, err := localcp.Start(ctx, localcp.Options{BinDir: *bin, Dir: *dir, Full: *full, RealNode: *realNode, Detach: true, Logf: logf})
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
		logf("control plane running in %s (full=%v real-node=%v) at %s", cp.Dir, cp.Full, cp.RealNode, cp.APIServerURL)
		fmt.Printf("export KUBECONFIG=%s\n", cp.KubeconfigPath)
		return nil
	case "preflight":
		mode, err := localcp.CheckRealNodeHost(*bin)
		if mode != "" {
			fmt.Printf("host: %s\n", mode)
		}
		if err != nil {
			return err
		}
		fmt.Println("real node: supported")
		return nil
	default:
		return usage()
	}
}
