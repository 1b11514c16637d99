package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// kubeletDir lays out dir the way the kubelet writes a ConfigMap volume:
// ..<ts>/<key> files, ..data -> ..<ts>, and <key> -> ..data/<key>.
func kubeletDir(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	ts := "..2026_01_02_03_04_05.000000001"
	if err := os.MkdirAll(filepath.Join(dir, ts, "nested"), 0o755); err != nil {
		t.Fatal(err)
	}
	for k, v := range files {
		if err := os.WriteFile(filepath.Join(dir, ts, k), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..data", k), filepath.Join(dir, k)); err != nil {
			t.Fatal(err)
		}
	}
	// An item with a nested path shows up as a directory symlink: skipped.
	if err := os.Symlink(filepath.Join("..data", "nested"), filepath.Join(dir, "nested")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(ts, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

// rewrite swaps ..data to a new timestamped directory, as the kubelet does
// when the ConfigMap changes.
func rewrite(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	ts := "..2026_01_02_03_04_06.000000002"
	if err := os.Mkdir(filepath.Join(dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	for k, v := range files {
		if err := os.WriteFile(filepath.Join(dir, ts, k), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

func TestReadDirs(t *testing.T) {
	root := t.TempDir()
	cm := filepath.Join(root, "cm")
	kubeletDir(t, cm, map[string]string{"a.conf": "A", ".hidden-key": "H"})
	plain := filepath.Join(root, "plain")
	if err := os.MkdirAll(filepath.Join(plain, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(plain, "b"), []byte("B"), 0o644); err != nil {
		t.Fatal(err)
	}
	single := filepath.Join(root, "single.txt")
	if err := os.WriteFile(single, []byte("S"), 0o644); err != nil {
		t.Fatal(err)
	}

	got, err := readDirs([]string{cm, plain, single})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		cm + "/a.conf":      "A",
		cm + "/.hidden-key": "H", // a key may start with one dot; only ".." is the kubelet's
		plain + "/b":        "B",
		single:              "S",
	}
	if !maps.Equal(got, want) {
		t.Errorf("readDirs = %v, want %v", got, want)
	}

	if _, err := readDirs([]string{filepath.Join(root, "missing")}); err == nil {
		t.Error("missing dir: no error")
	}
}

func TestParseConfig(t *testing.T) {
	cfg, err := parseConfig([]string{"APP_DIRS= /a, ,/b", "APP_VALUE_X=1", "APP_VALUE_=2", "APP_VALUEX=3", "PATH=/bin"})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(cfg.Dirs, "|"); got != "/a|/b" {
		t.Errorf("dirs = %q", got)
	}
	if !maps.Equal(cfg.Values, map[string]string{"APP_VALUE_X": "1", "APP_VALUE_": "2"}) {
		t.Errorf("values = %v", cfg.Values)
	}
	if cfg.FailMode != failExit || cfg.ExitCode != 1 || cfg.FailAfter != 0 || cfg.Listen != ":8080" || cfg.Reject != "" {
		t.Errorf("defaults = %+v", cfg)
	}

	cfg, err = parseConfig([]string{"APP_FAIL_MODE=unready", "APP_EXIT_CODE=42", "APP_FAIL_AFTER=1m30s", "APP_LISTEN=:9", "APP_REJECT=bad"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.FailMode != failUnready || cfg.ExitCode != 42 || cfg.FailAfter != 90*time.Second || cfg.Listen != ":9" || cfg.Reject != "bad" {
		t.Errorf("parsed = %+v", cfg)
	}

	for _, bad := range []string{"APP_FAIL_MODE=crash", "APP_EXIT_CODE=256", "APP_EXIT_CODE=x", "APP_FAIL_AFTER=10", "APP_FAIL_AFTER=-1s"} {
		if _, err := parseConfig([]string{bad}); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

func TestRejectReason(t *testing.T) {
	files := map[string]string{"/c/b": "fine", "/c/a": "has BAD in it"}
	values := map[string]string{"APP_VALUE_Z": "BAD too"}
	for _, tc := range []struct {
		name   string
		files  map[string]string
		values map[string]string
		substr string
		want   string
	}{
		{"no substring never rejects", files, values, "", ""},
		{"first file in order", files, values, "BAD", `file /c/a contains "BAD"`},
		{"env value", map[string]string{"/c/b": "fine"}, values, "BAD", `env APP_VALUE_Z contains "BAD"`},
		{"nothing matches", files, values, "absent", ""},
		{"case sensitive", files, values, "bad", ""},
	} {
		got, rejected := rejectReason(tc.files, tc.values, tc.substr)
		if got != tc.want || rejected != (tc.want != "") {
			t.Errorf("%s: = %q, %v; want %q", tc.name, got, rejected, tc.want)
		}
	}
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

func TestEndpoints(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cm")
	kubeletDir(t, dir, map[string]string{"k": "v1 BAD"})
	clk := &clock{time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)}
	a, err := newApp(config{
		Dirs: []string{dir}, Reject: "BAD", FailMode: failUnready, FailAfter: 10 * time.Second,
		Values: map[string]string{"APP_VALUE_A": "x"},
	}, clk.now)
	if err != nil {
		t.Fatal(err)
	}
	h := a.handler()

	if code, body := get(t, h, "/ready"); code != 200 || body != "ok\n" {
		t.Errorf("/ready before APP_FAIL_AFTER = %d %q, want 200", code, body)
	}
	if code, _ := get(t, h, "/healthz"); code != 200 {
		t.Errorf("/healthz = %d", code)
	}

	var snap snapshot
	code, body := get(t, h, "/config")
	if code != 200 {
		t.Fatalf("/config = %d %s", code, body)
	}
	if err := json.Unmarshal([]byte(body), &snap); err != nil {
		t.Fatalf("/config: %v: %s", err, body)
	}
	wantFiles := map[string]string{dir + "/k": "v1 BAD"}
	if !maps.Equal(snap.Files, wantFiles) || !maps.Equal(snap.Env, map[string]string{"APP_VALUE_A": "x"}) ||
		!snap.Rejected || snap.Started != "2026-01-02T03:04:05.000000006Z" {
		t.Errorf("/config = %+v", snap)
	}

	clk.t = clk.t.Add(10 * time.Second)
	if code, body := get(t, h, "/ready"); code != 503 || !strings.Contains(body, `file `+dir+`/k contains "BAD"`) {
		t.Errorf("/ready after APP_FAIL_AFTER = %d %q, want 503 with the reason", code, body)
	}

	// The kubelet rewrites the volume: /config keeps the start, /files-now
	// shows the new content.
	rewrite(t, dir, map[string]string{"k": "v2"})
	_, body = get(t, h, "/config")
	if !strings.Contains(body, "v1 BAD") {
		t.Errorf("/config after rewrite = %s, want the content read at start", body)
	}
	code, body = get(t, h, "/files-now")
	var now struct {
		Files map[string]string `json:"files"`
		Read  string            `json:"read"`
	}
	if err := json.Unmarshal([]byte(body), &now); code != 200 || err != nil {
		t.Fatalf("/files-now = %d %s (%v)", code, body, err)
	}
	if !maps.Equal(now.Files, map[string]string{dir + "/k": "v2"}) || now.Read != "2026-01-02T03:04:15.000000006Z" {
		t.Errorf("/files-now = %+v", now)
	}

	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if code, _ := get(t, h, "/files-now"); code != 500 {
		t.Errorf("/files-now with the dir gone = %d, want 500", code)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/ready", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /ready = %d", rec.Code)
	}
}

func TestReadyExitModeStaysReady(t *testing.T) {
	clk := &clock{time.Now()}
	a, err := newApp(config{Reject: "x", FailMode: failExit, FailAfter: time.Second, Values: map[string]string{"APP_VALUE_A": "x"}}, clk.now)
	if err != nil {
		t.Fatal(err)
	}
	clk.t = clk.t.Add(time.Hour)
	if !a.snap.Rejected || !a.ready() {
		t.Errorf("exit mode: rejected %v ready %v, want rejected and ready until the exit", a.snap.Rejected, a.ready())
	}
}

// startRun runs the program on a free port and returns its base URL and a
// channel with the exit code.
func startRun(t *testing.T, ctx context.Context, env []string) (string, <-chan int, *bytes.Buffer) {
	t.Helper()
	// Plain buffers: run writes stdout before it signals listening and
	// stderr is read only after it returned.
	var stdout, stderr bytes.Buffer
	addr := make(chan net.Addr, 1)
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append(env, "APP_LISTEN=127.0.0.1:0"), &stdout, &stderr, func(a net.Addr) { addr <- a })
	}()
	select {
	case a := <-addr:
		return "http://" + a.String(), done, &stdout
	case code := <-done:
		t.Fatalf("exited with %d before listening; stderr: %s", code, stderr.String())
	case <-time.After(10 * time.Second):
		t.Fatal("not listening after 10s")
	}
	return "", nil, nil
}

func httpGet(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func TestRunExitImmediately(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"APP_VALUE_A=reject-me", "APP_REJECT=reject", "APP_EXIT_CODE=7", "APP_LISTEN=127.0.0.1:0"}, &stdout, &stderr, func(net.Addr) {
		t.Error("listened although it should exit at once")
	})
	if code != 7 {
		t.Errorf("exit code = %d, want 7", code)
	}
	var snap snapshot
	if err := json.Unmarshal(stdout.Bytes(), &snap); err != nil || !snap.Rejected || snap.Env["APP_VALUE_A"] != "reject-me" {
		t.Errorf("stdout = %q (%v)", stdout.String(), err)
	}
	if !strings.Contains(stderr.String(), `env APP_VALUE_A contains "reject"`) {
		t.Errorf("stderr = %q, want the reason", stderr.String())
	}
}

func TestRunReadyThenExit(t *testing.T) {
	url, done, _ := startRun(t, t.Context(), []string{"APP_VALUE_A=bad", "APP_REJECT=bad", "APP_EXIT_CODE=3", "APP_FAIL_AFTER=500ms"})
	if code := httpGet(t, url+"/ready"); code != 200 {
		t.Errorf("/ready before the exit = %d, want 200", code)
	}
	select {
	case code := <-done:
		if code != 3 {
			t.Errorf("exit code = %d, want 3", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("did not exit")
	}
}

func TestRunSignal(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	url, done, stdout := startRun(t, ctx, []string{"APP_VALUE_A=fine", "APP_REJECT=bad"})
	if code := httpGet(t, url+"/ready"); code != 200 {
		t.Errorf("/ready = %d", code)
	}
	if !strings.HasSuffix(stdout.String(), "\n") || strings.Count(stdout.String(), "\n") != 1 {
		t.Errorf("stdout = %q, want one JSON line", stdout.String())
	}
	cancel() // what SIGTERM does in main
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit code = %d, want 0", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("did not exit promptly")
	}
}

func TestRunSetupErrors(t *testing.T) {
	for _, env := range [][]string{{"APP_FAIL_MODE=nope"}, {"APP_DIRS=/does/not/exist"}, {"APP_LISTEN=256.0.0.1:1"}} {
		var out, errOut bytes.Buffer
		if code := run(t.Context(), env, &out, &errOut, nil); code != exitSetup {
			t.Errorf("%q: exit code %d, want %d (stderr %q)", env, code, exitSetup, errOut.String())
		}
	}
}

func TestReadyFlaps(t *testing.T) {
	clk := &clock{time.Now()}
	a, err := newApp(config{Reject: "x", FailMode: failFlap, FailAfter: 5 * time.Second, Flap: 10 * time.Second, Values: map[string]string{"APP_VALUE_A": "x"}}, clk.now)
	if err != nil {
		t.Fatal(err)
	}
	start := clk.t
	for _, step := range []struct {
		at    time.Duration
		ready bool
	}{{0, true}, {4 * time.Second, true}, {5 * time.Second, false}, {14 * time.Second, false}, {15 * time.Second, true}, {24 * time.Second, true}, {25 * time.Second, false}} {
		clk.t = start.Add(step.at)
		if got := a.ready(); got != step.ready {
			t.Errorf("ready at %v = %v, want %v", step.at, got, step.ready)
		}
	}
}

func TestRunOnce(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"APP_VALUE_A=good", "APP_REJECT=bad", "APP_ONCE=true", "APP_LISTEN=127.0.0.1:0"}, &stdout, &stderr, func(net.Addr) {
		t.Error("listened although it checks once and exits")
	}); code != 0 {
		t.Errorf("a good config checked once: exit code %d, want 0", code)
	}
	if code := run(t.Context(), []string{"APP_VALUE_A=bad", "APP_REJECT=bad", "APP_ONCE=true", "APP_EXIT_CODE=4", "APP_LISTEN=127.0.0.1:0"}, &stdout, &stderr, nil); code != 4 {
		t.Errorf("a bad config checked once: exit code %d, want 4", code)
	}
}

// APP_EXIT_FIRST: the first start exits 1 and leaves its file; the next
// start, finding it, runs.
func TestRunExitFirst(t *testing.T) {
	mark := filepath.Join(t.TempDir(), "started")
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"APP_EXIT_FIRST=" + mark, "APP_LISTEN=127.0.0.1:0"}, &stdout, &stderr, func(net.Addr) {
		t.Error("listened at its first start")
	}); code != 1 {
		t.Fatalf("first start: exit code %d, want 1 (%s)", code, stderr.String())
	}
	if _, err := os.Stat(mark); err != nil {
		t.Fatalf("the first start left no file: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	listened := make(chan struct{})
	go func() {
		<-listened
		cancel()
	}()
	if code := run(ctx, []string{"APP_EXIT_FIRST=" + mark, "APP_LISTEN=127.0.0.1:0"}, &stdout, &stderr, func(net.Addr) { close(listened) }); code != 0 {
		t.Fatalf("second start: exit code %d, want 0 on its stop (%s)", code, stderr.String())
	}
}
