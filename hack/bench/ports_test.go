package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A configstamp that could not bind a port it was given (taken by another
// process after freePort let it go) is started again on other ports, three
// tries in all, and the error says why; any other early exit is not retried.
func TestStartRetriesAPortTakenMeanwhile(t *testing.T) {
	for name, tc := range map[string]struct {
		says  string
		tries int
		taken bool
	}{
		"port taken":  {says: "configstamp: while running the manager: listen tcp 127.0.0.1:32769: bind: address already in use", tries: 3, taken: true},
		"other error": {says: "configstamp: --kubeconfig: no such file", tries: 1},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			bin, logPath, count := filepath.Join(dir, "configstamp"), filepath.Join(dir, "configstamp.log"), filepath.Join(dir, "count")
			script := "#!/bin/sh\necho x >> " + count + "\necho '" + tc.says + "'\nexit 1\n"
			if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			_, err := startConfigstamp(t.Context(), bin, "kubeconfig", logPath, nil)
			runs, _ := os.ReadFile(count)
			if n := strings.Count(string(runs), "x"); n != tc.tries || errors.Is(err, errPortTaken) != tc.taken {
				t.Errorf("%d starts, error %v; want %d starts, a port-taken error %v", n, err, tc.tries, tc.taken)
			}
		})
	}
}
