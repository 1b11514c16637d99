package integration

import (
	"bytes"
	"fmt"
	osexec "os/exec"
	"testing"
)

// exec runs a command and returns its stdout, or an error with its stderr.
func exec(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	cmd := osexec.CommandContext(t.Context(), name, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s: %w\n%s", name, err, stderr.String())
	}
	return stdout.String(), nil
}
