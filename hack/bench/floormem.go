package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// memoryFloor builds and starts hack/bench/floormanager (a bare
// controller-runtime manager caching the same objects, stripped to names) on
// the same control plane, waits until its caches are synced, and reads its
// memory: what the required libraries cost before configstamp adds anything.
func memoryFloor(ctx context.Context, e *env) (procMemory, error) {
	bin := e.cfg.floorManagerBin
	if bin == "" {
		bin = filepath.Join(e.cfg.outDir, "floormanager")
		build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./hack/bench/floormanager")
		if out, err := build.CombinedOutput(); err != nil {
			return procMemory{}, fmt.Errorf("building the floor manager: %w: %s", err, out)
		}
	}
	port, err := freePort()
	if err != nil {
		return procMemory{}, err
	}
	probe := "127.0.0.1:" + strconv.Itoa(port)
	logFile, err := os.Create(filepath.Join(e.cfg.outDir, "floormanager.log"))
	if err != nil {
		return procMemory{}, err
	}
	defer logFile.Close()
	// No --shutdown-delay: that is configstamp's flag (its webhook drains on
	// SIGTERM). The floor manager serves no webhook, defines no such flag and
	// stops at once; passing it made the manager exit with "flag provided but
	// not defined" and left the memory figure without its floor.
	cmd := exec.Command(bin, "--kubeconfig="+e.cp.KubeconfigPath, "--namespace="+ownNamespace,
		"--health-probe-bind-address="+probe, "--metrics-bind-address=127.0.0.1:0")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return procMemory{}, err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-exited
	}()
	hc := &http.Client{Timeout: 5 * time.Second}
	if err := waitReadyz(ctx, "floor manager", hc, probe, 50*time.Millisecond, exited, logFile.Name()); err != nil {
		return procMemory{}, err
	}
	// Read once the peak has held still for 3 s (the informers' first lists
	// decoded and dropped), as configstamp's is read once it is idle.
	var mem procMemory
	var since time.Time
	err = poll(ctx, "floor manager memory settled", time.Minute, 500*time.Millisecond, func() (bool, string, error) {
		m, err := readProcMemory(cmd.Process.Pid)
		if err != nil {
			return false, "", err
		}
		if m.hwm != mem.hwm {
			mem, since = m, time.Now()
		}
		mem.rss, mem.anon, mem.file = m.rss, m.anon, m.file
		return time.Since(since) >= 3*time.Second, "peak still moving", nil
	})
	return mem, err
}
