package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ownNamespace is configstamp's namespace; it must exist before it starts.
const ownNamespace = "configstamp-system"

// configstampProcess is bin/configstamp running against a control plane with
// the out-of-cluster flags the tests use (test/framework).
type configstampProcess struct {
	cmd         *exec.Cmd
	done        chan struct{}
	logPath     string
	probeAddr   string
	metricsAddr string
	started     time.Time
	readyAfter  time.Duration // from process start to the first /readyz 200
	leaderAfter time.Duration // from process start to holding the leader lease
	http        *http.Client
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// errPortTaken: a port freePort gave was bound by another process before
// configstamp bound it (freePort closes its listener; make test's other
// lane starts servers at the same time).
var errPortTaken = errors.New("a port given to configstamp was taken meanwhile")

// startConfigstamp is startConfigstampOnce, again on other ports (three
// tries) when a port it was given was taken meanwhile.
func startConfigstamp(ctx context.Context, bin, kubeconfig, logPath string, extra []string) (*configstampProcess, error) {
	for try := 1; ; try++ {
		p, err := startConfigstampOnce(ctx, bin, kubeconfig, logPath, extra)
		if err == nil || try == 3 || !errors.Is(err, errPortTaken) {
			return p, err
		}
		logf("%v; starting configstamp again on other ports", err)
	}
}

// startConfigstampOnce starts the binary and waits for /readyz 200 (caches synced,
// webhook serving), then until it holds the leader lease: a predecessor
// stopped while it was taking the lease may hold it for the lease duration,
// and a scenario measured before the reconcilers run would time that wait.
func startConfigstampOnce(ctx context.Context, bin, kubeconfig, logPath string, extra []string) (*configstampProcess, error) {
	var ports [3]int
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	p := &configstampProcess{
		logPath:     logPath,
		probeAddr:   "127.0.0.1:" + strconv.Itoa(ports[1]),
		metricsAddr: "127.0.0.1:" + strconv.Itoa(ports[2]),
		http:        &http.Client{Timeout: 5 * time.Second},
	}
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	var logStart int64 // this start's part of the log: an earlier try's lines stay above it
	if fi, err := logFile.Stat(); err == nil {
		logStart = fi.Size()
	}
	args := append([]string{
		"--kubeconfig=" + kubeconfig, "--namespace=" + ownNamespace,
		"--cert-mode=self", fmt.Sprintf("--webhook-url=https://127.0.0.1:%d", ports[0]),
		fmt.Sprintf("--webhook-port=%d", ports[0]),
		"--health-probe-bind-address=" + p.probeAddr, "--metrics-bind-address=" + p.metricsAddr,
		// Plain HTTP on loopback: the benchmark scrapes without an identity.
		"--metrics-secure=false",
		"--graceful-shutdown-timeout=5s", "--shutdown-delay=0s",
	}, extra...)
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p.started = time.Now()
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		return nil, err
	}
	p.done = make(chan struct{})
	go func() { _ = p.cmd.Wait(); logFile.Close(); close(p.done) }()
	logf("configstamp started (pid %d, log %s): %s", p.cmd.Process.Pid, logPath, strings.Join(extra, " "))

	if err := waitReadyz(ctx, "configstamp", p.http, p.probeAddr, 10*time.Millisecond, p.done, logPath); err != nil {
		_ = p.stop()
		if logged, rerr := os.ReadFile(logPath); rerr == nil && bytes.Contains(logged[min(logStart, int64(len(logged))):], []byte("bind: address already in use")) {
			return nil, fmt.Errorf("%w: %w", errPortTaken, err)
		}
		return nil, err
	}
	p.readyAfter = time.Since(p.started)
	err = poll(ctx, "configstamp leader", time.Minute, 50*time.Millisecond, func() (bool, string, error) {
		ss, err := p.scrape()
		if err != nil {
			return false, err.Error(), nil
		}
		return ss.sum("leader_election_master_status", nil) == 1, "not the leader yet", nil
	})
	if err != nil {
		_ = p.stop()
		return nil, err
	}
	p.leaderAfter = time.Since(p.started)
	return p, nil
}

// waitReadyz polls a process's /readyz at probeAddr every interval until it
// answers 200, failing at once if the process exits (done closes).
func waitReadyz(ctx context.Context, what string, hc *http.Client, probeAddr string, interval time.Duration, done <-chan struct{}, logPath string) error {
	return poll(ctx, what+" /readyz", 3*time.Minute, interval, func() (bool, string, error) {
		select {
		case <-done:
			return false, "", fmt.Errorf("%s exited early; see %s", what, logPath)
		default:
		}
		resp, err := hc.Get("http://" + probeAddr + "/readyz")
		if err != nil {
			return false, err.Error(), nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status, nil
	})
}

func (p *configstampProcess) pid() int { return p.cmd.Process.Pid }

// stop sends SIGTERM and waits; SIGKILL after 15 s.
func (p *configstampProcess) stop() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return errors.New("configstamp did not stop within 15 s of SIGTERM; killed")
	}
}

// procMemory is from /proc/PID/status: peak and current resident set, and the
// current one split into anonymous memory (heap, stacks) and file pages
// (mostly the binary's text, shared and reclaimable).
type procMemory struct{ hwm, rss, anon, file uint64 }

// memory reads VmHWM and VmRSS from /proc/PID/status.
func (p *configstampProcess) memory() (procMemory, error) {
	return readProcMemory(p.pid())
}

func readProcMemory(pid int) (procMemory, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return procMemory{}, err
	}
	defer f.Close()
	var m procMemory
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 || fields[2] != "kB" {
			continue
		}
		v, err := strconv.ParseUint(fields[1], 10, 64)
		if err != nil {
			continue
		}
		switch fields[0] {
		case "VmHWM:":
			m.hwm = v << 10
		case "VmRSS:":
			m.rss = v << 10
		case "RssAnon:":
			m.anon = v << 10
		case "RssFile:":
			m.file = v << 10
		}
	}
	if m.hwm == 0 {
		return m, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
	}
	return m, sc.Err()
}

// scrape reads configstamp's /metrics.
func (p *configstampProcess) scrape() (samples, error) {
	resp, err := p.http.Get("http://" + p.metricsAddr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("configstamp /metrics: %s", resp.Status)
	}
	return parseProm(resp.Body)
}

// heap returns the Go heap in use (live objects and garbage not yet
// collected) and the GC's heap goal (live heap at the last GC × (1+GOGC/100)).
func (p *configstampProcess) heap() (inuse, goal float64, err error) {
	ss, err := p.scrape()
	if err != nil {
		return 0, 0, err
	}
	return ss.sum("go_memstats_heap_inuse_bytes", nil), ss.sum("go_memstats_next_gc_bytes", nil), nil
}

// idle reports whether configstamp has nothing queued and nothing in progress:
// work queues empty, no reconcile running, no webhook request in flight.
func (p *configstampProcess) idle() (bool, string, error) {
	ss, err := p.scrape()
	if err != nil {
		return false, "", err
	}
	depth := ss.sum("workqueue_depth", nil)
	workers := ss.sum("controller_runtime_active_workers", nil)
	inflight := ss.sum("controller_runtime_webhook_requests_in_flight", nil)
	why := fmt.Sprintf("queue depth %.0f, active workers %.0f, webhook requests in flight %.0f", depth, workers, inflight)
	return depth == 0 && workers == 0 && inflight == 0, why, nil
}

// waitIdle polls until idle holds twice in a row.
func (p *configstampProcess) waitIdle(ctx context.Context, timeout time.Duration) error {
	streak := 0
	return poll(ctx, "configstamp idle", timeout, 100*time.Millisecond, func() (bool, string, error) {
		ok, why, err := p.idle()
		if err != nil {
			return false, err.Error(), nil
		}
		if ok {
			streak++
		} else {
			streak = 0
		}
		return streak >= 2, why, nil
	})
}

// webhookLatency returns configstamp's own histogram of webhook handling time
// (controller-runtime's; its buckets are decades: 10 ms, 100 ms, 1 s, ...).
func (p *configstampProcess) webhookLatency() (histogram, error) {
	ss, err := p.scrape()
	if err != nil {
		return histogram{}, err
	}
	return ss.histogramOf("controller_runtime_webhook_latency_seconds", nil), nil
}

// poll calls cond every interval until it holds, returns an error, or timeout
// (or ctx) ends; the error then carries cond's last explanation.
func poll(ctx context.Context, what string, timeout, interval time.Duration, cond func() (bool, string, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		ok, why, err := cond()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last: %s)", what, ctx.Err(), why)
		case <-ticker.C:
		}
	}
}
