package main

import (
	"math"
	"os"
	"runtime/debug"
	"testing"

	"github.com/go-logr/logr"
)

func TestTuneMemory(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(math.MaxInt64))
	for _, env := range []string{"GOGC", "GOMEMLIMIT"} {
		t.Setenv(env, "") // restores the variable after the test
		if err := os.Unsetenv(env); err != nil {
			t.Fatal(err)
		}
	}

	t.Setenv(memoryLimitEnv, "268435456") // 256Mi, as the Deployment passes it
	if err := tuneMemory(logr.Discard()); err != nil {
		t.Fatal(err)
	}
	if got, want := debug.SetMemoryLimit(-1), int64(241591910); got != want {
		t.Errorf("soft memory limit = %d, want %d (90%% of 256Mi)", got, want)
	}
	if got := debug.SetGCPercent(defaultGCPercent); got != defaultGCPercent {
		t.Errorf("GOGC = %d, want configstamp's default %d", got, defaultGCPercent)
	}

	t.Setenv("GOGC", "200")
	debug.SetGCPercent(200) // what the runtime read from GOGC at start
	if err := tuneMemory(logr.Discard()); err != nil {
		t.Fatal(err)
	}
	if got := debug.SetGCPercent(200); got != 200 {
		t.Errorf("GOGC from the environment overridden: %d", got)
	}

	for _, bad := range []string{"256Mi", "-1", "0"} {
		t.Setenv(memoryLimitEnv, bad)
		if err := tuneMemory(logr.Discard()); err == nil {
			t.Errorf("%s=%q accepted", memoryLimitEnv, bad)
		}
	}
}
