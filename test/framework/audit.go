package framework

import (
	"bufio"
	"encoding/json"
	"os"
	"testing"
	"time"
)

// AuditEvent is what the suites read of one line of kube-apiserver's audit log.
type AuditEvent struct {
	AuditID         string          `json:"auditID"`
	Stage           string          `json:"stage"`
	Verb            string          `json:"verb"`
	RequestURI      string          `json:"requestURI"`
	UserAgent       string          `json:"userAgent"`
	ObjectRef       *AuditObjectRef `json:"objectRef"`
	RequestReceived time.Time       `json:"requestReceivedTimestamp"`
	SourceIPs       []string        `json:"sourceIPs"`
	User            struct {
		Username string `json:"username"`
	} `json:"user"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

// Write reports whether the request asked to change something.
func (ev AuditEvent) Write() bool {
	switch ev.Verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}

// From reports whether the request came from the address ip.
func (ev AuditEvent) From(ip string) bool {
	return len(ev.SourceIPs) > 0 && ev.SourceIPs[0] == ip
}

// AuditObjectRef is the object an audited request is about.
type AuditObjectRef struct {
	Resource  string `json:"resource"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// AuditEvents reads kube-apiserver's audit log (Config.AuditLog) as it is now
// and returns, in the order written, every event about an object (objectRef
// set), one per logged stage (a request once it completed; a watch also when
// its response started: AuditID ties them). Lines that do not parse are skipped.
func (e *Env) AuditEvents(t testing.TB) []AuditEvent {
	t.Helper()
	f, err := os.Open(e.CP.AuditLogPath())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var out []AuditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var ev AuditEvent
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.ObjectRef == nil {
			continue
		}
		out = append(out, ev)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
