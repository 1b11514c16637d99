//go:build !linux

package nodeconfig

import "fmt"

// Detect: cgroups are Linux's.
func Detect() (Mode, error) {
	return "", fmt.Errorf("%w: cgroups need Linux", ErrUnsupported)
}

// CheckHost: cgroups are Linux's.
func CheckHost(string) (Mode, error) { return Detect() }
