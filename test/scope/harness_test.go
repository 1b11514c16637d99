package scope

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configstamp/configstamp/test/framework"
)

func TestMain(m *testing.M) {
	stop, err := start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "scope:", err)
		if stop != nil {
			stop()
		}
		os.Exit(1)
	}
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "scope: logs kept in %s\n", dir)
		_ = env.CP.Stop()
		os.Exit(code)
	}
	stop()
	os.Exit(code)
}

// startConfigstamp runs one installation with args (plus the suite's: no
// debounce, no budget) and stops it when the test ends. Its log is in the
// suite's directory, named after the test.
func startConfigstamp(t *testing.T, name string, args ...string) *framework.Process {
	t.Helper()
	args = append([]string{"--debounce=0", "--max-concurrent-rollouts=0", "--halt-on-failure=false"}, args...)
	p, err := env.StartConfigstamp(t.Context(), filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+"-"+name+".log"), args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p
}

// namespace creates a namespace with a fixed name (the flags name it before it exists).
func namespace(t *testing.T, name string, labels map[string]string) string {
	t.Helper()
	if err := env.Client.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}); err != nil {
		t.Fatal(err)
	}
	return name
}

// auditEvent is what the tests read of an audit log line.
type auditEvent struct {
	AuditID    string `json:"auditID"`
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	UserAgent  string `json:"userAgent"`
	ObjectRef  *struct {
		Resource, Namespace, Name string
	} `json:"objectRef"`
	RequestReceived time.Time `json:"requestReceivedTimestamp"`
}

// configstampReads returns configstamp's list and watch requests of resources
// received at or after since, one per request (audit stages deduplicated).
func configstampReads(t *testing.T, since time.Time, resources ...string) []auditEvent {
	t.Helper()
	f, err := os.Open(env.CP.AuditLogPath())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	seen := map[string]bool{}
	var out []auditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev auditEvent
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.ObjectRef == nil || seen[ev.AuditID] {
			continue
		}
		if (ev.Verb != "list" && ev.Verb != "watch") || !strings.HasPrefix(ev.UserAgent, "configstamp") || ev.RequestReceived.Before(since) {
			continue
		}
		for _, r := range resources {
			if ev.ObjectRef.Resource == r {
				seen[ev.AuditID] = true
				out = append(out, ev)
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// byNamespace counts requests per "verb resource namespace" ("*" for cluster-wide).
func byNamespace(evs []auditEvent) map[string]int {
	out := map[string]int{}
	for _, ev := range evs {
		ns := ev.ObjectRef.Namespace
		if ns == "" {
			ns = "*"
		}
		out[ev.Verb+" "+ev.ObjectRef.Resource+" "+ns]++
	}
	return out
}
