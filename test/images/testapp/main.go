// Command testapp is the workload of the node tests, built into the image
// configstamp.test/testapp:dev by hack/images (binary /testapp, user
// 65532:65532). It reads its configuration once at start, can be told to
// "reject" it (exit, or turn unready), and serves what it read over HTTP, so
// a test can see which ConfigMap/Secret contents a pod started with and make
// a rollout fail in a controlled way.
//
// Environment:
//
//	APP_DIRS       comma-separated directories read at start. Every entry of
//	               each directory that is (after following symlinks) a regular
//	               file is read, keyed "<dir>/<name>"; directories and names
//	               starting with ".." (the kubelet's ..data and timestamped
//	               directories of a ConfigMap/Secret volume) are skipped, and
//	               so are dangling symlinks. A path that is itself a regular
//	               file is read as one file.
//	APP_VALUE_*    every variable with this prefix is part of what was read.
//	APP_REJECT     a substring: if any file read at start or any APP_VALUE_*
//	               value contains it, the app rejects its config. Empty: never.
//	APP_FAIL_MODE  what rejecting does: "exit" (default), "unready", or
//	               "flap" (unready and Ready in turn, APP_FLAP each).
//	APP_EXIT_CODE  exit code for APP_FAIL_MODE=exit, 0-255 (default 1).
//	APP_FAIL_AFTER Go duration (default 0s). exit: the app exits after this
//	               long, serving GET /ready 200 until then (0s: it exits at
//	               once, without serving). unready: GET /ready returns 200
//	               until this long after start and 503 from then on. flap:
//	               200 until this long after start, then 503 for APP_FLAP,
//	               200 for APP_FLAP, and so on.
//	APP_FLAP       Go duration (default 10s): each half of a flap.
//	APP_ONCE       "true": an init container's check. It reads its config
//	               and exits 0 at once unless it rejects it (then as
//	               APP_FAIL_MODE=exit says).
//	APP_LISTEN     HTTP listen address (default ":8080").
//	APP_EXIT_FIRST a file path (on a volume that outlives the container,
//	               an emptyDir): when it does not exist, the app creates it
//	               and exits 1 after printing its config, as an app whose
//	               dependency is not up yet at its first start; when it
//	               does, the app runs as the other settings say.
//
// HTTP (GET or HEAD):
//
//	/ready     200 "ok", or 503 "rejected: <reason>" when unready as above.
//	/healthz   200 "ok".
//	/config    JSON of what was read at start (never re-read):
//	           {"files": {"<dir>/<name>": "<content>"},
//	            "env": {"APP_VALUE_X": "<value>"},
//	            "started": "<RFC3339Nano>", "rejected": <bool>}
//	/files-now JSON {"files": {...}, "read": "<RFC3339Nano>"}: the same
//	           directories read again now (what the kubelet has since
//	           written into a running pod's volumes); 500 if reading fails.
//
// At start it prints the /config JSON as one line to stdout and, when it
// rejects, the reason to stderr.
//
// Exit codes: 0 on SIGTERM or SIGINT (handled promptly, also as PID 1);
// APP_EXIT_CODE when rejecting in exit mode; 2 for a bad setting, an
// unreadable APP_DIRS entry or a failure to listen.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	failExit    = "exit"
	failUnready = "unready"
	failFlap    = "flap"
	valuePrefix = "APP_VALUE_"
	// exitSetup is the exit code for a configuration the app cannot run
	// with (as opposed to one it rejects).
	exitSetup = 2
)

type config struct {
	Dirs      []string
	Reject    string
	FailMode  string
	ExitCode  int
	FailAfter time.Duration
	Flap      time.Duration
	Once      bool
	Listen    string
	ExitFirst string
	Values    map[string]string // the APP_VALUE_* variables
}

// parseConfig reads the settings from environ ("KEY=value" entries).
func parseConfig(environ []string) (config, error) {
	env := map[string]string{}
	cfg := config{FailMode: failExit, ExitCode: 1, Flap: 10 * time.Second, Listen: ":8080", Values: map[string]string{}}
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
		if strings.HasPrefix(k, valuePrefix) {
			cfg.Values[k] = v
		}
	}
	for _, d := range strings.Split(env["APP_DIRS"], ",") {
		if d = strings.TrimSpace(d); d != "" {
			cfg.Dirs = append(cfg.Dirs, d)
		}
	}
	cfg.Reject = env["APP_REJECT"]
	if v := env["APP_FAIL_MODE"]; v != "" {
		if v != failExit && v != failUnready && v != failFlap {
			return cfg, fmt.Errorf("APP_FAIL_MODE=%q: want %q, %q or %q", v, failExit, failUnready, failFlap)
		}
		cfg.FailMode = v
	}
	if v := env["APP_EXIT_CODE"]; v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 255 {
			return cfg, fmt.Errorf("APP_EXIT_CODE=%q: want an integer 0-255", v)
		}
		cfg.ExitCode = n
	}
	if v := env["APP_FAIL_AFTER"]; v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return cfg, fmt.Errorf("APP_FAIL_AFTER=%q: want a non-negative Go duration such as 10s", v)
		}
		cfg.FailAfter = d
	}
	if v := env["APP_FLAP"]; v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return cfg, fmt.Errorf("APP_FLAP=%q: want a positive Go duration such as 10s", v)
		}
		cfg.Flap = d
	}
	cfg.Once = env["APP_ONCE"] == "true"
	cfg.ExitFirst = env["APP_EXIT_FIRST"]
	if v := env["APP_LISTEN"]; v != "" {
		cfg.Listen = v
	}
	return cfg, nil
}

// readDirs reads the regular files of dirs, keyed "<dir>/<name>". os.Stat
// follows the kubelet's symlinks (name -> ..data/name, ..data -> ..<time>);
// the ".." entries themselves are skipped so every file is read once.
func readDirs(dirs []string) (map[string]string, error) {
	files := map[string]string{}
	for _, dir := range dirs {
		fi, err := os.Stat(dir)
		if err != nil {
			return nil, fmt.Errorf("APP_DIRS: %w", err)
		}
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(dir)
			if err != nil {
				return nil, fmt.Errorf("APP_DIRS: %w", err)
			}
			files[dir] = string(b)
			continue
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, fmt.Errorf("APP_DIRS: %w", err)
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), "..") {
				continue
			}
			p := filepath.Join(dir, e.Name())
			fi, err := os.Stat(p)
			if errors.Is(err, fs.ErrNotExist) {
				// A dangling symlink: a key the kubelet is removing while
				// it swaps ..data.
				continue
			}
			if err != nil {
				return nil, err // *PathError: names the path
			}
			if !fi.Mode().IsRegular() {
				continue // directories (nested item paths), sockets, ...
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return nil, err
			}
			files[p] = string(b)
		}
	}
	return files, nil
}

// rejectReason says whether a file or value contains substr, and which,
// checking files then values in sorted order so the reason is stable.
func rejectReason(files, values map[string]string, substr string) (string, bool) {
	if substr == "" {
		return "", false
	}
	for _, k := range sortedKeys(files) {
		if strings.Contains(files[k], substr) {
			return fmt.Sprintf("file %s contains %q", k, substr), true
		}
	}
	for _, k := range sortedKeys(values) {
		if strings.Contains(values[k], substr) {
			return fmt.Sprintf("env %s contains %q", k, substr), true
		}
	}
	return "", false
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// snapshot is what the app read at start: the /config body and stdout line.
type snapshot struct {
	Files    map[string]string `json:"files"`
	Env      map[string]string `json:"env"`
	Started  string            `json:"started"`
	Rejected bool              `json:"rejected"`
}

type app struct {
	cfg     config
	start   time.Time
	snap    snapshot
	reason  string // why it rejects; empty if it does not
	now     func() time.Time
	readNow func([]string) (map[string]string, error)
}

// newApp reads the configuration and decides whether to reject it.
func newApp(cfg config, now func() time.Time) (*app, error) {
	start := now()
	files, err := readDirs(cfg.Dirs)
	if err != nil {
		return nil, err
	}
	reason, rejected := rejectReason(files, cfg.Values, cfg.Reject)
	return &app{
		cfg:   cfg,
		start: start,
		snap: snapshot{
			Files:    files,
			Env:      cfg.Values,
			Started:  start.UTC().Format(time.RFC3339Nano),
			Rejected: rejected,
		},
		reason:  reason,
		now:     now,
		readNow: readDirs,
	}, nil
}

// ready reports whether GET /ready succeeds now. In exit mode the app stays
// ready until it exits, so a readiness probe can pass first.
func (a *app) ready() bool {
	if !a.snap.Rejected || a.cfg.FailMode == failExit {
		return true
	}
	elapsed := a.now().Sub(a.start)
	switch {
	case elapsed < a.cfg.FailAfter:
		return true
	case a.cfg.FailMode == failUnready:
		return false
	}
	return (elapsed-a.cfg.FailAfter)/a.cfg.Flap%2 == 1 // flap: unready first
}

func (a *app) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ready", func(w http.ResponseWriter, _ *http.Request) {
		if !a.ready() {
			http.Error(w, "rejected: "+a.reason, http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n") // a client gone away loses nothing
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /config", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, a.snap)
	})
	mux.HandleFunc("GET /files-now", func(w http.ResponseWriter, _ *http.Request) {
		files, err := a.readNow(a.cfg.Dirs)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		writeJSON(w, struct {
			Files map[string]string `json:"files"`
			Read  string            `json:"read"`
		}{files, a.now().UTC().Format(time.RFC3339Nano)})
	})
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(v); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

// run is the whole program; it returns the exit code. listening, if not nil,
// is called with the bound address once the server accepts connections.
func run(ctx context.Context, environ []string, stdout, stderr io.Writer, listening func(net.Addr)) int {
	cfg, err := parseConfig(environ)
	if err != nil {
		logf(stderr, "%v", err)
		return exitSetup
	}
	a, err := newApp(cfg, time.Now)
	if err != nil {
		logf(stderr, "%v", err)
		return exitSetup
	}
	line, err := json.Marshal(a.snap)
	if err != nil {
		logf(stderr, "%v", err)
		return exitSetup
	}
	_, _ = fmt.Fprintf(stdout, "%s\n", line)
	if cfg.ExitFirst != "" {
		if _, err := os.Stat(cfg.ExitFirst); errors.Is(err, fs.ErrNotExist) {
			if err := os.WriteFile(cfg.ExitFirst, []byte("started once\n"), 0o600); err != nil {
				logf(stderr, "APP_EXIT_FIRST: %v", err)
				return exitSetup
			}
			logf(stderr, "first start: exiting with code 1 (APP_EXIT_FIRST)")
			return 1
		}
	}

	if cfg.Once && !a.snap.Rejected {
		return 0
	}
	var exitTimer <-chan time.Time
	if a.snap.Rejected {
		switch cfg.FailMode {
		case failExit:
			if cfg.FailAfter == 0 {
				logf(stderr, "rejecting config: %s; exiting with code %d", a.reason, cfg.ExitCode)
				return cfg.ExitCode
			}
			logf(stderr, "rejecting config: %s; exiting with code %d in %s", a.reason, cfg.ExitCode, cfg.FailAfter)
			t := time.NewTimer(cfg.FailAfter)
			defer t.Stop()
			exitTimer = t.C
		case failUnready, failFlap:
			logf(stderr, "rejecting config: %s; %s from %s after start", a.reason, cfg.FailMode, cfg.FailAfter)
		}
	}

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		logf(stderr, "listen: %v", err)
		return exitSetup
	}
	srv := &http.Server{Handler: a.handler(), ReadHeaderTimeout: 10 * time.Second}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	if listening != nil {
		listening(ln.Addr())
	}

	code := 0
	select {
	case <-ctx.Done():
		logf(stderr, "signalled, exiting")
	case <-exitTimer:
		logf(stderr, "rejecting config: %s; exiting with code %d", a.reason, cfg.ExitCode)
		code = cfg.ExitCode
	case err := <-serveErr:
		logf(stderr, "serve: %v", err)
		return exitSetup
	}
	// A short grace period: SIGTERM must end the container promptly, well
	// inside any terminationGracePeriodSeconds.
	sctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		logf(stderr, "shutdown: %v", err)
	}
	return code
}

// logf writes one "testapp: " line to w; a lost log line is not worth
// failing for.
func logf(w io.Writer, format string, args ...any) {
	_, _ = fmt.Fprintf(w, "testapp: "+format+"\n", args...)
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Environ(), os.Stdout, os.Stderr, nil)
	stop()
	os.Exit(code)
}
